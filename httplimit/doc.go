// Package httplimit puts fairgate's decisions on HTTP: net/http middleware
// around a [limiter.Limiter], the rate-limit response headers in the three
// forms fairgate offers ([Draft], [Structured], [X]) and Retry-After (their
// formats are package limitheader's, shared with grpclimit), and the
// problem+json bodies of 429, 503 and 401 (package problem). [Gated]
// adds a fair share of the handler's concurrency (package fairshare)
// after the limits.
//
// The limiter and its policy are the caller's: httplimit links neither
// the YAML decoder nor a store. Package pertenant (httplimit/pertenant)
// builds them too, from a fairgate.yaml or one limit, on an in-process
// store.
//
// A request of a class with a measured cost (tokens, rows: see
// docs/cost.md) is charged the estimate its header or JSON body gives,
// its answer is metered as it is written (package costmeter: header,
// trailer, JSON body, server-sent events; a stream still streams), and
// it is settled at its true cost when the handler returns, by the rules
// of [SettleRule]; a handler that knows the cost itself says so with
// [SetCost].
//
// The tenant comes from a function the caller passes, which must derive it
// from a verified credential; the middleware never reads it from a header.
// Store failures are decided by each policy's fail mode in the limiter;
// the middleware writes what it decided.
package httplimit
