package policyfile_test

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/internal/testpolicy"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/policy/policyfile"
)

const example = "../../examples/fairgate.yaml"

// TestExampleDecidesAsItsGoForm: the example file, daemon sections and
// all, loads; and it resolves requests exactly as the same policy written
// in Go (internal/testpolicy) does.
func TestExampleDecidesAsItsGoForm(t *testing.T) {
	fromFile, err := policyfile.Load(example)
	if err != nil {
		t.Fatal(err)
	}
	a, err := policy.Compile(fromFile)
	if err != nil {
		t.Fatal(err)
	}
	b, err := policy.Compile(testpolicy.Policy())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	for _, req := range []policy.Request{
		{Tenant: "newco", Method: "GET", Path: "/v1/users/7"},
		{Tenant: "newco", Method: "GET", Path: "/v1/search"},
		{Tenant: "newco", Method: "POST", Path: "/v1/users"},
		{Tenant: "newco", Method: "GET", Path: "/healthz"},
		{Tenant: "acme", Method: "POST", Path: "/v1/reports"},
		{Method: "POST", Path: "/v1/login", IP: netip.MustParseAddr("192.0.2.1"), Credential: "ann"},
	} {
		ra, errA := a.Resolve(req, now)
		rb, errB := b.Resolve(req, now)
		if diff := cmp.Diff(rb, ra); diff != "" || errA != nil || errB != nil {
			t.Errorf("%s %s of %q: file (%v) and Go (%v) differ (-go +file):\n%s", req.Method, req.Path, req.Tenant, errA, errB, diff)
		}
	}
}

// TestDefaultsAlike: what the file leaves out, the Go types' zero values
// mean the same: a class's share 1 and fail open, a route's cost 1 (cost 0
// free), an anonymous route's cost 1 and fail closed.
func TestDefaultsAlike(t *testing.T) {
	file := `
default_plan: p
default_class: c
plans: {p: {limit: 10, period: 1m}}
classes: {c: {}}
routes:
  - {route: "GET /a", class: c}
  - {route: "GET /free", class: c, cost: 0}
anonymous:
  - {name: login, route: "POST /login", limits: [{limit: 5, period: 1m}]}
`
	fromFile, err := policyfile.Parse("defaults.yaml", []byte(file))
	if err != nil {
		t.Fatal(err)
	}
	lim := algo.Limit{Limit: 10, Period: time.Minute}
	fromGo := policy.Policy{
		DefaultPlan: "p", DefaultClass: "c",
		Plans:     map[string]policy.Plan{"p": {Rules: []policy.Rule{{Limit: lim}}}},
		Classes:   map[string]policy.Class{"c": {}},
		Routes:    []policy.Route{{Pattern: "GET /a", Class: "c"}, {Pattern: "GET /free", Class: "c", Free: true}},
		Anonymous: []policy.AnonRoute{{Name: "login", Pattern: "POST /login", Rules: []policy.AnonRule{{Rule: policy.Rule{Limit: algo.Limit{Limit: 5, Period: time.Minute}}}}}},
	}
	a, err := policy.Compile(fromFile)
	if err != nil {
		t.Fatal(err)
	}
	b, err := policy.Compile(fromGo)
	if err != nil {
		t.Fatal(err)
	}
	ignore := cmpopts.IgnoreFields(policy.Policy{}, "Plans", "Tenants", "Location")
	if diff := cmp.Diff(b.Policy(), a.Policy(), ignore, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("defaults differ (-go +file):\n%s", diff)
	}
	if c := a.Policy().Classes["c"]; c.Share != 1 || c.Fail != policy.FailOpen {
		t.Errorf("class defaults: %+v, want share 1, fail open", c)
	}
	if r := a.Policy().Anonymous[0]; r.Cost != 1 || r.Fail != policy.FailClosed {
		t.Errorf("anonymous defaults: cost %d, fail %v; want 1, closed", r.Cost, r.Fail)
	}
}

// TestEveryProblemHasItsLine: problems found by decoding and by compiling
// are all reported, each at its line and under the file's own path.
func TestEveryProblemHasItsLine(t *testing.T) {
	file := `default_plan: free
default_class: read
plans:
  free:
    - {limit: 10, period: 1m}
    - {name: short, limit: 5, period: 1m, burst: -1}
  team: {limit: 0, period: 1m}
classes:
  read: {share: 2}
routes:
  - {route: "GET /x", class: nope}
tenants:
  acme:
    limits:
      hourly: {limit: 3}
anonymous:
  - name: login
    route: "POST /login"
    limits:
      - {limit: 1, period: 1s, by: phone}
colour: blue
`
	_, err := policyfile.Parse("bad.yaml", []byte(file))
	var fe *policyfile.Error
	if !errors.As(err, &fe) {
		t.Fatalf("Parse = %v, want a *policyfile.Error", err)
	}
	want := []policyfile.Problem{
		{Line: 6, Path: "plans.free[1].burst"},
		{Line: 7, Path: "plans.team.limit"},
		{Line: 9, Path: "classes.read.share"},
		{Line: 11, Path: "routes[0].class"},
		{Line: 15, Path: "tenants.acme.limits.hourly"},
		{Line: 20, Path: "anonymous[0].limits[0].by"},
		{Line: 21, Path: "colour"},
	}
	if diff := cmp.Diff(want, fe.Problems, cmpopts.IgnoreFields(policyfile.Problem{}, "Message"), cmpopts.SortSlices(func(a, b policyfile.Problem) bool { return a.Line < b.Line })); diff != "" {
		t.Errorf("problems (-want +got):\n%s\n%v", diff, err)
	}
	if !strings.Contains(err.Error(), "bad.yaml:21: colour: unknown field") {
		t.Errorf("error text %q does not name file, line and field", err)
	}
}

// TestLoadRefusesWhatItCannotRead: a missing file, an empty one and one
// over MaxFileBytes are errors that say so.
func TestLoadRefusesWhatItCannotRead(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.yaml")
	big := filepath.Join(dir, "big.yaml")
	os.WriteFile(empty, nil, 0o600)
	os.WriteFile(big, make([]byte, policyfile.MaxFileBytes+1), 0o600)
	for path, want := range map[string]string{filepath.Join(dir, "none.yaml"): "no such file", empty: "empty", big: "over"} {
		if _, err := policyfile.Load(path); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Load(%s) = %v, want an error containing %q", filepath.Base(path), err, want)
		}
	}
}

func ExampleLoad() {
	p, err := policyfile.Load("../../examples/fairgate.yaml")
	if err != nil {
		fmt.Println(err) // every problem, each as file:line: field: message
		return
	}
	snap, err := policy.Compile(p)
	if err != nil {
		fmt.Println(err)
		return
	}
	res, _ := snap.Resolve(policy.Request{Tenant: "acme", Method: "GET", Path: "/v1/search"}, time.Now())
	for _, l := range res.Layers {
		fmt.Println(l.Policy, l.Limit)
	}
	// Output:
	// enterprise.search.1m 1500 per 1m0s (burst 150, gcra)
	// enterprise.tenant.1m 6000 per 1m0s (burst 600, gcra)
}

// TestMeasuredCostFile: a class's cost decodes into its measured cost,
// and its problems (an unknown field, a count that is not one, a rule of
// the policy) are reported at their lines under the file's paths.
func TestMeasuredCostFile(t *testing.T) {
	good := `default_plan: pro
default_class: llm
plans:
  pro: {limit: 100000, period: 1m, burst: 10000}
classes:
  llm:
    cost:
      unit: tokens
      estimate: {header: X-Max-Tokens, json: max_tokens, default: 500, cap: 4000}
      measure: {header: X-Usage-Tokens, json: usage.total_tokens, sse: usage.total_tokens}
`
	p, err := policyfile.Parse("good.yaml", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	want := &policy.MeasuredCost{Unit: "tokens",
		Estimate: policy.Estimate{Header: "X-Max-Tokens", JSON: "max_tokens", Default: 500, Cap: 4000},
		Measure:  policy.Measure{Header: "X-Usage-Tokens", JSON: "usage.total_tokens", SSE: "usage.total_tokens"}}
	if diff := cmp.Diff(want, p.Classes["llm"].Cost); diff != "" {
		t.Errorf("cost (-want +got):\n%s", diff)
	}
	bad := `default_plan: pro
default_class: llm
plans:
  pro: {limit: 100000, period: 1m, burst: 10000}
classes:
  llm:
    cost:
      unit: Tokens
      estimate: {default: -1, cap: 20000, max: 3}
      measure: {}
`
	_, err = policyfile.Parse("bad.yaml", []byte(bad))
	var fe *policyfile.Error
	if !errors.As(err, &fe) {
		t.Fatalf("Parse = %v, want a *policyfile.Error", err)
	}
	wantProblems := []policyfile.Problem{
		{Line: 8, Path: "classes.llm.cost.unit"},
		{Line: 9, Path: "classes.llm.cost.estimate.default"},
		{Line: 9, Path: "classes.llm.cost.estimate.max"},
		{Line: 9, Path: "classes.llm.cost.estimate.cap"},
		{Line: 10, Path: "classes.llm.cost.measure"},
	}
	less := func(a, b policyfile.Problem) bool { return a.Line < b.Line || a.Line == b.Line && a.Path < b.Path }
	if diff := cmp.Diff(wantProblems, fe.Problems, cmpopts.IgnoreFields(policyfile.Problem{}, "Message"), cmpopts.SortSlices(less)); diff != "" {
		t.Errorf("problems (-want +got):\n%s\n%v", diff, err)
	}
}
