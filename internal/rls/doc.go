// Package rls is fairgate's Envoy rate limit service: the gRPC service
// envoy.service.ratelimit.v3.RateLimitService (ShouldRateLimit) and the
// standard gRPC health service, configured with envoyproxy/ratelimit's own
// YAML format (parsed by internal/config), so that a gateway that speaks
// Envoy's protocol (Envoy, Istio, Contour, Emissary, Gloo) can point at
// fairgate in place of envoyproxy/ratelimit.
//
// Matching follows envoyproxy/ratelimit: for each entry of a request
// descriptor, key and value are looked up first, then a value ending in '*'
// as a prefix, then the key alone (any value, each value its own counter);
// a limit applies when the descriptor's last entry reaches a node with a
// rate_limit. What fairgate does differently, and why:
//   - the limit is GCRA with a burst of requests_per_unit (or another
//     algorithm from the config), not a fixed window, so a client cannot
//     pass twice the limit across a window boundary, and the reset time
//     is exact;
//   - all descriptors of one request are decided as one atomic batch: when
//     one is over its limit none is charged (envoyproxy/ratelimit charges
//     all of them); with a tenant key configured, a tenant's descriptors
//     share one Redis Cluster slot and one script call;
//   - a store outage follows the domain's fail mode: open (answer OK from
//     the in-process fallback limiter) or closed (UNAVAILABLE, or
//     OVER_LIMIT, as configured);
//   - in a domain with Charge (hits_addend: charge), the hits Envoy is
//     told to add are charged in full, into a debt of at most one burst,
//     as one settlement per call (store.Settler, an id made for the call),
//     and a descriptor's hits_addend of 0 is over its limit while its
//     counter is in debt: the token budget Envoy charges when a stream
//     ends (apply_on_stream_done), whose answer it ignores.
//
// Whoever calls, a [Bound] holds the memory of calls in flight: gRPC
// reads a call's whole message (up to MaxMessage) before any handler
// runs, so every call, of any method, and every /json request takes a
// place when its headers arrive, before its message is read, and past
// Limits.MaxCalls is refused at once (RESOURCE_EXHAUSTED; /json 503).
package rls
