// Package grpclimit puts fairgate's decision path in front of a Go gRPC
// service, as package httplimit does for net/http: server interceptors,
// unary and stream, that decide each call with a limiter.Limiter.
//
// A call is matched against the policy's routes as "POST /<full method>"
// (such as "POST /acme.v1.Search/Query"), so routes, classes and costs
// work as for HTTP. A call over its limit fails with RESOURCE_EXHAUSTED
// carrying a google.rpc.RetryInfo detail with the exact delay; a call that
// cannot be decided on a fail-closed route fails with UNAVAILABLE (also
// with RetryInfo). The rate-limit headers are sent as trailing metadata
// (lower-case keys: ratelimit-limit, ratelimit-remaining, ratelimit-reset,
// retry-after), on admitted calls as well.
//
// The tenant comes only from Config.Identify, which must read a verified
// identity (a token checked against its issuer, the peer's mTLS
// certificate), never a value the client merely asserts. A stream is
// decided once, when it opens.
package grpclimit
