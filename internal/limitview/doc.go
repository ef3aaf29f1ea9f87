// Package limitview is the one JSON form of a tenant's limits with their
// state (the layers of a limiter.TenantLimits), as GET /v1/me/limits,
// the admin API's GET /admin/tenants/{id} and the dashboard's
// GET /dashboard/tenant show them: docs/openapi.json's LayerState. Limits,
// bursts and remaining are counted in each layer's unit (requests, or a
// measured cost's such as tokens); durations are in milliseconds, a reset
// rounded up. It holds no state: every function is safe for concurrent
// use.
package limitview
