package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairgate/fairgate/examples"
	"github.com/fairgate/fairgate/httplimit/problem"
	"github.com/fairgate/fairgate/internal/config"
	"github.com/fairgate/fairgate/internal/redistest"
	"github.com/fairgate/fairgate/internal/testenv"
	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/store"
	"github.com/fairgate/fairgate/store/memstore"
	"github.com/fairgate/fairgate/store/redisstore"
)

func TestMain(m *testing.M) {
	apiWarm()
	os.Exit(apiReport(redistest.MainWithCluster(m)))
}

// testLimiter is a limiter with the example policy on st.
func testLimiter(tb testing.TB, st store.Store, timeout time.Duration) *limiter.Limiter {
	tb.Helper()
	return testLimiterCooldown(tb, st, timeout, 500*time.Millisecond)
}

// testLimiterCooldown is testLimiter with the breaker's cooldown (0: the
// production default).
func testLimiterCooldown(tb testing.TB, st store.Store, timeout, cooldown time.Duration) *limiter.Limiter {
	tb.Helper()
	cfg, err := config.Parse(examples.ConfigName, examples.Config())
	if err != nil {
		tb.Fatal(err)
	}
	l, err := limiter.New(limiter.Config{Store: st, Policy: cfg.Policy, Timeout: timeout, Fallback: memstore.New(memstore.Config{}), BreakerCooldown: cooldown})
	if err != nil {
		tb.Fatal(err)
	}
	return l
}

func newServer(t *testing.T, st store.Store, timeout time.Duration) *httptest.Server {
	t.Helper()
	h, err := New(Config{Limiter: testLimiter(t, st, timeout)})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(checkedAPI(h))
	t.Cleanup(ts.Close)
	return ts
}

func post(t *testing.T, url, body string) (*http.Response, map[string]any) {
	t.Helper()
	resp, err := http.Post(url+"/v1/take", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("body %q is not JSON: %v", raw, err)
	}
	return resp, m
}

// stores is a fresh memory store and one on the shared Redis with a key
// prefix of its own; under -short the memory store alone (the fast tier
// starts no Redis).
func stores(t *testing.T) map[string]store.Store {
	out := map[string]store.Store{"memory": memstore.New(memstore.Config{})}
	if testenv.Short() {
		return out
	}
	rs, err := redisstore.New(redisstore.Config{URL: "redis://" + redistest.Shared(t).Addr, Prefix: fmt.Sprintf("srv%d:", time.Now().UnixNano())})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	out["redis"] = rs
	return out
}

func TestTake(t *testing.T) {
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ts := newServer(t, st, 0)
			key := fmt.Sprintf(`"take-%s"`, name)
			_, m := post(t, ts.URL, `{"key":`+key+`,"limit":2,"period_ms":60000,"burst":2,"algorithm":"gcra"}`)
			want := map[string]any{"allowed": true, "limit": 2.0, "remaining": 1.0, "retry_after_ms": 0.0, "reset_after_ms": 30000.0}
			if fmt.Sprint(m) != fmt.Sprint(want) {
				t.Errorf("first take = %v, want %v", m, want)
			}
			// A peek: allowed, current remaining, nothing changes.
			for range 2 {
				if _, m := post(t, ts.URL, `{"key":`+key+`,"limit":2,"period_ms":60000,"cost":0}`); m["allowed"] != true || m["remaining"] != 1.0 {
					t.Errorf("peek = %v", m)
				}
			}
			post(t, ts.URL, `{"key":`+key+`,"limit":2,"period_ms":60000}`)
			resp, m := post(t, ts.URL, `{"key":`+key+`,"limit":2,"period_ms":60000}`)
			if resp.StatusCode != 200 || m["allowed"] != false || m["remaining"] != 0.0 {
				t.Errorf("over the limit = %d %v, want 200 with allowed false, remaining 0", resp.StatusCode, m)
			}
			// Retry-after is rounded up to whole ms: 30 s minus the elapsed µs.
			if ra := m["retry_after_ms"].(float64); ra < 29000 || ra > 30000 {
				t.Errorf("retry_after_ms = %v, want just under 30000", ra)
			}
			// The same key with another algorithm is another state.
			for _, a := range []string{"token_bucket", "sliding_log", "sliding_window", "fixed_window"} {
				if _, m := post(t, ts.URL, `{"key":`+key+`,"limit":2,"period_ms":60000,"algorithm":"`+a+`"}`); m["allowed"] != true || m["remaining"] != 1.0 {
					t.Errorf("%s on a key used by gcra = %v, want a fresh state", a, m)
				}
			}
			// Fixed windows: reset is the end of the window, aligned to the epoch.
			_, m = post(t, ts.URL, `{"key":`+key+`,"limit":2,"period_ms":60000,"algorithm":"fixed_window","cost":0}`)
			if end := 60000 - time.Now().UnixMilli()%60000; absDiff(m["reset_after_ms"].(float64), float64(end)) > 1000 {
				t.Errorf("fixed window reset_after_ms = %v, want about %d (the window's end)", m["reset_after_ms"], end)
			}
		})
	}
}

func absDiff(a, b float64) float64 {
	if a > b {
		return a - b
	}
	return b - a
}

func TestTakeInvalidInput(t *testing.T) {
	ts := newServer(t, memstore.New(memstore.Config{}), 0)
	tests := []struct{ body, detail string }{
		{`{"key":`, "not valid JSON"},
		{``, "body is empty"},
		{`[1,2]`, "must be a JSON object, not array"},
		{`"key"`, "must be a JSON object, not string"},
		{`{"key":"k","limit":1,"period_ms":1000} {}`, "more than one JSON value"},
		{`{"key":"k","limit":1,"period_ms":1000,"colour":"red"}`, `unknown field "colour"`},
		{`{"limit":1,"period_ms":1000}`, "key: required"},
		{`{"key":"","limit":1,"period_ms":1000}`, "key: required"},
		{`{"key":5,"limit":1,"period_ms":1000}`, "field key: want a string"},
		{`{"key":"k","period_ms":1000}`, "limit: required"},
		{`{"key":"k","limit":0,"period_ms":1000}`, "limit: 0 is outside"},
		{`{"key":"k","limit":1000000001,"period_ms":1000000}`, "limit: 1000000001 is outside"},
		{`{"key":"k","limit":1.5,"period_ms":1000}`, "field limit: want an integer, got number 1.5"},
		{`{"key":"k","limit":1e40,"period_ms":1000}`, "field limit: want an integer"},
		{`{"key":"k","limit":1}`, "period_ms: required"},
		{`{"key":"k","limit":1,"period_ms":0}`, "period_ms: 0 is outside"},
		{`{"key":"k","limit":1,"period_ms":31622400001}`, "period_ms: 31622400001 is outside"},
		{`{"key":"k","limit":2000,"period_ms":1}`, "under 1µs per unit"},
		{`{"key":"k","limit":1,"period_ms":1000,"burst":0}`, "burst: 0 is outside"},
		{`{"key":"k","limit":1,"period_ms":1000,"burst":1000000001}`, "burst: 1000000001 is outside"},
		{`{"key":"k","limit":5,"period_ms":1000,"burst":6,"algorithm":"fixed_window"}`, "burst: 6 must equal limit 5"},
		{`{"key":"k","limit":1,"period_ms":31622400000,"burst":1000000000}`, "lower the burst or the period"},
		{`{"key":"k","limit":20000,"period_ms":60000,"algorithm":"sliding_log"}`, "use sliding_window"},
		{`{"key":"k","limit":1,"period_ms":1000,"cost":-1}`, "cost: -1 is negative"},
		{`{"key":"k","limit":5,"period_ms":1000,"burst":3,"cost":4}`, "cost: 4 exceeds burst 3"},
		{`{"key":"k","limit":1,"period_ms":1000,"algorithm":"leaky_bucket"}`, `algorithm: unknown "leaky_bucket"`},
		{`{"key":"k","limit":1,"period_ms":1000,"fail":"maybe"}`, `fail: unknown mode "maybe"`},
	}
	for _, tt := range tests {
		resp, m := post(t, ts.URL, tt.body)
		if resp.StatusCode != 400 || resp.Header.Get("Content-Type") != problem.ContentType {
			t.Errorf("%s: status %d, type %q; want 400 problem+json", tt.body, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		if d, _ := m["detail"].(string); !strings.Contains(d, tt.detail) || m["status"] != 400.0 {
			t.Errorf("%s: problem %v, want detail containing %q", tt.body, m, tt.detail)
		}
	}
}

func TestTakeBodyTooLarge(t *testing.T) {
	ts := newServer(t, memstore.New(memstore.Config{}), 0)
	body := `{"key":"` + strings.Repeat("k", MaxBody) + `","limit":1,"period_ms":1000}`
	resp, m := post(t, ts.URL, body)
	if resp.StatusCode != 413 || resp.Header.Get("Content-Type") != problem.ContentType || !strings.Contains(m["detail"].(string), "over 65536 bytes") {
		t.Errorf("status %d, %v; want 413 problem+json", resp.StatusCode, m)
	}
	// A key of up to 4 KiB is an ordinary key; a longer one is refused by
	// name (the store never holds more than its hash either way).
	body = `{"key":"` + strings.Repeat("k", 4<<10) + `","limit":1,"period_ms":1000}`
	if resp, m := post(t, ts.URL, body); resp.StatusCode != 200 || m["allowed"] != true {
		t.Errorf("4 KiB key: %d %v", resp.StatusCode, m)
	}
	body = `{"key":"` + strings.Repeat("k", 4<<10+1) + `","limit":1,"period_ms":1000}`
	if resp, m := post(t, ts.URL, body); resp.StatusCode != 400 || !strings.Contains(m["detail"].(string), "key: 4097 bytes, at most 4096") {
		t.Errorf("4 KiB + 1 key: %d %v", resp.StatusCode, m)
	}
}

func TestHealthzAndUnknownPaths(t *testing.T) {
	ts := newServer(t, memstore.New(memstore.Config{}), 0)
	resp, err := http.Get(ts.URL + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz: %v %v", resp, err)
	}
	resp, _ = http.Get(ts.URL + "/v1/take")
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET /v1/take = %d, want 405", resp.StatusCode)
	}
	resp, _ = http.Get(ts.URL + "/nope")
	if resp.StatusCode != 404 || resp.Header.Get("Content-Type") != problem.ContentType {
		t.Errorf("GET /nope = %d %q, want 404 problem+json", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
}

// TestFailModes: with the store killed, and with it stalled (SIGSTOP), fail
// closed answers 503 with Retry-After and fail open 200 degraded, each
// within the deadline rather than hanging; once Redis is back, decisions
// are clean again without a restart.
func TestFailModes(t *testing.T) {
	redistest.Need(t)
	srv, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	rs, err := redisstore.New(redisstore.Config{URL: "redis://" + srv.Addr})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	ts := newServer(t, rs, 50*time.Millisecond)
	body := func(fail string) string {
		return `{"key":"fm","limit":1000,"period_ms":1000,"fail":"` + fail + `"}`
	}
	if _, m := post(t, ts.URL, body("closed")); m["allowed"] != true {
		t.Fatalf("healthy store: %v", m)
	}
	check := func(phase string) {
		t.Helper()
		var wg sync.WaitGroup
		for _, fail := range []string{"closed", "open", "closed", "open"} {
			wg.Go(func() {
				start := time.Now()
				resp, m := post(t, ts.URL, body(fail))
				// Not a speed assertion: a call that outlives its 50 ms
				// deadline by seconds is a stall.
				if took := time.Since(start); took > 2*time.Second {
					t.Errorf("%s, fail %s: answered after %v, the deadline is 50ms", phase, fail, took)
				}
				switch fail {
				case "closed":
					if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "5" || resp.Header.Get("Content-Type") != problem.ContentType {
						t.Errorf("%s, fail closed: %d Retry-After %q %v; want 503 problem+json with Retry-After 5", phase, resp.StatusCode, resp.Header.Get("Retry-After"), m)
					}
				case "open":
					if resp.StatusCode != 200 || m["allowed"] != true || m["degraded"] != true {
						t.Errorf("%s, fail open: %d %v; want 200 allowed and degraded", phase, resp.StatusCode, m)
					}
				}
			})
		}
		wg.Wait()
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	check("stalled")
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	check("killed")
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, m := post(t, ts.URL, body("closed"))
		if resp.StatusCode == 200 && m["degraded"] == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no clean decision 10s after Redis came back: %d %v", resp.StatusCode, m)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestConcurrentGarbage: many clients sending random bytes never crash the
// server, and a good request still gets its answer.
func TestConcurrentGarbage(t *testing.T) {
	ts := newServer(t, memstore.New(memstore.Config{}), 0)
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := range 50 {
				b := bytes.Repeat([]byte{byte(w*31 + i)}, i*7)
				resp, err := http.Post(ts.URL+"/v1/take", "application/json", bytes.NewReader(b))
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 400 {
					t.Errorf("garbage got %d, want 400", resp.StatusCode)
				}
			}
		})
	}
	wg.Wait()
	if _, m := post(t, ts.URL, `{"key":"k","limit":1,"period_ms":1000}`); m["allowed"] != true {
		t.Errorf("good request after garbage: %v", m)
	}
}

func TestNewNeedsLimiter(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Error("New without a limiter succeeded")
	}
}
