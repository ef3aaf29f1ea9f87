// Package quota limits calls to third-party providers (telephony,
// messaging, email, LLM APIs) that enforce their own limits, and shares
// each provider's budget between tenants.
//
// From a provider's side the whole platform is one account, so over the
// limit the right answer is to wait, not to reject: [Quotas.Acquire] waits
// until both the tenant's share and the provider's account-wide budget
// admit, and gives up with a [*DeadlineError] carrying the delay to
// re-queue the job with once waiting would pass its deadline, so a worker
// is never held for long. The share and the budget are one atomic batch in
// the store, the share first: a tenant over its share is refused without
// spending anything of the budget, so one tenant's campaign cannot eat the
// budget of the others.
//
// Pauses. When a provider answers a call made for a tenant 429 or 503 with
// Retry-After, [Quotas.PauseTenant] pauses that tenant's calls for that
// long in the shared store, on every instance, and no one else's: many
// providers limit per end user or per destination, and one tenant must not
// stop the others. The provider itself, for every tenant, is paused only
// on evidence that its account-wide budget is out: such answers for a
// quorum of tenants within Window (at least half of the tenants that called
// it through the instance in that window, and at least MinTenants, 2 by
// default), an answer to the operator's own call ([ForOperator]), or the
// operator's [Quotas.Pause]. [Transport] acquires and pauses around an
// http.Client. The quorum is counted in each process (bounded); the
// pauses are in the store.
//
// Keys. All of a provider's keys share one Redis Cluster hash tag, so the
// pause, the share and the budget are decided in one script call:
//
//	ob:{p:<provider>}:all                 the account-wide budget
//	ob:{p:<provider>}:t:<tenant>          a tenant's share (the ID escaped as in package limiter)
//	ob:{p:<provider>}:pause:t:<tenant>    a tenant's pause, living as long as the pause (at most MaxPause)
//
// A tenant ID cannot reach another tenant's key or another provider's tag:
// it is escaped (and hashed once escaped past 64 bytes) by
// [policy.TenantTag], and provider names are restricted to lower-case
// letters, digits, '-' and '_'.
//
// Units and time. Limits are [algo.Limit] values (integer counts per
// time.Duration); the budget must be GCRA, since a pause holds a GCRA key.
// Decisions use the store's clock (Redis TIME on Redis); the waits between
// tries use the process's clock.
//
// Concurrency. [Quotas] and [Transport] are safe for concurrent use; a
// config reload swaps the providers atomically ([Quotas.SetProviders]).
// Every store call has a deadline (Config.Timeout) and goes through a
// circuit breaker (package store/guard: while the store is out, calls are
// refused at once), and a store error ends an Acquire with an error rather
// than a fallback: the store is the only place the budget is known across
// instances, so the caller re-queues.
package quota
