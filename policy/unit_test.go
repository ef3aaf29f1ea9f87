package policy_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/policy"
)

// TestLayerUnits: each layer says what its limit counts: a class's own
// layer its class's unit (requests for a plain class), the tenant's
// layers, which every class is charged on, the measured classes' unit
// (several joined), and requests in a policy without one; an anonymous
// route's layers count requests.
func TestLayerUnits(t *testing.T) {
	rows := &policy.MeasuredCost{Unit: "rows", Estimate: policy.Estimate{Cap: 100}, Measure: policy.Measure{Header: "X-Rows"}}
	for _, tc := range []struct {
		name    string
		classes map[string]policy.Class
		want    map[string]map[string]string // class: layer policy: unit
	}{
		{"tokens beside a plain class",
			map[string]policy.Class{"read": {Share: 0.5}, "llm": {Share: 0.5, Cost: tokens()}},
			map[string]map[string]string{
				"read": {"pro.read.1m": "", "pro.tenant.1m": "tokens"},
				"llm":  {"pro.llm.1m": "tokens", "pro.tenant.1m": "tokens"},
			}},
		{"two units",
			map[string]policy.Class{"read": {Share: 1}, "llm": {Share: 0.5, Cost: tokens()}, "export": {Share: 0.5, Cost: rows}},
			map[string]map[string]string{
				"read":   {"pro.tenant.1m": "rows+tokens"},
				"llm":    {"pro.llm.1m": "tokens", "pro.tenant.1m": "rows+tokens"},
				"export": {"pro.export.1m": "rows", "pro.tenant.1m": "rows+tokens"},
			}},
		{"no measured cost",
			map[string]policy.Class{"read": {Share: 1}, "write": {Share: 0.2}},
			map[string]map[string]string{
				"read":  {"pro.tenant.1m": ""},
				"write": {"pro.write.1m": "", "pro.tenant.1m": ""},
			}},
	} {
		p := measuredPolicy(tokens())
		p.Classes, p.Routes = tc.classes, nil
		p.Anonymous = []policy.AnonRoute{{Name: "login", Pattern: "POST /login", Rules: []policy.AnonRule{{Rule: policy.Rule{Limit: algo.Limit{Limit: 10, Period: time.Minute}}}}}}
		snap, err := policy.Compile(p)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		now := time.Unix(1_800_000_000, 0)
		got := map[string]map[string]string{}
		for class := range tc.want {
			res, err := snap.Resolve(policy.Request{Tenant: "acme", Class: class, Cost: 1, HasCost: true}, now)
			if err != nil {
				t.Fatalf("%s: %s: %v", tc.name, class, err)
			}
			got[class] = map[string]string{}
			for _, ly := range res.Layers {
				got[class][ly.Policy] = ly.Unit
			}
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s: units (-want +got):\n%s", tc.name, diff)
		}
		res, err := snap.Resolve(policy.Request{Method: "POST", Path: "/login", IP: netip.MustParseAddr("198.51.100.7")}, now)
		if err != nil || len(res.Layers) == 0 {
			t.Fatalf("%s: anonymous: %+v, %v", tc.name, res, err)
		}
		for _, ly := range res.Layers {
			if ly.Unit != "" {
				t.Errorf("%s: anonymous layer %s counts %q, want requests", tc.name, ly.Policy, ly.Unit)
			}
		}
	}
}
