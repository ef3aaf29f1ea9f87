// Package guard calls a [store.Store] the way a rate limiter must: under
// a deadline ([Config].Timeout, one shared context per millisecond), through
// circuit breakers (one per failure domain of a [store.Sharded], so a lost
// Redis Cluster master stops only its own slots), timed
// (fairgate_store_call_seconds) and traced, and, when the store fails,
// decided in one place by the fail mode ([Guard.Fail]): fail closed is
// [Unavailable]; fail open is [Degraded], decided by an in-process
// fallback store at this instance's share of each limit, or admitted when
// there is none.
//
// [Guard.Take] is all of it for checks given directly (the /v1/take API,
// the Envoy service), with a near cache of rejected keys ([NearCache]) in
// front for single checks. [Guard.Call] is the store call alone, for a
// caller that decides a failure itself (package limiter's pipeline, its
// leases and peeks). [Guard.Settle] applies a settlement of measured
// costs under the same deadline and breakers, retrying it with the same id
// within a bound and counting what it applied and what failed.
// [Guard.AcquireSlots], [Guard.RenewSlots] and [Guard.ReleaseSlots] are
// the concurrency-slot calls under the same deadline and breakers.
//
// The package is not a policy engine: it knows checks, not tenants,
// classes or layers (package limiter). It imports store, algo, policy
// (for [policy.FailMode]) and promshare, never a backend. A Guard is safe
// for concurrent use.
package guard
