package limitheader

import (
	"cmp"
	"net/http"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/policy"
)

func TestRetryAfter(t *testing.T) {
	for d, want := range map[time.Duration]string{0: "1", time.Millisecond: "1", time.Second: "1", 1001 * time.Millisecond: "2", 59 * time.Second: "59"} {
		if got := RetryAfter(d); got != want {
			t.Errorf("RetryAfter(%v) = %s, want %s", d, got, want)
		}
	}
}

// TestUnit: a decision whose tightest layer counts a measured cost's unit
// names it in each form, beside the numbers it counts; one whose layer
// counts requests has the headers it always had, with no unit (requests
// being the drafts' default).
func TestUnit(t *testing.T) {
	decision := func(unit string) limiter.Decision {
		return limiter.Decision{Allowed: true, Policy: "pro.tenant.1m", Now: time.Unix(1_800_000_000, 0),
			Layers: []limiter.LayerDecision{{
				Layer:     policy.Layer{Policy: "pro.tenant.1m", Limit: algo.Limit{Limit: 200000, Period: time.Minute, Burst: 20000}, Unit: unit},
				Remaining: 14000, ResetAfter: 1800 * time.Millisecond,
			}}}
	}
	for _, tc := range []struct {
		form Form
		unit string
		want map[string]string
	}{
		{Draft, "tokens", map[string]string{"RateLimit-Limit": "20000", "RateLimit-Remaining": "14000", "RateLimit-Reset": "2", "RateLimit-Unit": "tokens"}},
		{Draft, "", map[string]string{"RateLimit-Limit": "20000", "RateLimit-Remaining": "14000", "RateLimit-Reset": "2"}},
		{Structured, "tokens", map[string]string{
			"RateLimit-Policy": `"pro.tenant.1m";q=20000;w=6;fairgate-unit="tokens"`,
			"RateLimit":        `"pro.tenant.1m";r=14000;t=2`}},
		{Structured, "rows+tokens", map[string]string{
			"RateLimit-Policy": `"pro.tenant.1m";q=20000;w=6;fairgate-unit="rows+tokens"`,
			"RateLimit":        `"pro.tenant.1m";r=14000;t=2`}},
		{Structured, "", map[string]string{"RateLimit-Policy": `"pro.tenant.1m";q=20000;w=6`, "RateLimit": `"pro.tenant.1m";r=14000;t=2`}},
		{X, "tokens", map[string]string{"X-RateLimit-Limit": "20000", "X-RateLimit-Remaining": "14000", "X-RateLimit-Reset": "1800000002", "X-RateLimit-Unit": "tokens"}},
		{X, "", map[string]string{"X-RateLimit-Limit": "20000", "X-RateLimit-Remaining": "14000", "X-RateLimit-Reset": "1800000002"}},
	} {
		d := decision(tc.unit)
		name := string(tc.form) + "/" + cmp.Or(tc.unit, "requests")
		if diff := gocmp.Diff(tc.want, Map(tc.form, d)); diff != "" {
			t.Errorf("%s: Map (-want +got):\n%s", name, diff)
		}
		// Set says the same under canonical names, and Append as pairs.
		h := http.Header{}
		Set(h, tc.form, d)
		for k, v := range tc.want {
			if got := h.Get(k); got != v {
				t.Errorf("%s: Set: %s = %q, want %q", name, k, got, v)
			}
		}
		if len(h) != len(tc.want) {
			t.Errorf("%s: Set wrote %v, want %v", name, h, tc.want)
		}
		if got := Append(nil, tc.form, d); len(got) != 2*len(tc.want) {
			t.Errorf("%s: Append = %q, want the %d headers of Map", name, got, len(tc.want))
		}
	}
}

// TestMostHeaders: a decision with every header a form writes (a
// rejection, a concurrency layer, a layer with a unit) writes them all.
func TestMostHeaders(t *testing.T) {
	d := limiter.Decision{Policy: "p", RetryAfter: time.Second, Tightest: 0,
		Layers:      []limiter.LayerDecision{{Layer: policy.Layer{Policy: "p", Limit: algo.Limit{Limit: 10, Period: time.Second, Burst: 10}, Unit: "rows"}}},
		Concurrency: []limiter.SlotDecision{{SlotLayer: policy.SlotLayer{Policy: "c", Limit: 4}, Remaining: 1, Allowed: true}}}
	for f, want := range map[Form]int{Draft: 7, X: 7, Structured: 4} {
		if got := Map(f, d); len(got) != want {
			t.Errorf("%s: %d headers %v, want %d", f, len(got), got, want)
		}
	}
}
