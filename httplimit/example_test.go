package httplimit_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/httplimit"
	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/store/memstore"
)

// tenantOf stands for your verified authentication: here an API key
// looked up in a table, never a header the client could set freely.
func tenantOf(r *http.Request) (policy.Identity, error) {
	switch r.Header.Get("X-API-Key") {
	case "key-acme":
		return policy.Identity{Tenant: "acme"}, nil
	case "key-globex":
		return policy.Identity{Tenant: "globex"}, nil
	case "":
		return policy.Identity{}, nil
	}
	return policy.Identity{}, errors.New("unknown API key")
}

func get(h http.Handler, key string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("GET", "/v1/users/1", nil)
	r.Header.Set("X-API-Key", key)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// Middleware with a limiter of your own: a plan, a class at half the
// plan's limit for search, and the IETF draft's structured headers.
func ExampleMiddleware() {
	lim, err := limiter.New(limiter.Config{
		Store: memstore.New(memstore.Config{Now: func() time.Time { return time.Unix(1e9, 0) }}),
		Policy: policy.Policy{
			DefaultPlan: "free", DefaultClass: "read",
			Plans:   map[string]policy.Plan{"free": {Rules: []policy.Rule{{Limit: algo.PerMinute(60).WithBurst(4)}}}},
			Classes: map[string]policy.Class{"read": {}, "search": {Share: 0.5}},
			Routes:  []policy.Route{{Pattern: "GET /v1/users/{id}", Class: "search"}},
		},
	})
	if err != nil {
		panic(err)
	}
	mw, err := httplimit.Middleware(httplimit.Config{Limiter: lim, Identify: tenantOf, Headers: httplimit.Structured})
	if err != nil {
		panic(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, _ := httplimit.DecisionFrom(r.Context())
		fmt.Fprint(w, d.Resolution.Plan)
	}))
	for range 3 {
		w := get(h, "key-acme")
		last := "plan " + w.Body.String()
		if w.Code != http.StatusOK {
			last = "retry after " + w.Header().Get("Retry-After") + "s"
		}
		fmt.Println(w.Code, w.Header().Get("RateLimit"), last)
	}
	// Output:
	// 200 "free.search.1m";r=1;t=2 plan free
	// 200 "free.search.1m";r=0;t=4 plan free
	// 429 "free.search.1m";r=0;t=4 retry after 2s
}

// A measured cost the answer does not carry: the handler knows the true
// cost itself (the rows an export scanned) and says so with SetCost. The
// request is charged its estimate when admitted (here the class's
// default, 100) and settled at the handler's cost when it returns. A
// cost in the answer (a header, a trailer, a JSON body, the last
// server-sent event) needs no code: the class's measure reads it.
func ExampleSetCost() {
	now := time.Unix(1e9, 0)
	lim, err := limiter.New(limiter.Config{
		Store: memstore.New(memstore.Config{Now: func() time.Time { return now }}),
		Now:   func() time.Time { return now },
		Policy: policy.Policy{
			DefaultPlan: "free", DefaultClass: "export",
			Plans: map[string]policy.Plan{"free": {Rules: []policy.Rule{{Limit: algo.Limit{Limit: 10_000, Period: time.Hour, Burst: 10_000}}}}},
			Classes: map[string]policy.Class{"export": {Cost: &policy.MeasuredCost{Unit: "rows",
				Estimate: policy.Estimate{Default: 100, Cap: 5000},
				Measure:  policy.Measure{Header: "X-Rows"}}}},
		},
	})
	if err != nil {
		panic(err)
	}
	mw, err := httplimit.Middleware(httplimit.Config{Limiter: lim, Identify: tenantOf,
		Settled: func(r *http.Request, s httplimit.Settled) {
			fmt.Printf("charged %d, settled at %d (%s): %d rows left\n", s.Estimate, s.Cost, s.Rule, s.Outcome.Layers[0].Remaining)
		}})
	if err != nil {
		panic(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rows := int64(2345) // what the export scanned
		httplimit.SetCost(r.Context(), rows)
		fmt.Fprintln(w, "exported")
	}))
	get(h, "key-acme")
	// Output:
	// charged 100, settled at 2345 (handler): 7655 rows left
}
