// Package limiter is fairgate's policy engine: it turns "tenant acme calls
// POST /v1/reports" into the layers to check, decides them as one atomic
// store batch, and applies shadow mode and the fail mode.
//
// A [Policy] (plans, route classes, routes, anonymous routes, tenants) is
// compiled into an immutable [Snapshot]; a [Limiter] holds the snapshot in
// force and swaps it atomically when the config file is reloaded
// ([Limiter.SetPolicy]) or the run-time overlay in the [ControlStore]
// changes ([Limiter.Run] polls it; [Limiter.PutOverride] and
// [Limiter.PutPlan] write it after checking that it compiles).
//
// Layers, narrowest first: for a tenant, one layer per plan rule for the
// route class (the rule's limit and burst times the class's share; a class
// with share 1 adds none, and calendar quotas are counted only for the
// tenant as a whole), then one per plan rule for the tenant overall. An
// anonymous route (no tenant) has its own rules, keyed by client IP (IPv6
// per /64) or by the hashed credential. All layers of one request share a
// Redis Cluster hash tag and go to the store as one batch: all or nothing.
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
// The package imports store and algo, never a backend; the daemon wires
// the backends. Every exported type is safe for concurrent use.
package limiter
