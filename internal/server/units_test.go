package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fairgate/fairgate/httplimit"
	"github.com/fairgate/fairgate/internal/config"
	"github.com/fairgate/fairgate/internal/dash"
	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/store/memstore"
)

// budgets is the dashboard's Source of budgets over a limiter, as the
// daemon's.
type budgets struct{ l *limiter.Limiter }

func (budgets) Read() dash.Reading { return dash.Reading{} }

func (b budgets) Effective(ctx context.Context, tenant string) (limiter.TenantLimits, error) {
	return b.l.Effective(ctx, tenant, "")
}

// unitServer is a server on a memory store with the policy cfg (YAML),
// headers in form, credentials (key-acme is acme's), a settle key and a
// dashboard that shows budgets; and the admin API over its limiter.
func unitServer(t *testing.T, cfg, form string) (*Server, http.Handler) {
	t.Helper()
	c, err := config.Parse("units.yaml", []byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	l, err := limiter.New(limiter.Config{Store: memstore.New(memstore.Config{}), Policy: c.Policy})
	if err != nil {
		t.Fatal(err)
	}
	board := dash.New(budgets{l}, adminToken)
	s, err := New(Config{Limiter: l, Auth: testAuth(t), SettleKey: settleTestKey, Headers: httplimit.Form(form), Dashboard: board})
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewAdmin(AdminConfig{Limiter: l, Token: adminToken})
	if err != nil {
		t.Fatal(err)
	}
	return s, a
}

// plainConfig is tokenConfig without its measured cost: every layer
// counts requests.
const plainConfig = `default_plan: pro
default_class: read
plans:
  pro: {limit: 10000, period: 720h}
classes:
  read: {}
  llm: {share: 0.5}
`

// TestHeadersNameTheUnit: /v1/check's headers name the unit of a layer
// that counts tokens, in each form's manner, for the measured class and
// for a plain class charged on the same tenant layer; a policy without a
// measured cost gets the headers it always had, with no unit.
func TestHeadersNameTheUnit(t *testing.T) {
	for _, tc := range []struct {
		form, name, value string // the header naming the unit, and its value's part
	}{
		{"draft", "RateLimit-Unit", "tokens"},
		{"structured", "RateLimit-Policy", `;fairgate-unit="tokens"`},
		{"x", "X-RateLimit-Unit", "tokens"},
	} {
		for _, body := range []string{`{"tenant":"acme","class":"llm","cost":1000}`, `{"tenant":"acme","class":"read"}`} {
			s, _ := unitServer(t, tokenConfig, tc.form)
			rec := call{method: "POST", path: "/v1/check", body: body}.do(s)
			var out struct {
				Headers map[string]string `json:"headers"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &out); rec.Code != 200 || err != nil {
				t.Fatalf("%s %s: %d %s", tc.form, body, rec.Code, rec.Body)
			}
			if v := out.Headers[tc.name]; !strings.Contains(v, tc.value) {
				t.Errorf("%s %s: %s = %q, want %q in it (headers %v)", tc.form, body, tc.name, v, tc.value, out.Headers)
			}
			plain, _ := unitServer(t, plainConfig, tc.form)
			rec = call{method: "POST", path: "/v1/check", body: body}.do(plain)
			out.Headers = nil
			if err := json.Unmarshal(rec.Body.Bytes(), &out); rec.Code != 200 || err != nil {
				t.Fatalf("%s %s without a measured cost: %d %s", tc.form, body, rec.Code, rec.Body)
			}
			if len(out.Headers) != 3 && !(tc.form == "structured" && len(out.Headers) == 2) || strings.Contains(fmt.Sprint(out.Headers), "nit") {
				t.Errorf("%s %s without a measured cost: headers %v, want the form's own and no unit", tc.form, body, out.Headers)
			}
		}
	}
}

// TestBudgetsInTheirUnit: a tenant's layers, after a request of a class
// with a measured cost was charged and settled, show their unit beside
// their limit, remaining and reset in /v1/me/limits, the admin API's
// tenant view and the dashboard's budget, alike; the admin API's config
// shows the class's cost; a policy without one shows requests.
func TestBudgetsInTheirUnit(t *testing.T) {
	s, admin := unitServer(t, tokenConfig, "draft")
	rec := call{method: "POST", path: "/v1/check", body: `{"tenant":"acme","class":"llm","cost":1000}`}.do(s)
	var chk struct {
		Settlement string `json:"settlement"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &chk); rec.Code != 200 || err != nil || chk.Settlement == "" {
		t.Fatalf("check: %d %s", rec.Code, rec.Body)
	}
	if rec := (call{method: "POST", path: "/v1/settle", body: fmt.Sprintf(`{"handle":%q,"cost":2500}`, chk.Settlement)}).do(s); rec.Code != 200 {
		t.Fatalf("settle: %d %s", rec.Code, rec.Body)
	}
	type layer struct {
		Policy, Class, Unit string
		Remaining           int64
		ResetAfterMs        int64 `json:"reset_after_ms"`
	}
	want := map[string]layer{
		"pro.llm.30d":    {Policy: "pro.llm.30d", Class: "llm", Unit: "tokens", Remaining: 5000 - 2500},
		"pro.tenant.30d": {Policy: "pro.tenant.30d", Unit: "tokens", Remaining: 10_000 - 2500},
	}
	layersOf := func(name string, raw []byte, path ...string) {
		t.Helper()
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			t.Fatalf("%s: %s: %v", name, raw, err)
		}
		for _, p := range path {
			v = v.(map[string]any)[p]
		}
		b, _ := json.Marshal(v)
		var got []layer
		if err := json.Unmarshal(b, &got); err != nil || len(got) != len(want) {
			t.Fatalf("%s: layers %s (%v), want %d", name, b, err, len(want))
		}
		for _, g := range got {
			w := want[g.Policy]
			if g.ResetAfterMs <= 0 {
				t.Errorf("%s: %s resets in %d ms, want when it is full again", name, g.Policy, g.ResetAfterMs)
			}
			g.ResetAfterMs = 0
			if g != w {
				t.Errorf("%s: layer %+v, want %+v", name, g, w)
			}
		}
	}
	rec = call{method: "GET", path: "/v1/me/limits", headers: map[string]string{"X-API-Key": "key-acme"}}.do(s)
	if rec.Code != 200 {
		t.Fatalf("/v1/me/limits: %d %s", rec.Code, rec.Body)
	}
	layersOf("/v1/me/limits", rec.Body.Bytes(), "layers")
	bearer := map[string]string{"Authorization": "Bearer " + adminToken}
	rec = call{method: "GET", path: "/admin/tenants/acme", headers: bearer}.do(admin)
	if rec.Code != 200 {
		t.Fatalf("/admin/tenants/acme: %d %s", rec.Code, rec.Body)
	}
	layersOf("/admin/tenants/acme", rec.Body.Bytes(), "effective", "layers")
	rec = call{method: "GET", path: "/dashboard/tenant?id=acme", headers: bearer}.do(s)
	if rec.Code != 200 {
		t.Fatalf("/dashboard/tenant: %d %s", rec.Code, rec.Body)
	}
	layersOf("/dashboard/tenant", rec.Body.Bytes(), "layers")

	rec = call{method: "GET", path: "/admin/config", headers: bearer}.do(admin)
	var conf struct {
		Classes map[string]struct {
			Cost *struct {
				Unit     string `json:"unit"`
				Estimate struct {
					Cap int64 `json:"cap"`
				} `json:"estimate"`
			} `json:"cost"`
		} `json:"classes"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &conf); rec.Code != 200 || err != nil {
		t.Fatalf("/admin/config: %d %s", rec.Code, rec.Body)
	}
	if c := conf.Classes["llm"].Cost; c == nil || c.Unit != "tokens" || c.Estimate.Cap != 4000 || conf.Classes["read"].Cost != nil {
		t.Errorf("/admin/config classes: %s", rec.Body)
	}

	// A settled charge over the estimate leaves the class's layer 1,500
	// tokens in debt: remaining 0, full again only once the debt and the
	// whole burst (5,000, a period's worth) have refilled.
	rec = call{method: "POST", path: "/v1/check", body: `{"tenant":"acme","class":"llm","cost":1000}`}.do(s)
	json.Unmarshal(rec.Body.Bytes(), &chk)
	if rec := (call{method: "POST", path: "/v1/settle", body: fmt.Sprintf(`{"handle":%q,"cost":4000}`, chk.Settlement)}).do(s); rec.Code != 200 {
		t.Fatalf("settle: %d %s", rec.Code, rec.Body)
	}
	want["pro.llm.30d"] = layer{Policy: "pro.llm.30d", Class: "llm", Unit: "tokens", Remaining: 0}
	want["pro.tenant.30d"] = layer{Policy: "pro.tenant.30d", Unit: "tokens", Remaining: 10_000 - 2500 - 4000}
	rec = call{method: "GET", path: "/v1/me/limits", headers: map[string]string{"X-API-Key": "key-acme"}}.do(s)
	layersOf("/v1/me/limits in debt", rec.Body.Bytes(), "layers")
	var debt struct {
		Layers []struct {
			Policy       string
			ResetAfterMs int64 `json:"reset_after_ms"`
		}
	}
	json.Unmarshal(rec.Body.Bytes(), &debt)
	for _, ly := range debt.Layers {
		// (Less the milliseconds the test took since the settle.)
		burst, full := (720 * time.Hour).Milliseconds(), (720 * time.Hour / 5000 * 6500).Milliseconds()
		if ly.Policy == "pro.llm.30d" && (ly.ResetAfterMs <= burst || ly.ResetAfterMs > full) {
			t.Errorf("in debt: %s full again in %d ms, want within %d, what the debt of 1,500 and the burst of 5,000 take to refill, and over %d, the burst's", ly.Policy, ly.ResetAfterMs, full, burst)
		}
	}

	plain, _ := unitServer(t, plainConfig, "draft")
	rec = call{method: "GET", path: "/v1/me/limits", headers: map[string]string{"X-API-Key": "key-acme"}}.do(plain)
	var mine struct {
		Layers []layer `json:"layers"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &mine); rec.Code != 200 || err != nil || len(mine.Layers) == 0 {
		t.Fatalf("/v1/me/limits without a measured cost: %d %s", rec.Code, rec.Body)
	}
	for _, ly := range mine.Layers {
		if ly.Unit != "requests" {
			t.Errorf("without a measured cost: %s counts %q, want requests", ly.Policy, ly.Unit)
		}
	}
}
