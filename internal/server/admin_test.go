package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fairgate/fairgate/examples"
	"github.com/fairgate/fairgate/internal/config"
	"github.com/fairgate/fairgate/internal/redistest"
	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/limiter/redisctl"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/store/memstore"
	"github.com/fairgate/fairgate/store/redisstore"
)

const adminToken = "test-admin-token-0123456789"

// redisInstance is one fairgate instance on the shared test Redis: its own
// client, limiter (following the control store) and server.
func redisInstance(t *testing.T, prefix string) (*limiter.Limiter, *Server) {
	t.Helper()
	rs, err := redisstore.New(redisstore.Config{URL: "redis://" + redistest.Shared(t).Addr, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	cfg, err := config.Parse(examples.ConfigName, examples.Config())
	if err != nil {
		t.Fatal(err)
	}
	l, err := limiter.New(limiter.Config{Store: rs, Policy: cfg.Policy, Control: redisctl.New(rs.Client(), prefix), Timeout: time.Second, Fallback: memstore.New(memstore.Config{})})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	s, err := New(Config{Limiter: l})
	if err != nil {
		t.Fatal(err)
	}
	return l, s
}

func TestAdmin(t *testing.T) {
	prefix := fmt.Sprintf("adm%d:", time.Now().UnixNano())
	la, _ := redisInstance(t, prefix)
	lb, sb := redisInstance(t, prefix)
	ah, err := NewAdmin(AdminConfig{Limiter: la, Token: adminToken})
	if err != nil {
		t.Fatal(err)
	}
	admin := func(method, path, body, token string) *httptest.ResponseRecorder {
		c := call{method: method, path: path, body: body}
		if token != "" {
			c.headers = map[string]string{"Authorization": "Bearer " + token}
		}
		return c.do(ah)
	}
	for _, tok := range []string{"", "wrong-token-wrong-token", adminToken + "x"} {
		if rec := admin("GET", "/admin/config", "", tok); rec.Code != 401 {
			t.Errorf("token %q: %d, want 401", tok, rec.Code)
		}
	}
	if rec := admin("GET", "/admin/config", "", adminToken); rec.Code != 200 || !strings.Contains(rec.Body.String(), `"default_plan":"free"`) {
		t.Errorf("config: %d %s", rec.Code, rec.Body.String())
	}
	if rec := admin("PUT", "/admin/tenants/newco", `{"plan":"gold"}`, adminToken); rec.Code != 400 || !strings.Contains(rec.Body.String(), "unknown plan") {
		t.Errorf("bad override: %d %s", rec.Code, rec.Body.String())
	}
	// An override made on instance A is enforced by instance B within 2 s.
	start := time.Now()
	if rec := admin("PUT", "/admin/tenants/newco", `{"plan":"free","burst":3,"shares":{"export":1},"ttl_seconds":600}`, adminToken); rec.Code != 200 {
		t.Fatalf("override: %d %s", rec.Code, rec.Body.String())
	}
	for {
		if res, err := lb.Snapshot().Resolve(policy.Request{Tenant: "newco", Class: "read"}, time.Now()); err == nil && res.Layers[0].Limit.Capacity() == 3 {
			break
		}
		if time.Since(start) > 2*time.Second {
			t.Fatalf("override not enforced on the other instance within 2 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("enforced on instance B after %v", time.Since(start))
	for i := range 4 {
		_, m := check(t, sb, `{"tenant":"newco","class":"read"}`)
		if want := i < 3; m["allowed"] != want {
			t.Errorf("request %d on B: allowed %v, want %v", i, m["allowed"], want)
		}
	}
	if rec := admin("GET", "/admin/tenants/newco", "", adminToken); rec.Code != 200 || !strings.Contains(rec.Body.String(), `"override"`) {
		t.Errorf("read tenant: %d %s", rec.Code, rec.Body.String())
	}
	if rec := admin("DELETE", "/admin/tenants/newco", "", adminToken); rec.Code != 200 || !strings.Contains(rec.Body.String(), `"cleared":true`) {
		t.Errorf("clear: %d %s", rec.Code, rec.Body.String())
	}
	if rec := admin("POST", "/admin/reload", "", adminToken); rec.Code != 409 {
		t.Errorf("reload without a file: %d", rec.Code)
	}
	if _, err := NewAdmin(AdminConfig{Limiter: la, Token: "short"}); err == nil {
		t.Error("a short admin token was accepted")
	}
}

// TestAdminConcurrency: a plan's and a tenant's concurrency are set at run
// time through the admin API, shown back, and enforced; a bad value is
// refused by name.
func TestAdminConcurrency(t *testing.T) {
	l := testLimiter(t, memstore.New(memstore.Config{}), -1)
	ah, err := NewAdmin(AdminConfig{Limiter: l, Token: adminToken})
	if err != nil {
		t.Fatal(err)
	}
	admin := func(method, path, body string) *httptest.ResponseRecorder {
		return call{method: method, path: path, body: body, headers: map[string]string{"Authorization": "Bearer " + adminToken}}.do(ah)
	}
	if rec := admin("PUT", "/admin/plans/free", `{"rules":[{"limit":100,"period_ms":60000}],"concurrency":-1}`); rec.Code != 400 || !strings.Contains(rec.Body.String(), "concurrency") {
		t.Errorf("a negative concurrency: %d %s", rec.Code, rec.Body.String())
	}
	if rec := admin("PUT", "/admin/plans/free", `{"rules":[{"limit":120,"period_ms":60000,"burst":30},{"name":"daily","limit":10000,"calendar":"day"}],"concurrency":5}`); rec.Code != 200 || !strings.Contains(rec.Body.String(), `"concurrency":5`) {
		t.Fatalf("plan: %d %s", rec.Code, rec.Body.String())
	}
	if rec := admin("PUT", "/admin/tenants/newco", `{"concurrency":2}`); rec.Code != 200 || !strings.Contains(rec.Body.String(), `"concurrency":2`) {
		t.Fatalf("tenant: %d %s", rec.Code, rec.Body.String())
	}
	for tenant, want := range map[string]int64{"newco": 2, "someone": 5} {
		res, err := l.Snapshot().Resolve(policy.Request{Tenant: tenant, Class: "read"}, time.Now())
		if err != nil || len(res.Slots) == 0 || res.Slots[0].Limit != want {
			t.Errorf("%s: slots %+v, %v; want a concurrency of %d", tenant, res.Slots, err, want)
		}
	}
	if rec := admin("GET", "/admin/tenants/newco", ""); rec.Code != 200 || !strings.Contains(rec.Body.String(), `{"policy":"free.tenant.concurrency","limit":2}`) {
		t.Errorf("the tenant's effective limits: %d %s, want its concurrency layer", rec.Code, rec.Body)
	}
	held := 0
	for range 3 {
		if d, _ := l.Decide(context.Background(), policy.Request{Tenant: "newco", Class: "read"}); d.Allowed {
			held++
		}
	}
	if held != 2 {
		t.Errorf("newco with concurrency 2: %d of 3 held at once", held)
	}
}

// TestAdminTenantOverridden: GET /admin/tenants/{id} says where the
// tenant's entry is (entry: file or runtime, absent without one) and, by
// overridden, whether that entry changes a limit of its plan: an entry
// that only names a plan does not.
func TestAdminTenantOverridden(t *testing.T) {
	l := testLimiter(t, memstore.New(memstore.Config{}), -1)
	ah, err := NewAdmin(AdminConfig{Limiter: l, Token: adminToken})
	if err != nil {
		t.Fatal(err)
	}
	admin := func(method, path, body string) *httptest.ResponseRecorder {
		return call{method: method, path: path, body: body, headers: map[string]string{"Authorization": "Bearer " + adminToken}}.do(checkedAPI(ah))
	}
	for _, put := range []struct{ id, body string }{{"plainco", `{"plan":"team"}`}, {"bumpco", `{"plan":"team","burst":400}`}} {
		if rec := admin("PUT", "/admin/tenants/"+put.id, put.body); rec.Code != 200 {
			t.Fatalf("PUT %s: %d %s", put.id, rec.Code, rec.Body)
		}
	}
	for _, tc := range []struct {
		tenant, entry string // entry "": absent
		overridden    bool
	}{
		{"acme", "file", false},   // acme: {plan: enterprise}
		{"globex", "file", true},  // burst and a share
		{"initech", "file", true}, // a rule's limit
		{"newco", "", false},      // no entry: the default plan
		{"plainco", "runtime", false},
		{"bumpco", "runtime", true},
	} {
		rec := admin("GET", "/admin/tenants/"+tc.tenant, "")
		var out struct {
			Effective struct {
				Entry      *string `json:"entry"`
				Overridden bool    `json:"overridden"`
			} `json:"effective"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &out); rec.Code != 200 || err != nil {
			t.Fatalf("%s: %d %s", tc.tenant, rec.Code, rec.Body)
		}
		entry := ""
		if out.Effective.Entry != nil {
			entry = *out.Effective.Entry
		}
		if entry != tc.entry || out.Effective.Overridden != tc.overridden {
			t.Errorf("%s: entry %q overridden %v, want %q %v: %s", tc.tenant, entry, out.Effective.Overridden, tc.entry, tc.overridden, rec.Body)
		}
	}
}
