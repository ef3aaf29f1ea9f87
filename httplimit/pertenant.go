package httplimit

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/policy/policyfile"
	"github.com/fairgate/fairgate/store"
	"github.com/fairgate/fairgate/store/memstore"
)

// PerTenant is the common case in one value: per-tenant limits on a
// net/http server, from a config file or from one limit.
//
//	h, err := httplimit.PerTenant{Limit: algo.PerMinute(600), Identify: tenantOf}.Wrap(mux)
//	if err != nil { log.Fatal(err) }
//	log.Fatal(http.ListenAndServe(":8080", h))
//
// Each tenant Identify names gets the limit on its own. A request without
// a tenant is answered 401 unless the file limits its route as anonymous.
// For more (a shared Redis, run-time overrides, metrics, holding
// clients that do not wait), build a [limiter.Limiter] and use
// [Middleware].
type PerTenant struct {
	// File is a fairgate.yaml to read the policy from (see package
	// policyfile). Empty means Limit.
	File string
	// Limit is every tenant's limit when File is empty.
	Limit algo.Limit
	// Identify returns the request's verified identity, as in
	// [Config].Identify. Required.
	Identify func(r *http.Request) (policy.Identity, error)
	// Headers is the header form. "" means Draft.
	Headers Form
	// Fail is what happens with Limit when Store cannot answer: zero means
	// open (decided by an in-process fallback), FailClosed answers 503. A
	// File gives each class its own.
	Fail policy.FailMode
	// Store decides. Nil means an in-process memory store: each process
	// limits on its own. Give a shared one (package redisstore) to share
	// the limits between instances.
	Store store.Store
}

// Wrap returns next behind p's limits: allowed requests get the
// rate-limit headers and reach next; the others get 429 (or 503) with
// Retry-After and a problem+json body.
func (p PerTenant) Wrap(next http.Handler) (http.Handler, error) {
	if p.Identify == nil {
		return nil, errors.New("httplimit: PerTenant.Identify is required: it names the verified tenant of a request")
	}
	pol, err := p.policy()
	if err != nil {
		return nil, err
	}
	c := limiter.Config{Store: p.Store, Policy: pol}
	if c.Store == nil {
		c.Store = memstore.New(memstore.Config{})
	} else {
		c.Fallback = memstore.New(memstore.Config{})
	}
	lim, err := limiter.New(c)
	if err != nil {
		return nil, err
	}
	mw, err := Middleware(Config{Limiter: lim, Identify: p.Identify, Headers: p.Headers})
	if err != nil {
		return nil, err
	}
	return mw(next), nil
}

// policy is the file's policy, or one plan of Limit with one class.
func (p PerTenant) policy() (policy.Policy, error) {
	if p.File != "" {
		return policyfile.Load(p.File)
	}
	if err := p.Limit.Validate(); err != nil {
		return policy.Policy{}, fmt.Errorf("httplimit: PerTenant.Limit: %w", err)
	}
	return policy.Policy{
		DefaultPlan:  "default",
		DefaultClass: "default",
		Plans:        map[string]policy.Plan{"default": {Rules: []policy.Rule{{Name: "limit", Limit: p.Limit}}}},
		Classes:      map[string]policy.Class{"default": {Fail: p.Fail}},
	}, nil
}
