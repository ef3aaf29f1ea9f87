package pertenant

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/httplimit"
	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/limitheader"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/policy/policyfile"
	"github.com/fairgate/fairgate/store"
	"github.com/fairgate/fairgate/store/memstore"
)

// Config is the common case in one value: per-tenant limits from a config
// file or from one limit, on an in-process store unless given another.
type Config struct {
	// File is a fairgate.yaml to read the policy from (see package
	// policyfile). Empty means Limit.
	File string
	// Limit is every tenant's limit when File is empty.
	Limit algo.Limit
	// Identify returns the request's verified identity, as in
	// [httplimit.Config].Identify. Required.
	Identify func(r *http.Request) (policy.Identity, error)
	// Headers is the header form. "" means [limitheader.Draft].
	Headers limitheader.Form
	// Fail is what happens with Limit when Store cannot answer: zero means
	// open (decided by an in-process fallback), FailClosed answers 503. A
	// File gives each class its own.
	Fail policy.FailMode
	// Store decides. Nil means an in-process memory store: each process
	// limits on its own. Give a shared one (package redisstore) to share
	// the limits between instances.
	Store store.Store
}

// Wrap returns next behind c's limits: allowed requests get the
// rate-limit headers and reach next; the others get 429 (or 503) with
// Retry-After and a problem+json body (see [httplimit.Middleware]).
func Wrap(next http.Handler, c Config) (http.Handler, error) {
	if c.Identify == nil {
		return nil, errors.New("pertenant: Config.Identify is required: it names the verified tenant of a request")
	}
	pol, err := c.policy()
	if err != nil {
		return nil, err
	}
	lc := limiter.Config{Store: c.Store, Policy: pol}
	if lc.Store == nil {
		lc.Store = memstore.New(memstore.Config{})
	} else {
		lc.Fallback = memstore.New(memstore.Config{})
	}
	lim, err := limiter.New(lc)
	if err != nil {
		return nil, err
	}
	mw, err := httplimit.Middleware(httplimit.Config{Limiter: lim, Identify: c.Identify, Headers: c.Headers})
	if err != nil {
		return nil, err
	}
	return mw(next), nil
}

// policy is the file's policy, or one plan of Limit with one class.
func (c Config) policy() (policy.Policy, error) {
	if c.File != "" {
		return policyfile.Load(c.File)
	}
	if err := c.Limit.Validate(); err != nil {
		return policy.Policy{}, fmt.Errorf("pertenant: Config.Limit: %w", err)
	}
	return policy.Policy{
		DefaultPlan:  "default",
		DefaultClass: "default",
		Plans:        map[string]policy.Plan{"default": {Rules: []policy.Rule{{Name: "limit", Limit: c.Limit}}}},
		Classes:      map[string]policy.Class{"default": {Fail: c.Fail}},
	}, nil
}
