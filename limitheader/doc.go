// Package limitheader formats a [limiter.Decision] as rate-limit response
// headers, the one implementation of each form fairgate writes: the
// early IETF drafts' RateLimit-Limit, -Remaining and -Reset ([Draft], the
// default), the current draft's structured RateLimit and RateLimit-Policy
// ([Structured]), and X-RateLimit-* ([X]), each with its concurrency
// headers and, for a layer that counts a measured cost's unit rather
// than requests, that unit ([UnitHeader], [UnitParam], [XUnitHeader]);
// and Retry-After ([RetryAfter]: whole seconds, rounded up, at least 1).
//
// It writes names and values only: package httplimit puts them on
// net/http responses, package grpclimit on gRPC trailers, and the daemon
// on its decision API's answers and Envoy's. Header names are spelled as
// the drafts spell them ([Map], [Append]) or canonical ([Set], into an
// http.Header). Times are whole seconds, rounded up, never negative.
//
// Every function is safe for concurrent use.
package limitheader
