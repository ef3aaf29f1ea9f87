package policy_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/policy"
)

// tokens is a measured cost in tokens: X-Max-Tokens or max_tokens,
// default 500, cap 4000, measured from usage.total_tokens.
func tokens() *policy.MeasuredCost {
	return &policy.MeasuredCost{Unit: "tokens",
		Estimate: policy.Estimate{Header: "X-Max-Tokens", JSON: "max_tokens", Default: 500, Cap: 4000},
		Measure:  policy.Measure{JSON: "usage.total_tokens", SSE: "usage.total_tokens"}}
}

// measuredPolicy has plan "pro" at 100,000 tokens a minute (burst 10,000)
// and class "llm", half of it, with a measured cost of tokens.
func measuredPolicy(m *policy.MeasuredCost) policy.Policy {
	return policy.Policy{
		Plans:        map[string]policy.Plan{"pro": {Rules: []policy.Rule{{Limit: algo.Limit{Limit: 100_000, Period: time.Minute, Burst: 10_000}}}}},
		DefaultPlan:  "pro",
		Classes:      map[string]policy.Class{"read": {Share: 1}, "llm": {Share: 0.5, Cost: m}},
		DefaultClass: "read",
		Routes:       []policy.Route{{Pattern: "POST /v1/chat", Class: "llm"}},
	}
}

// TestEstimateFrom: the estimate is the header's count, else the JSON
// field's, else the default; clamped to 1..cap; a value that is not a
// count reads as none.
func TestEstimateFrom(t *testing.T) {
	e := tokens().Estimate
	body := func(s string) any {
		if s == "" {
			return nil
		}
		d := json.NewDecoder(strings.NewReader(s))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, tc := range []struct {
		name, header, body string
		want               int64
	}{
		{name: "nothing: the default", want: 500},
		{name: "header", header: "1200", want: 1200},
		{name: "header with spaces", header: " 1200 ", want: 1200},
		{name: "header over the cap", header: "99999", want: 4000},
		{name: "header zero: the default, never lower", header: "0", want: 500},
		{name: "header below the default: the default", header: "1", want: 500},
		{name: "header first", header: "700", body: `{"max_tokens": 900}`, want: 700},
		{name: "negative header: the body", header: "-5", body: `{"max_tokens": 900}`, want: 900},
		{name: "bad header: the default", header: "lots", want: 500},
		{name: "huge header: the default", header: "99999999999999999999999", want: 500},
		{name: "json field", body: `{"max_tokens": 900}`, want: 900},
		{name: "json fraction rounds up", body: `{"max_tokens": 600.1}`, want: 601},
		{name: "json below the default: the default", body: `{"max_tokens": 3}`, want: 500},
		{name: "json huge: the cap", body: `{"max_tokens": 1e300}`, want: 4000},
		{name: "json string: the default", body: `{"max_tokens": "900"}`, want: 500},
		{name: "json negative: the default", body: `{"max_tokens": -1}`, want: 500},
		{name: "json missing: the default", body: `{"model": "x"}`, want: 500},
		{name: "json not an object: the default", body: `[1]`, want: 500},
	} {
		h := http.Header{}
		if tc.header != "" {
			h.Set("X-Max-Tokens", tc.header)
		}
		if got := e.From(h, body(tc.body)); got != tc.want {
			t.Errorf("%s: From(header %q, body %s) = %d, want %d", tc.name, tc.header, tc.body, got, tc.want)
		}
	}
	noDefault := policy.Estimate{Cap: 300}
	if got := noDefault.From(nil, nil); got != 300 {
		t.Errorf("default 0: From = %d, want the cap 300", got)
	}
}

// TestJSONCount: a dotted path into a decoded body, with plain float64
// numbers as well as json.Number.
func TestJSONCount(t *testing.T) {
	var v any
	if err := json.Unmarshal([]byte(`{"usage": {"total_tokens": 1234, "bad": true}}`), &v); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		want int64
		ok   bool
	}{
		{"usage.total_tokens", 1234, true},
		{"usage.bad", 0, false},
		{"usage", 0, false},
		{"usage.total_tokens.x", 0, false},
		{"nope", 0, false},
	} {
		if got, ok := policy.JSONCount(v, tc.path); got != tc.want || ok != tc.ok {
			t.Errorf("JSONCount(%q) = %d, %v; want %d, %v", tc.path, got, ok, tc.want, tc.ok)
		}
	}
}

// TestResolveMeasured: a request of a measured class is charged its
// estimate clamped to 1..cap (given, else its estimate header when the
// caller settles), the default without one, and its
// resolution carries the measured cost; a negative cost is refused as for
// any class.
func TestResolveMeasured(t *testing.T) {
	snap, err := policy.Compile(measuredPolicy(tokens()))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	for _, tc := range []struct {
		name             string
		cost             int64
		hasCost, settles bool
		header           string // X-Max-Tokens, the estimate header
		want             int64
	}{
		{"default, settled", 0, false, true, "", 500},
		// A caller that does not settle (the gRPC interceptors) is charged the
		// cap, so that the budget holds without a settlement.
		{"none given, not settled: the cap", 0, false, false, "", 4000},
		{"given", 1500, true, true, "", 1500},
		{"zero given: 1", 0, true, true, "", 1},
		{"over the cap", 1 << 40, true, true, "", 4000},
		// Forward auth gives the headers: the estimate header, settled.
		{"header, settled", 0, false, true, "1200", 1200},
		{"header over the cap", 0, false, true, "90000", 4000},
		{"header not a count: the default", 0, false, true, "lots", 500},
		{"header, not settled: the cap", 0, false, false, "1200", 4000},
		{"header beside a cost: the cost", 700, true, true, "1200", 700},
	} {
		var h http.Header
		if tc.header != "" {
			h = http.Header{"X-Max-Tokens": {tc.header}}
		}
		res, err := snap.Resolve(policy.Request{Tenant: "acme", Method: "POST", Path: "/v1/chat", Cost: tc.cost, HasCost: tc.hasCost, Settles: tc.settles, Header: h}, now)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if res.Cost != tc.want || res.Measured == nil || res.Measured.Unit != "tokens" {
			t.Errorf("%s: cost %d, measured %v; want %d, tokens", tc.name, res.Cost, res.Measured, tc.want)
		}
	}
	if _, err := snap.Resolve(policy.Request{Tenant: "acme", Class: "llm", Cost: -1, HasCost: true}, now); !errors.Is(err, policy.ErrBadCost) {
		t.Errorf("negative cost: %v, want ErrBadCost", err)
	}
	res, err := snap.Resolve(policy.Request{Tenant: "acme", Method: "GET", Path: "/x"}, now)
	if err != nil || res.Measured != nil || res.Cost != 1 {
		t.Errorf("fixed class: measured %v, cost %d, %v", res.Measured, res.Cost, err)
	}
}

// TestSnapshotMeasured: Measured names the measured cost of the class a
// request resolves to (by class, route or the default class), the one
// Resolve puts on its resolution, and nil for fixed-cost classes,
// anonymous requests and preflights, and in a snapshot without a
// measured class.
func TestSnapshotMeasured(t *testing.T) {
	p := measuredPolicy(tokens())
	p.Anonymous = []policy.AnonRoute{{Name: "public", Pattern: "POST /v1/chat/public", Rules: []policy.AnonRule{{Rule: policy.Rule{Limit: algo.PerMinute(10)}, By: policy.ByIP}}}}
	snap, err := policy.Compile(p)
	if err != nil {
		t.Fatal(err)
	}
	fixed, err := policy.Compile(measuredPolicy(nil))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	for _, tc := range []struct {
		name string
		snap *policy.Snapshot
		req  policy.Request
		want bool
	}{
		{"route", snap, policy.Request{Tenant: "acme", Method: "POST", Path: "/v1/chat"}, true},
		{"class", snap, policy.Request{Tenant: "acme", Class: "llm"}, true},
		{"fixed class", snap, policy.Request{Tenant: "acme", Method: "GET", Path: "/v1/chat"}, false},
		{"unknown class", snap, policy.Request{Tenant: "acme", Class: "nope"}, false},
		{"anonymous", snap, policy.Request{Method: "POST", Path: "/v1/chat/public"}, false},
		{"preflight", snap, policy.Request{Tenant: "acme", Method: "POST", Path: "/v1/chat", Preflight: true}, false},
		{"no measured class", fixed, policy.Request{Tenant: "acme", Method: "POST", Path: "/v1/chat"}, false},
	} {
		m := tc.snap.Measured(tc.req)
		if (m != nil) != tc.want {
			t.Errorf("%s: Measured = %v, want measured %v", tc.name, m, tc.want)
		}
		if res, err := tc.snap.Resolve(tc.req, now); err == nil && res.Measured != m {
			t.Errorf("%s: Measured = %p, Resolve's %p", tc.name, m, res.Measured)
		}
	}
}

// TestMeasuredCostProblems: every bad measured cost is a problem at its
// path that says what is wrong.
func TestMeasuredCostProblems(t *testing.T) {
	for _, tc := range []struct {
		name     string
		edit     func(p *policy.Policy, m *policy.MeasuredCost)
		path     string
		contains string
	}{
		{"unit missing", func(_ *policy.Policy, m *policy.MeasuredCost) { m.Unit = "" }, "classes.llm.cost.unit", "want lower-case letters"},
		{"unit long", func(_ *policy.Policy, m *policy.MeasuredCost) { m.Unit = "tokens_of_the_model" }, "classes.llm.cost.unit", "at most 16"},
		{"cap missing", func(_ *policy.Policy, m *policy.MeasuredCost) { m.Estimate.Cap = 0 }, "classes.llm.cost.estimate.cap", "outside 1.."},
		{"default over cap", func(_ *policy.Policy, m *policy.MeasuredCost) { m.Estimate.Default = 5000 }, "classes.llm.cost.estimate.default", "outside 0..4000"},
		{"cap over a class burst", func(_ *policy.Policy, m *policy.MeasuredCost) { m.Estimate.Cap = 6000 }, "classes.llm.cost.estimate.cap", "exceeds the burst 5000"},
		{"cap over a tenant's burst", func(p *policy.Policy, _ *policy.MeasuredCost) {
			p.Tenants = map[string]policy.Tenant{"small": {Burst: 2000}}
		}, "classes.llm.cost.estimate.cap", `tenant "small"`},
		{"no measure", func(_ *policy.Policy, m *policy.MeasuredCost) { m.Measure = policy.Measure{} }, "classes.llm.cost.measure", "at least one of"},
		{"bad header", func(_ *policy.Policy, m *policy.MeasuredCost) { m.Estimate.Header = "X Max" }, "classes.llm.cost.estimate.header", "header name"},
		{"bad trailer", func(_ *policy.Policy, m *policy.MeasuredCost) { m.Measure.Trailer = "a:b" }, "classes.llm.cost.measure.trailer", "header name"},
		{"bad json path", func(_ *policy.Policy, m *policy.MeasuredCost) { m.Measure.JSON = "usage..total" }, "classes.llm.cost.measure.json", "JSON path"},
		{"bad sse path", func(_ *policy.Policy, m *policy.MeasuredCost) { m.Measure.SSE = "$.usage" }, "classes.llm.cost.measure.sse", "JSON path"},
		{"lease", func(p *policy.Policy, m *policy.MeasuredCost) {
			c := p.Classes["llm"]
			c.Lease = 10
			p.Classes["llm"] = c
		}, "classes.llm.cost", "cannot have a lease"},
		{"route cost", func(p *policy.Policy, _ *policy.MeasuredCost) { p.Routes[0].Cost = 3 }, "routes[0].cost", "remove cost"},
	} {
		m := tokens()
		p := measuredPolicy(m)
		tc.edit(&p, m)
		_, err := policy.Compile(p)
		var ps policy.Problems
		if !errors.As(err, &ps) {
			t.Errorf("%s: Compile = %v, want problems", tc.name, err)
			continue
		}
		found := false
		for _, pr := range ps {
			found = found || pr.Path == tc.path && strings.Contains(pr.Message, tc.contains)
		}
		if !found {
			t.Errorf("%s: problems\n%v\nwant one at %s containing %q", tc.name, err, tc.path, tc.contains)
		}
	}
	if _, err := policy.Compile(measuredPolicy(tokens())); err != nil {
		t.Errorf("the good policy: %v", err)
	}
}
