// Package dash is fairgate's live dashboard: GET /dashboard, a page whose
// assets are embedded in the binary (no CDN: it works offline), polling
// GET /dashboard/data every second.
//
// The data comes from a [Source] read once a second: the daemon's numbers
// as values, read from the counters its metrics export (decisions per
// second by policy and outcome, the share limited, store latency p50/p99,
// fail-open and fail-closed decisions, breaker states, queue depths, the
// upstream capacity gate), never metrics looked up by name; and from a
// fixed-size heavy-hitters sketch of the limited tenants (never a map
// keyed by tenant). With a token, one tenant's budgets are looked up on
// demand (GET /dashboard/tenant, [Budgets]): each layer's limit,
// remaining and reset in its unit (requests, or a measured cost's such
// as tokens).
package dash
