package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fairgate/fairgate/internal/redistest"
	"github.com/fairgate/fairgate/store/redisstore"
)

// TestReadyzWithRedisDown stops a real redis-server under a config with a
// fail-closed class (the example's write): /readyz stays 200 and names the
// store down in its body (on main it answered 503, so every instance left
// its Service at once); with ReadyRequiresStore it answers 503; /healthz
// is 200 either way; fairgate_store_up and fairgate_ready say the same.
func TestReadyzWithRedisDown(t *testing.T) {
	redistest.Need(t)
	for _, c := range []struct {
		name         string
		requires     bool
		status       int
		readyMetric  float64
		requiresBody bool
	}{
		{name: "default", status: 200, readyMetric: 1},
		{name: "ready-requires-store", requires: true, status: 503, readyMetric: 0, requiresBody: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv, err := redistest.Start()
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			rs, err := redisstore.New(redisstore.Config{URL: "redis://" + srv.Addr, Prefix: "ready:"})
			if err != nil {
				t.Fatal(err)
			}
			defer rs.Close()
			lim := testLimiter(t, rs, 50*time.Millisecond)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go lim.Run(ctx)
			if !lim.Snapshot().HasFailClosed() {
				t.Fatal("the example config has no fail-closed policy: the test needs one")
			}
			reg := prometheus.NewRegistry()
			h, err := New(Config{Limiter: lim, Registerer: reg, ReadyRequiresStore: c.requires})
			if err != nil {
				t.Fatal(err)
			}
			ts := httptest.NewServer(h)
			defer ts.Close()

			readyz := func() (int, map[string]any) {
				t.Helper()
				resp, err := http.Get(ts.URL + "/readyz")
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				var m map[string]any
				if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
					t.Fatal(err)
				}
				return resp.StatusCode, m
			}
			if code, m := readyz(); code != 200 || m["store"] != "up" || m["requires_store"] != c.requires {
				t.Fatalf("/readyz with Redis up: %d %v", code, m)
			}

			srv.Kill()
			// Decisions find the store down and open its breaker.
			deadline := time.Now().Add(10 * time.Second)
			for {
				resp, err := http.Post(ts.URL+"/v1/check", "application/json", strings.NewReader(`{"tenant":"acme","class":"write"}`))
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if _, m := readyz(); m["store"] == "down" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("/readyz did not report the store down within 10 s of Redis stopping")
				}
			}
			code, m := readyz()
			if code != c.status || m["ready"] != (c.status == 200) || m["store"] != "down" || m["fail_closed_policies"] != true || m["requires_store"] != c.requiresBody {
				t.Errorf("/readyz with Redis down: %d %v, want %d naming the store down", code, m, c.status)
			}
			if resp, err := http.Get(ts.URL + "/healthz"); err != nil || resp.StatusCode != 200 {
				t.Errorf("/healthz with Redis down: %v %v, want 200", resp, err)
			} else {
				resp.Body.Close()
			}
			if n, err := testutil.GatherAndCount(reg, "fairgate_store_up", "fairgate_ready"); err != nil || n != 2 {
				t.Fatalf("the health gauges: %d, %v", n, err)
			}
			mfs, _ := reg.Gather()
			for _, mf := range mfs {
				got := mf.GetMetric()[0].GetGauge().GetValue()
				switch mf.GetName() {
				case "fairgate_store_up":
					if got != 0 {
						t.Errorf("fairgate_store_up %v with Redis down, want 0", got)
					}
				case "fairgate_ready":
					if got != c.readyMetric {
						t.Errorf("fairgate_ready %v, want %v", got, c.readyMetric)
					}
				}
			}

			// Draining is 503 whatever the store, with the store still in
			// the body.
			h.Drain()
			if code, m := readyz(); code != 503 || m["draining"] != true || m["store"] != "down" {
				t.Errorf("/readyz draining: %d %v, want 503 draining", code, m)
			}
		})
	}
}
