package httplimit

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/store/memstore"
)

// TestSettleCost: the rules in their order, as docs/cost.md states them.
func TestSettleCost(t *testing.T) {
	const cap = 4000 // the estimate (700, say) never decides: a cost not known is the cap
	for _, tc := range []struct {
		name string
		a    answer
		want int64
		rule SettleRule
	}{
		{"the handler's cost, whatever else", answer{hasHandler: true, handler: 5, hasMeasured: true, measured: 9, status: 502, gone: true}, 5, RuleHandler},
		{"the handler's zero", answer{hasHandler: true, status: 200}, 0, RuleHandler},
		{"measured", answer{hasMeasured: true, measured: 9, status: 200}, 9, RuleMeasured},
		{"measured on an error", answer{hasMeasured: true, measured: 9, status: 500}, 9, RuleMeasured},
		{"measured, client gone", answer{hasMeasured: true, measured: 9, status: 200, gone: true}, 9, RuleMeasured},
		{"error status", answer{status: 502}, 1, RuleError},
		{"error status, client gone", answer{status: 503, gone: true}, 1, RuleError},
		{"refused", answer{status: 400}, 1, RuleRefused},
		{"the upstream's 429", answer{status: 429}, 1, RuleRefused},
		{"client gone before the answer", answer{gone: true}, cap, RuleClientGone},
		{"client gone mid-answer", answer{status: 200, gone: true, aborted: true}, cap, RuleClientGone},
		{"handler failed before answering", answer{aborted: true}, 1, RuleError},
		{"answer cut (by the upstream, or a client reading slowly)", answer{status: 200, aborted: true}, cap, RuleCut},
		{"complete, no cost", answer{status: 200}, cap, RuleUnmeasured},
		{"redirect, no cost", answer{status: 302}, cap, RuleUnmeasured},
		{"nothing written (an empty 200)", answer{}, cap, RuleUnmeasured},
	} {
		got, rule := settleCost(tc.a, cap)
		if got != tc.want || rule != tc.rule {
			t.Errorf("%s: settleCost = %d, %s; want %d, %s", tc.name, got, rule, tc.want, tc.rule)
		}
	}
}

// measuredLimiter is a limiter on a memory store with a clock that does
// not move: plan pro at 100,000 tokens (nothing refills while a test
// runs), class llm measured in tokens on POST /v1/chat (estimate
// X-Max-Tokens or max_tokens, default 500, cap 4000; measured from
// X-Usage-Tokens, its trailer, usage.total_tokens of a JSON body or of
// the last event).
func measuredLimiter(t testing.TB) *limiter.Limiter {
	now := time.Unix(1_800_000_000, 0)
	l, err := limiter.New(limiter.Config{
		Store: memstore.New(memstore.Config{Now: func() time.Time { return now }}),
		Now:   func() time.Time { return now },
		Policy: policy.Policy{
			DefaultPlan: "pro", DefaultClass: "read",
			Plans: map[string]policy.Plan{"pro": {Rules: []policy.Rule{{Limit: algo.Limit{Limit: 100_000, Period: time.Hour, Burst: 100_000}}}}},
			Classes: map[string]policy.Class{"read": {}, "llm": {Cost: &policy.MeasuredCost{Unit: "tokens",
				Estimate: policy.Estimate{Header: "X-Max-Tokens", JSON: "max_tokens", Default: 500, Cap: 4000},
				Measure:  policy.Measure{Header: "X-Usage-Tokens", Trailer: "X-Usage-Tokens", JSON: "usage.total_tokens", SSE: "usage.total_tokens"}}}},
			Routes: []policy.Route{{Pattern: "POST /v1/chat", Class: "llm"}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// tenantHeader takes the tenant from X-Test-Tenant: for tests only.
func tenantHeader(r *http.Request) (policy.Identity, error) {
	return policy.Identity{Tenant: r.Header.Get("X-Test-Tenant")}, nil
}

// TestMiddlewareSettles: each kind of answer settles the request by its
// rule, and the tenant's remaining is its full limit less exactly that
// cost; the handler reads the body whole after the estimate was read.
func TestMiddlewareSettles(t *testing.T) {
	l := measuredLimiter(t)
	var got []Settled
	mw, err := Middleware(Config{Limiter: l, Identify: tenantHeader, Settled: func(r *http.Request, s Settled) { got = append(got, s) }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, goAway := context.WithCancel(context.Background())
	bigBody := `{"max_tokens": 900, "pad": "` + strings.Repeat("x", MaxEstimateBody) + `"}`
	for i, tc := range []struct {
		name, body string
		reqHeader  http.Header
		ctx        context.Context
		handler    func(w http.ResponseWriter, r *http.Request)
		wantEst    int64
		want       int64
		rule       SettleRule
	}{
		{name: "header", body: `{"max_tokens": 900}`, handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Usage-Tokens", "1234")
			io.WriteString(w, "{}")
		}, wantEst: 900, want: 1234, rule: RuleMeasured},
		{name: "trailer", reqHeader: http.Header{"X-Max-Tokens": {"2000"}}, handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Trailer", "X-Usage-Tokens")
			io.WriteString(w, "{}")
			w.Header().Set("X-Usage-Tokens", "2500")
		}, wantEst: 2000, want: 2500, rule: RuleMeasured},
		{name: "json body", body: `{"max_tokens": 3000}`, handler: func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, `{"choices": [], "usage": {"total_tokens": 45}}`)
		}, wantEst: 3000, want: 45, rule: RuleMeasured},
		{name: "sse", handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: {\"usage\":null}\n\n")
			w.(http.Flusher).Flush()
			io.WriteString(w, "data: {\"usage\":{\"total_tokens\":6100}}\n\ndata: [DONE]\n\n")
		}, wantEst: 500, want: 6100, rule: RuleMeasured},
		{name: "bad gateway", body: `{"max_tokens": 900}`, handler: func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusBadGateway)
		}, wantEst: 900, want: 1, rule: RuleError},
		{name: "bad request", body: `{"max_tokens": 900}`, handler: func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "no such model", http.StatusBadRequest)
		}, wantEst: 900, want: 1, rule: RuleRefused},
		{name: "no cost in the answer", body: `{"max_tokens": 900}`, handler: func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, `{"choices": []}`)
		}, wantEst: 900, want: 4000, rule: RuleUnmeasured}, // the cap: the cost is not known
		{name: "the handler's cost", body: `{"max_tokens": 900}`, handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Usage-Tokens", "1")
			if !SetCost(r.Context(), 321) {
				t.Error("SetCost refused")
			}
			w.WriteHeader(http.StatusInternalServerError)
		}, wantEst: 900, want: 321, rule: RuleHandler},
		{name: "client gone", body: `{"max_tokens": 900}`, ctx: ctx, handler: func(w http.ResponseWriter, r *http.Request) {
			goAway() // as net/http does when the connection closes
		}, wantEst: 900, want: 4000, rule: RuleClientGone}, // the cap, not the client's own estimate
		{name: "panic before answering", body: `{"max_tokens": 900}`, handler: func(w http.ResponseWriter, r *http.Request) {
			panic(http.ErrAbortHandler)
		}, wantEst: 900, want: 1, rule: RuleError},
		{name: "panic mid-answer", body: `{"max_tokens": 900}`, handler: func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "data: ")
			panic(http.ErrAbortHandler)
		}, wantEst: 900, want: 4000, rule: RuleCut},
		{name: "body over the bound: the default", body: bigBody, handler: func(w http.ResponseWriter, r *http.Request) {}, wantEst: 500, want: 4000, rule: RuleUnmeasured},
		{name: "body not JSON: the default", body: `max_tokens=900`, handler: func(w http.ResponseWriter, r *http.Request) {}, wantEst: 500, want: 4000, rule: RuleUnmeasured},
		{name: "estimate over the cap", body: `{"max_tokens": 90000}`, handler: func(w http.ResponseWriter, r *http.Request) {}, wantEst: 4000, want: 4000, rule: RuleUnmeasured},
	} {
		tenant := fmt.Sprintf("t%d", i)
		var read string
		h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			read = string(b)
			tc.handler(w, r)
		}))
		r := httptest.NewRequest("POST", "/v1/chat", strings.NewReader(tc.body))
		if tc.ctx != nil {
			r = r.WithContext(tc.ctx)
		}
		for k, vs := range tc.reqHeader {
			r.Header[k] = vs
		}
		r.Header.Set("X-Test-Tenant", tenant)
		got = nil
		func() {
			defer func() { recover() }()
			h.ServeHTTP(httptest.NewRecorder(), r)
		}()
		if read != tc.body {
			t.Errorf("%s: the handler read %d bytes of the body, want all %d", tc.name, len(read), len(tc.body))
		}
		if len(got) != 1 {
			t.Errorf("%s: settled %d times, want once", tc.name, len(got))
			continue
		}
		s := got[0]
		if s.Estimate != tc.wantEst || s.Cost != tc.want || s.Rule != tc.rule || s.Err != nil {
			t.Errorf("%s: settled %+v; want estimate %d, cost %d by rule %s", tc.name, s, tc.wantEst, tc.want, tc.rule)
		}
		if len(s.Outcome.Layers) != 1 || s.Outcome.Layers[0].Remaining != 100_000-tc.want {
			t.Errorf("%s: layers after %+v; want remaining %d: the true cost charged, no more", tc.name, s.Outcome.Layers, 100_000-tc.want)
		}
	}
}

// TestMiddlewareFixedCostUnsettled: a request of a fixed-cost class is
// neither metered nor settled, and SetCost says so; its body is not read
// before the handler.
func TestMiddlewareFixedCostUnsettled(t *testing.T) {
	settled := 0
	mw, err := Middleware(Config{Limiter: measuredLimiter(t), Identify: tenantHeader, Settled: func(*http.Request, Settled) { settled++ }})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := r.Body.(*replayBody); ok {
			t.Error("the body of a fixed-cost request was read ahead")
		}
		if _, ok := w.(interface{ Cost() (int64, bool) }); ok {
			t.Error("the writer of a fixed-cost request is metered")
		}
		if SetCost(r.Context(), 5) {
			t.Error("SetCost took a cost for a fixed-cost request")
		}
	}))
	r := httptest.NewRequest("POST", "/v1/other", strings.NewReader(`{"max_tokens": 9}`))
	r.Header.Set("X-Test-Tenant", "acme")
	h.ServeHTTP(httptest.NewRecorder(), r)
	if settled != 0 {
		t.Errorf("settled %d times", settled)
	}
	if SetCost(context.Background(), 5) {
		t.Error("SetCost outside the middleware: true")
	}
}

// TestMiddlewareBodyReadError: a body that fails while its estimate is
// read gives the handler the bytes read, then the same error.
func TestMiddlewareBodyReadError(t *testing.T) {
	mw, _ := Middleware(Config{Limiter: measuredLimiter(t), Identify: tenantHeader})
	var read string
	var readErr error
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		read, readErr = string(b), err
	}))
	r := httptest.NewRequest("POST", "/v1/chat", io.MultiReader(strings.NewReader(`{"max_tok`), failing{}))
	r.ContentLength = -1
	r.Header.Set("X-Test-Tenant", "acme")
	h.ServeHTTP(httptest.NewRecorder(), r)
	if read != `{"max_tok` || readErr != errBroken {
		t.Errorf("the handler read %q, %v; want the prefix and the body's error", read, readErr)
	}
}

// TestMiddlewareBodyReadWhole: a body read whole for its estimate is not
// read again: net/http closes a request's body once the answer's header
// is out, and a transport that reads on to see the body's end (as
// httputil.ReverseProxy's does, with a Content-Length) must find it
// ended, not closed, or it drops the upstream's connection mid-answer.
func TestMiddlewareBodyReadWhole(t *testing.T) {
	mw, _ := Middleware(Config{Limiter: measuredLimiter(t), Identify: tenantHeader})
	body := &onceBody{data: []byte(`{"max_tokens": 9}`)}
	var reads []string
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		reads = append(reads, fmt.Sprintf("%s %v", b, err))
		body.closed = true // as net/http does
		_, err = r.Body.Read(make([]byte, 8))
		reads = append(reads, fmt.Sprint(err))
	}))
	r := httptest.NewRequest("POST", "/v1/chat", body)
	r.Header.Set("X-Test-Tenant", "acme")
	h.ServeHTTP(httptest.NewRecorder(), r)
	if want := []string{`{"max_tokens": 9} <nil>`, "EOF"}; !slices.Equal(reads, want) {
		t.Errorf("the handler read %q, want %q", reads, want)
	}
}

// onceBody is a request body that fails a read once closed.
type onceBody struct {
	data   []byte
	closed bool
}

func (b *onceBody) Read(p []byte) (int, error) {
	if b.closed {
		return 0, http.ErrBodyReadAfterClose
	}
	if len(b.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p, b.data)
	b.data = b.data[n:]
	return n, nil
}

var errBroken = fmt.Errorf("the upload broke off")

type failing struct{}

func (failing) Read([]byte) (int, error) { return 0, errBroken }

// TestEstimateReadsBounded: while the estimate reads in progress hold
// MaxEstimateBytes, a request's body is not read for its estimate (the
// default is charged, the body reaches the handler untouched): clients
// stalling 1 MiB bodies cannot hold the process's memory.
func TestEstimateReadsBounded(t *testing.T) {
	m := &policy.MeasuredCost{Unit: "tokens", Estimate: policy.Estimate{JSON: "max_tokens", Default: 500, Cap: 4000}}
	body := `{"max_tokens": 900}`
	req := func() *http.Request { return httptest.NewRequest("POST", "/v1/chat", strings.NewReader(body)) }
	if got := estimate(req(), m); got != 900 {
		t.Fatalf("estimate %d, want 900 from the body", got)
	}
	estimateBytes.Add(MaxEstimateBytes - 10) // reads in progress fill the bound
	defer estimateBytes.Add(-(MaxEstimateBytes - 10))
	r := req()
	if got := estimate(r, m); got != 500 {
		t.Errorf("estimate %d with the reads' bound full, want the default 500", got)
	}
	if b, _ := io.ReadAll(r.Body); string(b) != body {
		t.Errorf("the handler read %q, want the body whole", b)
	}
	if n := estimateBytes.Load(); n != MaxEstimateBytes-10 {
		t.Errorf("reserved %d after the calls, want %d (each released)", n, MaxEstimateBytes-10)
	}
}
