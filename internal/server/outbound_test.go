package server

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/fairq"
	"github.com/fairgate/fairgate/internal/redistest"
	"github.com/fairgate/fairgate/quota"
	"github.com/fairgate/fairgate/store"
	"github.com/fairgate/fairgate/store/redisstore"
)

// smsProvider is the example config's provider.
var smsProvider = quota.Provider{
	Limit:  algo.Limit{Limit: 100, Period: time.Second, Burst: 20},
	Tenant: algo.Limit{Limit: 20, Period: time.Second, Burst: 5},
}

// outboundServerFor is a server on st with the sms provider, the jobs API
// (in memory), API keys and the worker token, for fuzzing.
func outboundServerFor(tb testing.TB, st store.Store) *Server {
	tb.Helper()
	q, err := quota.New(quota.Config{Store: st, Providers: map[string]quota.Provider{"sms": smsProvider}, MaxWait: 10 * time.Millisecond})
	if err != nil {
		tb.Fatal(err)
	}
	jobs, _ := fairq.NewMemory(fairq.MemoryConfig{Kinds: jobKinds})
	s, err := New(Config{Limiter: testLimiter(tb, st, 0), Auth: testAuth(tb), Quotas: q, Jobs: jobs, JobKinds: jobKinds, WorkerToken: workerTok})
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// outboundServer is a server on st with the sms provider and, if token is
// not empty, a worker token.
func outboundServer(t *testing.T, st store.Store, token string) *Server {
	t.Helper()
	q, err := quota.New(quota.Config{Store: st, Providers: map[string]quota.Provider{"sms": smsProvider}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Limiter: testLimiter(t, st, 0), Quotas: q, WorkerToken: token})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestOutboundAcquire(t *testing.T) {
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			s := outboundServer(t, st, "")
			acquire := func(tenant string) *http.Response {
				return call{method: "POST", path: "/v1/outbound/acquire", body: `{"provider":"sms","tenant":"` + tenant + `","max_wait_ms":0}`}.do(s).Result()
			}
			for i := range smsProvider.Tenant.Burst {
				if resp := acquire("acme"); resp.StatusCode != 200 {
					t.Fatalf("acquire %d within the share's burst: %d", i, resp.StatusCode)
				}
			}
			// Over the share: refused (a loaded machine may refill one
			// place between calls, one emission interval: a few tries).
			var (
				rec *httptest.ResponseRecorder
				m   map[string]any
			)
			for range 10 {
				rec = call{method: "POST", path: "/v1/outbound/acquire", body: `{"provider":"sms","tenant":"acme","max_wait_ms":0}`}.do(s)
				if m = decodeMap(t, rec); rec.Code != 200 {
					break
				}
			}
			if rec.Code != 429 || m["limited_by"] != "tenant_share" || m["acquired"] != false {
				t.Fatalf("over the share: %d %v, want 429 limited by the tenant share", rec.Code, m)
			}
			retry := time.Duration(m["retry_after_ms"].(float64)) * time.Millisecond
			if retry <= 0 || retry > 50*time.Millisecond {
				t.Fatalf("retry_after_ms %v, want up to one emission interval (50ms)", retry)
			}
			if ra, _ := strconv.Atoi(rec.Header().Get("Retry-After")); ra != 1 {
				t.Errorf("Retry-After %q, want 1 (whole seconds, rounded up)", rec.Header().Get("Retry-After"))
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/problem+json" {
				t.Errorf("Content-Type %q", ct)
			}
			// Another tenant is untouched by acme's share.
			if resp := acquire("globex"); resp.StatusCode != 200 {
				t.Fatalf("another tenant: %d", resp.StatusCode)
			}
			// Waiting the retry-after suffices.
			time.Sleep(retry)
			if resp := acquire("acme"); resp.StatusCode != 200 {
				t.Fatalf("after waiting retry_after_ms: %d", resp.StatusCode)
			}
			// Given time to wait, the call waits instead of refusing.
			rec = call{method: "POST", path: "/v1/outbound/acquire", body: `{"provider":"sms","tenant":"acme","max_wait_ms":1000}`}.do(s)
			if m := decodeMap(t, rec); rec.Code != 200 || m["acquired"] != true {
				t.Fatalf("acquire with a wait: %d %v", rec.Code, m)
			}
		})
	}
}

func TestOutboundInvalidInput(t *testing.T) {
	t.Parallel()
	s := outboundServer(t, stores(t)["memory"], "")
	cases := []struct{ path, body, says string }{
		{"/v1/outbound/acquire", `{"provider":"fax","tenant":"acme"}`, `unknown provider "fax": configured are sms`},
		{"/v1/outbound/acquire", `{"tenant":"acme"}`, "provider: required"},
		{"/v1/outbound/acquire", `{"provider":"sms"}`, "tenant: required"},
		{"/v1/outbound/acquire", `{"provider":"sms","tenant":""}`, "tenant: required"},
		{"/v1/outbound/acquire", `{"provider":"sms","tenant":"acme","max_wait_ms":-1}`, "max_wait_ms: -1 is outside 0..20000"},
		{"/v1/outbound/acquire", `{"provider":"sms","tenant":"acme","max_wait_ms":3600000}`, "max_wait_ms: 3600000 is outside"},
		{"/v1/outbound/acquire", `{"provider":"sms","tenant":"acme","max_wait_ms":"2s"}`, "field max_wait_ms"},
		{"/v1/outbound/acquire", `{"provider":"sms","tenant":"acme","x":1}`, `unknown field "x"`},
		{"/v1/outbound/acquire", `{"provider":"sms","tenant":"` + strings.Repeat("a", 17<<10) + `"}`, "tenant: 17408 bytes is over"},
		{"/v1/outbound/pause", `{"provider":"fax","retry_after_ms":1000}`, `unknown provider "fax"`},
		{"/v1/outbound/pause", `{"provider":"sms"}`, "retry_after_ms: required"},
		{"/v1/outbound/pause", `{"provider":"sms","retry_after_ms":-5}`, "retry_after_ms: -5 is outside"},
		{"/v1/outbound/pause", `{"provider":"sms","retry_after_ms":7200000}`, "retry_after_ms: 7200000 is outside 0..3600000"},
		{"/v1/outbound/pause", `[]`, "body must be a JSON object"},
		{"/v1/outbound/pause", `{"provider":"sms","tenant":"","retry_after_ms":1000}`, "tenant: empty: name the tenant"},
		{"/v1/outbound/pause", `{"provider":"sms","tenant":"` + strings.Repeat("a", 17<<10) + `","retry_after_ms":1000}`, "tenant: 17408 bytes is over"},
		{"/v1/outbound/pause", `{"provider":"sms","tenant":"acme","retry_after_ms":7200000}`, "retry_after_ms: 7200000 is outside"},
	}
	for _, c := range cases {
		rec := call{method: "POST", path: c.path, body: c.body}.do(s)
		m := decodeMap(t, rec)
		if detail, _ := m["detail"].(string); rec.Code != 400 || !strings.Contains(detail, c.says) {
			t.Errorf("%s %s: %d %q, want 400 saying %q", c.path, c.body[:min(len(c.body), 80)], rec.Code, detail, c.says)
		}
	}
	if rec := (call{method: "GET", path: "/v1/outbound/acquire"}).do(s); rec.Code != 405 {
		t.Errorf("GET acquire: %d, want 405", rec.Code)
	}
}

func TestOutboundWorkerToken(t *testing.T) {
	t.Parallel()
	const tok = "worker-token-0123456789"
	s := outboundServer(t, stores(t)["memory"], tok)
	body := `{"provider":"sms","tenant":"acme"}`
	for _, h := range []map[string]string{nil, {"Authorization": "Bearer wrong-token-0123456789"}, {"Authorization": tok}} {
		rec := call{method: "POST", path: "/v1/outbound/acquire", body: body, headers: h}.do(s)
		if rec.Code != 401 || rec.Header().Get("WWW-Authenticate") == "" {
			t.Errorf("acquire with %v: %d, want 401 with WWW-Authenticate", h, rec.Code)
		}
		rec = call{method: "POST", path: "/v1/outbound/pause", body: `{"provider":"sms","retry_after_ms":60000}`, headers: h}.do(s)
		if rec.Code != 401 {
			t.Errorf("pause with %v: %d, want 401", h, rec.Code)
		}
	}
	rec := call{method: "POST", path: "/v1/outbound/acquire", body: body, headers: map[string]string{"Authorization": "Bearer " + tok}}.do(s)
	if rec.Code != 200 {
		t.Fatalf("acquire with the token: %d %s", rec.Code, rec.Body)
	}
	q, _ := quota.New(quota.Config{Store: stores(t)["memory"]})
	if _, err := New(Config{Limiter: testLimiter(t, stores(t)["memory"], 0), Quotas: q, WorkerToken: "short"}); err == nil || !strings.Contains(err.Error(), "at least 16") {
		t.Errorf("a short worker token: %v", err)
	}
}

// TestOutboundPauseAcrossInstances pauses the provider through one
// fairgate instance and finds the other refusing until the pause ends.
func TestOutboundPauseAcrossInstances(t *testing.T) {
	t.Parallel()
	prefix := fmt.Sprintf("obsrv%d:", time.Now().UnixNano())
	var inst [2]*Server
	for i := range inst {
		rs, err := redisstore.New(redisstore.Config{URL: "redis://" + redistest.Shared(t).Addr, Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rs.Close() })
		inst[i] = outboundServer(t, rs, "")
	}
	const pause = 800 * time.Millisecond
	before := time.Now()
	rec := call{method: "POST", path: "/v1/outbound/pause", body: fmt.Sprintf(`{"provider":"sms","retry_after_ms":%d}`, pause.Milliseconds())}.do(inst[0])
	if rec.Code != 200 {
		t.Fatalf("pause: %d %s", rec.Code, rec.Body)
	}
	paused := time.Now()
	rec = call{method: "POST", path: "/v1/outbound/acquire", body: `{"provider":"sms","tenant":"acme","max_wait_ms":0}`}.do(inst[1])
	m := decodeMap(t, rec)
	if rec.Code != 429 || m["limited_by"] != "provider" {
		t.Fatalf("other instance during the pause: %d %v, want 429 limited by the provider", rec.Code, m)
	}
	// The pause began after before, the answer was given by now: what
	// is left of it is within a millisecond (rounding) of that, however
	// slow the machine.
	if ra, asked := time.Duration(m["retry_after_ms"].(float64))*time.Millisecond, time.Since(before); ra > pause || ra < pause-asked-time.Millisecond {
		t.Errorf("retry_after_ms %v during a %v pause, %v after it was asked for", ra, pause, asked)
	}
	// A waiting acquire on the other instance is admitted once it ends.
	rec = call{method: "POST", path: "/v1/outbound/acquire", body: `{"provider":"sms","tenant":"acme","max_wait_ms":3000}`}.do(inst[1])
	if rec.Code != 200 {
		t.Fatalf("waiting acquire: %d %s", rec.Code, rec.Body)
	}
	if waited := time.Since(paused); waited < pause-50*time.Millisecond {
		t.Fatalf("admitted %v after the pause began, before its end at %v", waited, pause)
	}
}

// TestOutboundPauseTenant: a pause naming a tenant stops that tenant's
// calls only, until a quorum of the tenants calling the provider have
// been asked to wait; one without a tenant pauses the provider.
func TestOutboundPauseTenant(t *testing.T) {
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			s := outboundServer(t, st, "")
			acquire := func(tenant string) (int, map[string]any) {
				rec := call{method: "POST", path: "/v1/outbound/acquire", body: `{"provider":"sms","tenant":"` + tenant + `","max_wait_ms":0}`}.do(s)
				return rec.Code, decodeMap(t, rec)
			}
			pause := func(body string) map[string]any {
				rec := call{method: "POST", path: "/v1/outbound/pause", body: body}.do(s)
				if rec.Code != 200 {
					t.Fatalf("pause %s: %d %s", body, rec.Code, rec.Body)
				}
				return decodeMap(t, rec)
			}
			for _, tenant := range []string{"acme", "globex", "initech", "umbrella"} {
				if code, m := acquire(tenant); code != 200 {
					t.Fatalf("%s: %d %v", tenant, code, m)
				}
			}
			m := pause(`{"provider":"sms","tenant":"acme","retry_after_ms":60000}`)
			if m["tenant"] != "acme" || m["provider_paused"] != false || m["paused"] != true {
				t.Fatalf("acme's pause: %v, want acme paused and not the provider", m)
			}
			if code, m := acquire("acme"); code != 429 || m["limited_by"] != "tenant_pause" || m["retry_after_ms"].(float64) < 59000 {
				t.Fatalf("acme during its pause: %d %v, want 429 limited by its pause", code, m)
			}
			if code, m := acquire("globex"); code != 200 {
				t.Fatalf("globex during acme's pause: %d %v, want admitted", code, m)
			}
			// Two of the four tenants asked to wait: the provider pauses,
			// until the latest time both were asked to wait for.
			if m := pause(`{"provider":"sms","tenant":"globex","retry_after_ms":30000}`); m["provider_paused"] != true {
				t.Fatalf("globex's pause: %v, want the provider paused on the quorum", m)
			}
			if code, m := acquire("initech"); code != 429 || m["limited_by"] != "provider" || m["retry_after_ms"].(float64) > 30000 {
				t.Fatalf("initech during the provider's pause: %d %v, want 429 limited by the provider for up to 30 s", code, m)
			}
			if m := pause(`{"provider":"sms","retry_after_ms":60000}`); m["provider_paused"] != true || m["tenant"] != nil {
				t.Fatalf("the operator's pause: %v", m)
			}
		})
	}
}
