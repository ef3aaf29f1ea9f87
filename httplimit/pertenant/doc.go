// Package pertenant is per-tenant limits on a net/http server in one
// call, with the defaults a single service wants: the policy from a
// fairgate.yaml (package policyfile) or one limit for every tenant, on an
// in-process memory store unless a shared one is given.
//
//	h, err := pertenant.Wrap(mux, pertenant.Config{Limit: algo.PerMinute(600), Identify: tenantOf})
//	if err != nil { log.Fatal(err) }
//	log.Fatal(http.ListenAndServe(":8080", h))
//
// Each tenant Identify names gets the limit on its own. A request without
// a tenant is answered 401 unless the file limits its route as anonymous.
//
// It is a separate package so that a program that builds its policy in
// Go and calls [httplimit.Middleware] links neither the YAML decoder nor
// the memory store. For more (a shared Redis, run-time overrides,
// metrics, holding clients that do not wait), build a [limiter.Limiter]
// and use [httplimit.Middleware].
package pertenant
