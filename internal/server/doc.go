// Package server is fairgate's HTTP service: the reverse proxy, the
// decision API, forward auth, the worker APIs, the admin API, and health.
//
// With an upstream (Config.Upstream) the Server serves the public
// listener, in reach of tenants' clients, and Server.Internal the internal
// one, which only the operator's own services reach; without one, the
// Server serves both groups on one listener. NewAdmin's handler has a
// listener of its own. Every endpoint, with the file that serves it:
//
// Public:
//
//	ANY    /                          the reverse proxy to the upstream         proxy.go, capacity.go
//	GET    /healthz                   the process serves                        health.go
//	GET    /v1/me/limits              the caller's own limits and queues        melimits.go
//	POST   /v1/jobs/{kind}            enqueue a job for the caller's tenant     jobs.go
//	GET    /v1/jobs/{id}              one of the caller's jobs                  jobs.go
//
// Internal (the internal token, when set, guards each but the probes,
// /openapi.json, /v1/authz and the dashboard; the worker token, when set,
// also guards the worker endpoints):
//
//	GET    /healthz                   the process serves                        health.go
//	GET    /readyz                    this instance can answer                  health.go
//	GET    /openapi.json              the API's description                     health.go
//	POST   /v1/take                   a limit on any key, given in the request  take.go
//	POST   /v1/check                  a tenant's decision for a gateway         check.go
//	POST   /v1/settle                 a measured cost's true cost, by handle    settle.go
//	POST   /v1/concurrency/acquire    take a tenant's concurrency slots         concurrency.go
//	POST   /v1/concurrency/release    give them back                            concurrency.go
//	ANY    /v1/authz                  forward auth (Envoy's ext_authz adds the  authz.go
//	                                  original path after it)
//	POST   /v1/outbound/acquire       a provider quota's call (workers)         outbound.go
//	POST   /v1/outbound/pause         pause a provider or a tenant (workers)    outbound.go
//	POST   /v1/jobs/{kind}/lease      lease a job (workers)                     jobs.go
//	POST   /v1/jobs/{id}/ack          finish it (workers)                       jobs.go
//	POST   /v1/jobs/{id}/nack         give it back to retry (workers)           jobs.go
//	GET    /metrics                   Prometheus (Config.Metrics)               server.go
//	POST   /json                      envoyproxy/ratelimit's (Config.RLSJSON)   server.go
//	GET    /healthcheck               envoyproxy/ratelimit's                    server.go
//	GET    /dashboard                 the dashboard's page (Config.Dashboard)   package dash
//	GET    /dashboard/data            its data                                  package dash
//	GET    /dashboard/tenant          a tenant's budget, in its units           package dash
//
// Admin (NewAdmin; Authorization: Bearer <admin token> on each):
//
//	GET    /admin/tenants             the tenants with run-time entries         admin.go
//	GET    /admin/tenants/{id}        a tenant's effective limits and entry     admin.go
//	PUT    /admin/tenants/{id}        set its plan and overrides                admin.go
//	DELETE /admin/tenants/{id}        clear its entry                           admin.go
//	GET    /admin/plans/{name}        a plan in force                           admin.go
//	PUT    /admin/plans/{name}        set a plan's rules at run time            admin.go
//	POST   /admin/reload              reload the config file                    admin.go
//	GET    /admin/config              the policy in force                       admin.go
//	POST   /admin/keys                make a stored API key                     adminkeys.go
//	GET    /admin/keys                list the keys                             adminkeys.go
//	GET    /admin/keys/{id}           one key's record                          adminkeys.go
//	PATCH  /admin/keys/{id}           change its label or expiry                adminkeys.go
//	DELETE /admin/keys/{id}           revoke it                                 adminkeys.go
//
// The other files: server.go registers the routes; identity.go verifies
// credentials; notfound.go answers the paths a listener does not serve,
// naming the listener that does; metrics.go and trace.go observe both
// surfaces; wire.go appends the decision API's answers; adminbody.go holds the admin API's
// request bodies and adminview.go its answers. The HTTP room every front
// uses is httpbody.go (every request body is read by readJSON, into a
// struct whose json tags are the one list of its fields), httpanswer.go
// (JSON answers) and httpguard.go (methods, tokens, panics). Problems are
// package problem's, rate-limit headers package limitheader's.
//
// Nothing a client sends can crash or stall the server: bodies are capped,
// decoding is strict, every store call has a deadline, and errors are
// problem+json.
package server
