// Package breaker keeps circuit breakers per downstream dependency (a
// billing API, a search cluster, the proxied upstream), built on
// sony/gobreaker: rate limits enforce fairness at a chosen rate, but do not
// protect a backend that is failing right now.
//
// A breaker every tenant shares must not be a switch one of them can
// flip, so each dependency has a breaker per party (a tenant, or an
// anonymous client by address: [Party], named in the call's context with
// [WithParty]) and a shared one. A party's failures open its own breaker
// only: after ConsecutiveFailures in a row, or when the failure ratio
// over the rolling Window reaches FailureRatio with at least MinRequests
// calls; then its calls alone fail at once with an *OpenError whose
// Caller is set. The shared breaker, which refuses everyone, opens only
// on evidence that the dependency itself is failing: the own breakers of
// at least half of the tenants that called it within Window, and at least
// MinParties of them, opened in that window (anonymous parties do not
// vote: an address is too cheap to come by); or the dependency refused
// connections; or calls made with no party (the operator's own) failed,
// by the same rule. While open, calls fail at once with an *OpenError
// carrying how long until a probe (answer 503 with that Retry-After).
// After Cooldown a breaker is half-open. A party's own lets one probe
// through; the shared one lets one probe per tenant through, and an
// anonymous call by chance (1 in 16, holding no place), so that no party
// and no number of addresses can hold the way back by keeping probes
// out; it closes on the first success, and opens again on a failure no
// party caused or when the probes of MinParties tenants fail. The parties' breakers are
// gobreakers; the shared one is this package's, since a gobreaker's one
// half-open probe is a slot any one client could hold.
//
// [Set.Do] wraps a Go call, [Transport] an http.RoundTripper (a transport
// error, or a status among FailureStatuses, 502, 503 and 504 by default,
// is a failure; the response is returned as it came). A caller's own
// cancellation or unreadable request body is not the dependency's
// failure, and a call marked [Uncounted] (a CORS preflight) counts for
// nothing. Every type is safe for concurrent use.
//
// This package is not the store's breaker: package limiter keeps one per
// store failure domain, shared by every caller since no caller can make
// the store fail, with a 2 s default cooldown since while it is open every
// decision is degraded. A dependency's failures may be one party's doing,
// hence the parties here, and its probe is a real call to a recovering
// dependency, hence the 30 s default. docs/jobs.md compares the two.
//
// Metrics, labelled by dependency (a name from the config):
// fairgate_dependency_breaker_state (0 closed, 1 half-open, 2 open),
// fairgate_dependency_rejections_total (calls refused by the shared
// breaker), fairgate_dependency_party_trips_total and
// fairgate_dependency_party_rejections_total (parties' own breakers).
//
// Clock: the per-party breakers are sony/gobreaker's, which read time.Now
// themselves and take no clock, so the shared breaker reads time.Now too:
// one clock for every breaker of a dependency. Tests run under
// testing/synctest, whose fake time both follow.
package breaker
