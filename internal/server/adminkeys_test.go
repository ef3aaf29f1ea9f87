package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fairgate/fairgate/internal/apikeys"
	"github.com/fairgate/fairgate/internal/apikeys/rediskeys"
	"github.com/fairgate/fairgate/internal/auth"
	"github.com/fairgate/fairgate/internal/redistest"
	"github.com/fairgate/fairgate/store/redisstore"
)

// keyInstance is one fairgate instance with stored API keys on the
// shared test Redis: its server (credentials checked) and admin API.
func keyInstance(t *testing.T, prefix string, maxKeys int) (pub, adm *adminClient) {
	t.Helper()
	l, _ := redisInstance(t, prefix)
	rs, err := redisstore.New(redisstore.Config{URL: "redis://" + redistest.Shared(t).Addr, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	set, err := apikeys.New(apikeys.Config{Backend: rediskeys.New(rs.Client(), prefix), Poll: 200 * time.Millisecond, MaxKeys: maxKeys})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { set.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	a, err := auth.New(ctx, auth.Config{Stored: set})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Limiter: l, Auth: a})
	if err != nil {
		t.Fatal(err)
	}
	ah, err := NewAdmin(AdminConfig{Limiter: l, Token: adminToken, Keys: set})
	if err != nil {
		t.Fatal(err)
	}
	return &adminClient{t: t, h: s}, &adminClient{t: t, h: ah, token: adminToken}
}

type adminClient struct {
	t     *testing.T
	h     http.Handler
	token string
}

// do sends a request with the client's token (or, for the public
// listener, as a tenant with key).
func (c *adminClient) do(method, path, body, token string) *httptest.ResponseRecorder {
	cl := call{method: method, path: path, body: body}
	if token == "" {
		token = c.token
	}
	if token != "" {
		cl.headers = map[string]string{"Authorization": "Bearer " + token}
	}
	return cl.do(c.h)
}

func TestAdminKeys(t *testing.T) {
	prefix := fmt.Sprintf("keys%d:", time.Now().UnixNano())
	pubA, admA := keyInstance(t, prefix, 3)
	pubB, _ := keyInstance(t, prefix, 3)
	me := func(pub *adminClient, key string) int { return pub.do("GET", "/v1/me/limits", "", key).Code }

	rec := admA.do("POST", "/admin/keys", `{"tenant":"newco","plan":"team","label":"ci runner","ttl_seconds":3600}`, "")
	if rec.Code != 201 || rec.Header().Get("Cache-Control") != "no-store" {
		t.Fatalf("create: %d %s", rec.Code, rec.Body.String())
	}
	var made struct {
		Key, ID, Tenant, Plan, Label string
		Expires                      time.Time
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &made); err != nil || !strings.HasPrefix(made.Key, apikeys.Prefix) || len(made.ID) != apikeys.IDLen || made.Tenant != "newco" || made.Plan != "team" || made.Expires.IsZero() {
		t.Fatalf("create answered %s (%v)", rec.Body.String(), err)
	}
	if got := me(pubA, made.Key); got != 200 {
		t.Errorf("the new key on the creating instance: %d, want 200", got)
	}
	// Instance B accepts it within 2 s.
	waitFor(t, "instance B accepts the new key", func() bool { return me(pubB, made.Key) == 200 })

	// The key is never shown again: not in the list, not in one record.
	for _, path := range []string{"/admin/keys", "/admin/keys?tenant=newco", "/admin/keys/" + made.ID} {
		rec := admA.do("GET", path, "", "")
		if rec.Code != 200 || strings.Contains(rec.Body.String(), made.Key) || !strings.Contains(rec.Body.String(), made.ID) || !strings.Contains(rec.Body.String(), `"label":"ci runner"`) {
			t.Errorf("GET %s: %d %s", path, rec.Code, rec.Body.String())
		}
	}
	if rec := admA.do("GET", "/admin/keys?tenant=other", "", ""); !strings.Contains(rec.Body.String(), `"keys":[]`) {
		t.Errorf("another tenant's list: %s", rec.Body.String())
	}
	// Expired now: refused at once here, within 2 s on B, and listed as expired.
	if rec := admA.do("PATCH", "/admin/keys/"+made.ID, `{"expire_now":true}`, ""); rec.Code != 200 || !strings.Contains(rec.Body.String(), `"expired":true`) {
		t.Fatalf("expire: %d %s", rec.Code, rec.Body.String())
	}
	if rec := pubA.do("GET", "/v1/me/limits", "", made.Key); rec.Code != 401 || !strings.Contains(rec.Body.String(), "expired") {
		t.Errorf("an expired key: %d %s", rec.Code, rec.Body.String())
	}
	waitFor(t, "instance B refuses the expired key", func() bool { return me(pubB, made.Key) == 401 })
	if rec := admA.do("PATCH", "/admin/keys/"+made.ID, `{"no_expiry":true}`, ""); rec.Code != 200 || me(pubA, made.Key) != 200 {
		t.Fatalf("unexpire: %d %s", rec.Code, rec.Body.String())
	}
	waitFor(t, "instance B accepts the key again", func() bool { return me(pubB, made.Key) == 200 })
	// Revoked: gone here at once, and on B within 2 s.
	if rec := admA.do("DELETE", "/admin/keys/"+made.ID, "", ""); rec.Code != 200 {
		t.Fatalf("revoke: %d %s", rec.Code, rec.Body.String())
	}
	if got := me(pubA, made.Key); got != 401 {
		t.Errorf("a revoked key on the revoking instance: %d, want 401", got)
	}
	waitFor(t, "instance B refuses the revoked key", func() bool { return me(pubB, made.Key) == 401 })
}

// TestKeyPlanBowsToTheTenantEntry: a tenant's entry (config file, or run
// time) decides its plan before any key's (policy.PlanSource), so a key
// naming another plan for a tenant with an entry is refused with 409
// naming the entry (it was made, listed with its plan, and /v1/me/limits
// then showed the entry's plan); a run-time entry that expires makes the
// key with a warning; a key of an unlisted tenant has its plan.
func TestKeyPlanBowsToTheTenantEntry(t *testing.T) {
	prefix := fmt.Sprintf("keyplan%d:", time.Now().UnixNano())
	pub, adm := keyInstance(t, prefix, 10)
	create := func(body string) (*httptest.ResponseRecorder, map[string]any) {
		t.Helper()
		rec := adm.do("POST", "/admin/keys", body, "")
		m := map[string]any{}
		_ = json.Unmarshal(rec.Body.Bytes(), &m)
		return rec, m
	}
	plan := func(key string) string {
		t.Helper()
		rec := pub.do("GET", "/v1/me/limits", "", key)
		var m struct{ Plan string }
		if err := json.Unmarshal(rec.Body.Bytes(), &m); rec.Code != 200 || err != nil {
			t.Fatalf("/v1/me/limits: %d %s", rec.Code, rec.Body)
		}
		return m.Plan
	}

	// The scenario: acme is on enterprise by the config file.
	rec, _ := create(`{"tenant":"acme","plan":"team"}`)
	if rec.Code != 409 || !strings.Contains(rec.Body.String(), `tenants.acme`) || !strings.Contains(rec.Body.String(), `plan \"enterprise\"`) {
		t.Fatalf("a team key for acme (enterprise by its file entry): %d %s, want 409 naming tenants.acme and enterprise", rec.Code, rec.Body)
	}
	// Omitting plan makes a key that names none (not one on the entry's
	// plan): the answer says so.
	if b := rec.Body.String(); !strings.Contains(b, "the key then names no plan") || strings.Contains(b, "the key then gets") {
		t.Errorf("409 %s: want it to say that a key without plan names none", b)
	}
	if rec := adm.do("GET", "/admin/keys?tenant=acme", "", ""); !strings.Contains(rec.Body.String(), `"keys":[]`) {
		t.Fatalf("the refused key was made: %s", rec.Body)
	}
	for _, body := range []string{`{"tenant":"acme"}`, `{"tenant":"acme","plan":"enterprise"}`} {
		rec, m := create(body)
		if rec.Code != 201 || m["warnings"] != nil {
			t.Fatalf("%s: %d %s, want 201 without warnings", body, rec.Code, rec.Body)
		}
		if got := plan(m["key"].(string)); got != "enterprise" {
			t.Errorf("%s: /v1/me/limits plan %q, want enterprise", body, got)
		}
	}

	// A tenant without an entry: the key's plan decides.
	_, m := create(`{"tenant":"newco","plan":"team"}`)
	newco := m["key"].(string)
	if got := plan(newco); got != "team" {
		t.Errorf("newco's team key: plan %q, want team", got)
	}

	// total counts the query's keys, not every tenant's.
	if rec := adm.do("GET", "/admin/keys?tenant=bumped", "", ""); !strings.Contains(rec.Body.String(), `"total":0`) {
		t.Errorf("GET /admin/keys?tenant=bumped, a tenant without keys: %s, want total 0", rec.Body)
	}

	// A run-time entry without expiry: refused, naming it.
	if rec := adm.do("PUT", "/admin/tenants/bumped", `{"plan":"enterprise"}`, ""); rec.Code != 200 {
		t.Fatalf("put tenant: %d %s", rec.Code, rec.Body)
	}
	if rec, _ := create(`{"tenant":"bumped","plan":"team"}`); rec.Code != 409 || !strings.Contains(rec.Body.String(), "run-time entry") || !strings.Contains(rec.Body.String(), "DELETE /admin/tenants/bumped") {
		t.Fatalf("a team key for a tenant on enterprise by its run-time entry: %d %s, want 409", rec.Code, rec.Body)
	}
	// One that expires: made, with a warning; the entry decides until then.
	if rec := adm.do("PUT", "/admin/tenants/newco", `{"plan":"enterprise","ttl_seconds":3600}`, ""); rec.Code != 200 {
		t.Fatalf("put tenant: %d %s", rec.Code, rec.Body)
	}
	rec, m = create(`{"tenant":"newco","plan":"team"}`)
	if w, _ := m["warnings"].([]any); rec.Code != 201 || len(w) != 1 || !strings.Contains(w[0].(string), `this key's plan "team" applies from then`) {
		t.Fatalf("a team key for newco, on enterprise for an hour: %d %s, want 201 with a warning", rec.Code, rec.Body)
	}
	if got := plan(m["key"].(string)); got != "enterprise" {
		t.Errorf("newco under its run-time entry: plan %q, want enterprise", got)
	}

	// An entry without a plan (one limit raised) puts its tenant on the
	// default plan, whatever its key names: the answer says so; one with
	// a plan warns of nothing.
	rec = adm.do("PUT", "/admin/tenants/newco", `{"limit":5000}`, "")
	var put struct{ Warnings []string }
	json.Unmarshal(rec.Body.Bytes(), &put)
	if rec.Code != 200 || len(put.Warnings) != 1 || !strings.Contains(put.Warnings[0], "default plan") || !strings.Contains(put.Warnings[0], "give plan") {
		t.Fatalf("an entry without a plan: %d %s, want 200 with a warning naming the default plan", rec.Code, rec.Body)
	}
	if rec := adm.do("PUT", "/admin/tenants/newco", `{"plan":"team","limit":5000}`, ""); rec.Code != 200 || strings.Contains(rec.Body.String(), "warnings") {
		t.Errorf("an entry with a plan: %d %s, want 200 without warnings", rec.Code, rec.Body)
	}
}

// TestKeyPlanUnderARuntimeEntry: a run-time entry ends (it expires, or
// DELETE /admin/tenants removes it), and then the file's entry beneath it
// decides: a key whose plan that entry contradicts is refused though the
// run-time entry agrees with the key (the key would say team while
// /v1/me/limits said enterprise).
func TestKeyPlanUnderARuntimeEntry(t *testing.T) {
	prefix := fmt.Sprintf("keyunder%d:", time.Now().UnixNano())
	pub, adm := keyInstance(t, prefix, 10)
	for _, entry := range []string{`{"plan":"team","ttl_seconds":3600}`, `{"plan":"team"}`} {
		if rec := adm.do("PUT", "/admin/tenants/acme", entry, ""); rec.Code != 200 {
			t.Fatalf("PUT /admin/tenants/acme %s: %d %s", entry, rec.Code, rec.Body)
		}
		rec := adm.do("POST", "/admin/keys", `{"tenant":"acme","plan":"team"}`, "")
		if b := rec.Body.String(); rec.Code != 409 || !strings.Contains(b, "tenants.acme") || !strings.Contains(b, `plan \"enterprise\"`) || !strings.Contains(b, "once its run-time entry") {
			t.Errorf("under run-time entry %s, a team key for acme (enterprise by its file entry): %d %s, want 409 naming the file entry", entry, rec.Code, b)
		}
	}
	if rec := adm.do("GET", "/admin/keys?tenant=acme", "", ""); !strings.Contains(rec.Body.String(), `"keys":[]`) {
		t.Fatalf("a refused key was made: %s", rec.Body)
	}
	// A key on the file's plan under an expiring run-time entry of another
	// plan: made, with the warning; then DELETE, and the key and
	// /v1/me/limits agree.
	if rec := adm.do("PUT", "/admin/tenants/acme", `{"plan":"team","ttl_seconds":3600}`, ""); rec.Code != 200 {
		t.Fatalf("PUT: %d %s", rec.Code, rec.Body)
	}
	rec := adm.do("POST", "/admin/keys", `{"tenant":"acme","plan":"enterprise"}`, "")
	var m struct {
		Key      string
		Plan     string
		Warnings []string
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil || rec.Code != 201 || len(m.Warnings) != 1 {
		t.Fatalf("an enterprise key for acme under a team entry for an hour: %d %s, want 201 with a warning", rec.Code, rec.Body)
	}
	if rec := adm.do("DELETE", "/admin/tenants/acme", "", ""); rec.Code != 200 {
		t.Fatalf("DELETE: %d %s", rec.Code, rec.Body)
	}
	rec = pub.do("GET", "/v1/me/limits", "", m.Key)
	if !strings.Contains(rec.Body.String(), `"plan":"enterprise"`) || m.Plan != "enterprise" {
		t.Errorf("after DELETE: key plan %q, /v1/me/limits %s; want both enterprise", m.Plan, rec.Body)
	}
}

// waitFor polls cond every 20 ms for up to 2 s: the propagation bound.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > 2*time.Second {
			t.Fatalf("%s: not within 2 s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("%s after %v", what, time.Since(start).Round(time.Millisecond))
}

// TestAdminKeysRefuse: each bad request is answered with what is wrong,
// and changes nothing.
func TestAdminKeysRefuse(t *testing.T) {
	prefix := fmt.Sprintf("keysbad%d:", time.Now().UnixNano())
	_, adm := keyInstance(t, prefix, 2)
	long := strings.Repeat("x", 300)
	cases := []struct {
		name, method, path, body, token string
		status                          int
		detail                          string
	}{
		{"no token", "POST", "/admin/keys", `{"tenant":"a"}`, "wrong-token-wrong-token", 401, "admin token"},
		{"no tenant", "POST", "/admin/keys", `{}`, "", 400, "tenant: required"},
		{"long tenant", "POST", "/admin/keys", `{"tenant":"` + long + `"}`, "", 400, "tenant: 300 bytes"},
		{"tenant with a trailing space", "POST", "/admin/keys", `{"tenant":"acme "}`, "", 400, `tenant: \"acme \" has white space at its start or end`},
		{"tenant with a newline", "POST", "/admin/keys", `{"tenant":"acme\n"}`, "", 400, `tenant: \"acme\\n\" holds a control character (U+000A)`},
		{"tenant with a zero-width space", "POST", "/admin/keys", `{"tenant":"ac\u200bme"}`, "", 400, `tenant: \"ac\\u200bme\" holds an invisible format character`},
		{"tenant entry with a trailing space", "PUT", "/admin/tenants/acme%20", `{"plan":"team"}`, "", 400, `tenant ID: \"acme \" has white space`},
		{"tenant entry with a tab", "PUT", "/admin/tenants/%09acme", `{"plan":"team"}`, "", 400, `tenant ID: \"\\tacme\" holds a control character`},
		{"long label", "POST", "/admin/keys", `{"tenant":"a","label":"` + long + `"}`, "", 400, "label: 300 bytes"},
		{"unknown plan", "POST", "/admin/keys", `{"tenant":"a","plan":"gold"}`, "", 400, `plan: \"gold\" is not a plan of the policy in force: want one of enterprise, free, team (or omit plan)`},
		{"past expiry", "POST", "/admin/keys", `{"tenant":"a","expires_at":"2020-01-01T00:00:00Z"}`, "", 400, "already past"},
		{"two expiries", "POST", "/admin/keys", `{"tenant":"a","expires_at":"2030-01-01T00:00:00Z","ttl_seconds":5}`, "", 400, "give one"},
		{"unknown field", "POST", "/admin/keys", `{"tenant":"a","key":"mine"}`, "", 400, "key"},
		{"bad limit", "GET", "/admin/keys?limit=5000", "", "", 400, "limit"},
		{"long ID", "GET", "/admin/keys/0123456789abcdef0", "", "", 404, "hex digits"},
		{"malformed ID", "DELETE", "/admin/keys/XYZ", "", "", 404, "hex digits"},
		{"unknown ID", "DELETE", "/admin/keys/0123456789abcdef", "", "", 404, "no API key"},
		{"patch unknown", "PATCH", "/admin/keys/0123456789abcdef", `{"label":"x"}`, "", 404, "no API key"},
		{"wrong method", "PUT", "/admin/keys", `{}`, "", 405, ""},
	}
	for _, c := range cases {
		rec := adm.do(c.method, c.path, c.body, c.token)
		if rec.Code != c.status || !strings.Contains(rec.Body.String(), c.detail) || rec.Header().Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s: %d %s %s, want %d naming %q", c.name, rec.Code, rec.Header().Get("Content-Type"), rec.Body.String(), c.status, c.detail)
		}
	}
	if rec := adm.do("GET", "/admin/keys", "", ""); !strings.Contains(rec.Body.String(), `"total":0`) {
		t.Errorf("refused requests made keys: %s", rec.Body.String())
	}
	// The store is bounded: the third key of a store of two is refused.
	for i := range 3 {
		rec := adm.do("POST", "/admin/keys", `{"tenant":"a"}`, "")
		if want := map[bool]int{true: 201, false: 400}[i < 2]; rec.Code != want {
			t.Errorf("key %d of a store of 2: %d %s", i+1, rec.Code, rec.Body.String())
		}
	}
}
