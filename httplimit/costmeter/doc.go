// Package costmeter reads the true cost of a measured-cost request (see
// [policy.MeasuredCost]) from its answer as the answer is written: a
// response header, a trailer, a JSON path of the body, or the last
// server-sent event whose JSON data carries the path. The HTTP middleware
// (package httplimit) wraps a handler's ResponseWriter in a [Writer] and
// settles the request at the cost the Writer read; fairgate's reverse
// proxy runs behind that middleware.
//
// The bytes go to the client unchanged and at once: a [Writer] passes
// every Write and flush through before it looks at them, and unwraps to
// the writer it wraps (http.ResponseController reaches the connection's
// flushes and deadlines). It never buffers the answer: it copies at most
// [MaxBody] bytes of a JSON body (parsed when the answer ends; a body over
// the bound is not measured) and at most [MaxEvent] bytes of one event's
// data (an event over the bound is skipped). A gzip-encoded JSON body is
// decompressed when the answer ends, up to MaxBody; any other content
// coding, or an encoded event stream, is not measured.
//
// Counts follow [policy.JSONCount]: a non-negative number, a fraction
// rounded up, at most algo.MaxCount; a header or trailer holds a decimal
// integer. A member name must be written as itself, not with \u escapes
// (every JSON encoder does): an event or body without the name's bytes is
// not parsed at all.
//
// What it reads is attacker-fed (the upstream's bytes, a handler's), so
// every bound holds whatever the input: memory, and time linear in the
// bytes. A Meter or a Writer serves one response and is not safe for
// concurrent use.
package costmeter
