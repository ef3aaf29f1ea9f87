// Package limiter is fairgate's decision engine: it resolves a request
// with the [policy.Snapshot] in force and decides its layers as one atomic
// store batch, applying the near cache, unit grants, shadow mode and the fail
// mode.
//
// A [Limiter] embeds its [Policies]: the snapshot in force, swapped
// atomically when the config file is reloaded ([Policies.SetPolicy]) or
// the run-time overlay in the [ControlStore] changes ([Limiter.Run] polls
// it; [Policies.PutOverride] and [Policies.PutPlan] write it after
// checking that it compiles).
//
// The store is reached only through the limiter's [guard.Guard] (package
// store/guard), which holds the store deadline, the circuit breakers, the
// fallback, the one fail-mode switch ([guard.Guard.Fail]), the near cache
// of rejected keys, and the store's spans and metrics. Checks given
// directly (the /v1/take API, the Envoy service) go to the guard alone
// ([Limiter.Guard], [guard.Guard.Take]), sharing its breakers, fallback
// and near cache with the limiter's decisions.
//
// A decision ([Limiter.Decide]) reads the clock once and goes: resolve,
// near cache (a remembered rejection, held for the class's slow-down),
// unit grant (for a class with `lease` set), one store call through the guard,
// the shadow retry, then the verdict, or the guard's fail mode when the
// store failed. A request with concurrency layers takes its slots first,
// in one store call through the guard, after the near cache and before
// the unit grant; a rejected request gives them back at once.
// [Limiter.AcquireSlots] takes slots alone, through the guard and decided
// by the same fail mode, and [Limiter.ReleaseSlots] gives them back.
// [Limiter.Effective] reads a tenant's limits and their state with a
// cost-0 peek through the guard (its deadline and breakers, no fail
// mode), deciding nothing.
//
// Shadow layers (a shadow class's own layers, or a rule marked shadow) are
// decided like the others, but a rejection only counts
// (fairgate_shadow_rejections_total{policy}) and logs; the request is then
// decided again without the rejecting shadow layers, so a shadow limit
// never blocks nor stops enforced layers from being charged.
//
// A request of a class with a measured cost ([policy.MeasuredCost]) is
// charged its estimate; its admitted decision carries a [Settlement] (the
// layers it was charged on, the estimate, the store's time of the take
// and a random ID), and [Limiter.Settle] charges or refunds the difference
// to the true cost on the same keys, once per ID, through the guard's
// bounded retries ([guard.Guard.Settle]).
//
// When the store fails (error or timeout), fail open decides with the
// in-process Fallback store (each instance limits on its own) and reports
// ReasonDegradedOpen; fail closed rejects with ReasonUnavailable and a
// retry-after of [UnavailableRetryAfter].
//
// The package imports policy, store, store/guard and algo, never a
// backend; the daemon wires the backends. Every exported type is safe for
// concurrent use.
package limiter
