// Package limiter is fairgate's decision engine: it resolves a request
// with the [policy.Snapshot] in force and decides its layers as one atomic
// store batch, applying the near cache, leases, shadow mode and the fail
// mode.
//
// A [Limiter] holds the snapshot in force and swaps it atomically when the
// config file is reloaded ([Limiter.SetPolicy]) or the run-time overlay in
// the [ControlStore] changes ([Limiter.Run] polls it; [Limiter.PutOverride]
// and [Limiter.PutPlan] write it after checking that it compiles).
//
// A rate decision, whatever asks for it ([Limiter.Decide] for a request,
// [Limiter.TakeChecks] for checks given directly), goes through one
// pipeline: near cache, lease, store call under a deadline and a circuit
// breaker, then the fail mode and the fallback. A decision reads the clock
// once. Concurrency slots ([Limiter.AcquireSlots] alone, or the slot
// layers of a Decide) make their own store call, under the same deadline
// and breaker and decided by the same fail mode, before the rate layers;
// [Limiter.ReleaseSlots] gives them back. [Limiter.Effective] reads a
// tenant's limits and their state without deciding anything.
//
// Shadow layers (a shadow class's own layers, or a rule marked shadow) are
// decided like the others, but a rejection only counts
// (fairgate_shadow_rejections_total{policy}) and logs; the request is then
// decided again without the rejecting shadow layers, so a shadow limit
// never blocks nor stops enforced layers from being charged.
//
// When the store fails (error or timeout), fail open decides with the
// in-process Fallback store (each instance limits on its own) and reports
// ReasonDegradedOpen; fail closed rejects with ReasonUnavailable and a
// retry-after of [UnavailableRetryAfter].
//
// The package imports policy, store and algo, never a backend; the daemon
// wires the backends. Every exported type is safe for concurrent use.
package limiter
