package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairgate/fairgate/internal/redistest"
	"github.com/fairgate/fairgate/store/redisstore"
)

type sample struct {
	at      time.Time
	class   string
	status  int // the decision's status: 200, 429 or 503
	reason  string
	latency time.Duration
}

// TestStoreOutageUnderLoad kills Redis (kill -9), and separately stalls it
// (SIGSTOP), under a steady load of fail-open (read) and fail-closed
// (write) decisions: fail-open keeps admitting, degraded; fail-closed
// answers 503; no decision waits much past the 50 ms store deadline;
// /readyz reports the store down and back up in its body while it stays
// 200 (the instance still answers; TestReadyzWithRedisDown has the
// opt-in to 503); once Redis is back, decisions are clean again within 5 s
// without a restart.
func TestStoreOutageUnderLoad(t *testing.T) {
	for _, mode := range []string{"kill", "stall"} {
		t.Run(mode, func(t *testing.T) { testOutage(t, mode) })
	}
}

func testOutage(t *testing.T, mode string) {
	redistest.Need(t)
	srv, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	rs, err := redisstore.New(redisstore.Config{URL: "redis://" + srv.Addr, Prefix: "out:"})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	const timeout = 50 * time.Millisecond
	lim := testLimiterCooldown(t, rs, timeout, 0) // the production breaker: 2 s cooldown
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go lim.Run(ctx)
	h, err := New(Config{Limiter: lim})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(h)
	defer ts.Close()
	client := &http.Client{Timeout: 5 * time.Second}

	var mu sync.Mutex
	var samples []sample
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				class := []string{"read", "write"}[(w+i)%2]
				body := fmt.Sprintf(`{"tenant":"t%d","class":%q}`, (w*7+i)%50, class)
				start := time.Now()
				resp, err := client.Post(ts.URL+"/v1/check", "application/json", strings.NewReader(body))
				if err != nil {
					t.Error(err)
					return
				}
				var m struct {
					Status int
					Reason string
				}
				decodeJSONBody(resp, &m)
				mu.Lock()
				samples = append(samples, sample{start, class, m.Status, m.Reason, time.Since(start)})
				mu.Unlock()
				time.Sleep(2 * time.Millisecond)
			}
		})
	}
	// waitStore waits until /readyz reports the store as want, each
	// answer 200 meanwhile.
	waitStore := func(want string, within time.Duration) time.Duration {
		start := time.Now()
		for {
			resp, err := client.Get(ts.URL + "/readyz")
			if err != nil {
				t.Fatal(err)
			}
			var m map[string]any
			decodeJSONBody(resp, &m)
			if resp.StatusCode != 200 {
				t.Fatalf("/readyz %d %v, want 200 whatever the store", resp.StatusCode, m)
			}
			if m["store"] == want {
				return time.Since(start)
			}
			if time.Since(start) > within {
				t.Fatalf("/readyz did not report the store %s within %v: %v", want, within, m)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	time.Sleep(300 * time.Millisecond)
	waitStore("up", time.Second)
	if b := readyBreaker(t, client, ts.URL); b["state"] != "closed" || b["not_closed"].(float64) != 0 {
		t.Errorf("/readyz store_breaker with Redis up: %v, want closed", b)
	}
	outStart := time.Now()
	switch mode {
	case "kill":
		srv.Kill()
	case "stall":
		if err := srv.Pause(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("/readyz reported the store down after %v", waitStore("down", 5*time.Second))
	if b := readyBreaker(t, client, ts.URL); b["state"] == "closed" || b["not_closed"].(float64) < 1 {
		t.Errorf("/readyz store_breaker while Redis is out: %v, want a breaker not closed", b)
	}
	time.Sleep(time.Second)
	outEnd := time.Now()
	switch mode {
	case "kill":
		if err := srv.Restart(); err != nil {
			t.Fatal(err)
		}
	case "stall":
		srv.Resume()
	}
	back := time.Now()
	// Clean again: both classes decided by Redis (reason allowed).
	var clean time.Time
	for clean.IsZero() {
		if time.Since(back) > 5*time.Second {
			t.Fatalf("no clean decisions within 5 s of Redis coming back")
		}
		time.Sleep(50 * time.Millisecond)
		mu.Lock()
		var readOK, writeOK bool
		for _, s := range samples {
			if s.at.After(back) && s.reason == "allowed" {
				readOK = readOK || s.class == "read"
				writeOK = writeOK || s.class == "write"
			}
		}
		mu.Unlock()
		if readOK && writeOK {
			clean = time.Now()
		}
	}
	t.Logf("clean decisions %v after Redis came back", clean.Sub(back))
	waitStore("up", 5*time.Second)
	close(stop)
	wg.Wait()

	// During the outage (from 200 ms in, once the first calls have timed
	// out, until it ended): read degraded and admitted, write 503.
	var lat []time.Duration
	var reads, writes, readsAdmitted int
	for _, s := range samples {
		if s.at.Before(outStart) || s.at.After(outEnd) {
			continue
		}
		lat = append(lat, s.latency)
		if s.at.Before(outStart.Add(200 * time.Millisecond)) {
			continue
		}
		switch s.class {
		case "read":
			reads++
			if s.status == 200 {
				readsAdmitted++
			}
			// The fallback decides: it admits, and it limits too (each
			// tenant at its plan's limit on this instance).
			if s.status == 503 || s.reason != "degraded_open" {
				t.Errorf("read during the outage: status %d reason %s; want degraded_open", s.status, s.reason)
			}
		case "write":
			writes++
			if s.status != 503 || s.reason != "unavailable_closed" {
				t.Errorf("write during the outage: status %d reason %s; want 503 unavailable_closed", s.status, s.reason)
			}
		}
	}
	if reads < 10 || writes < 10 || readsAdmitted < reads/4 {
		t.Fatalf("%d reads (%d admitted) and %d writes during the outage", reads, readsAdmitted, writes)
	}
	slices.Sort(lat)
	p99, worst := lat[len(lat)*99/100], lat[len(lat)-1]
	t.Logf("%s: %d decisions during the outage, HTTP round trip p50 %v p99 %v max %v", mode, len(lat), lat[len(lat)/2], p99, worst)
	// The deadline bounds every store call: what this asserts is that no
	// decision waits on the dead or stalled store without bound (without
	// a deadline a stalled Redis held them until the client gave up). How
	// close to the deadline they stay is a speed figure, for the
	// benchmarks: on a loaded 2-core machine with the race detector a
	// scheduling hiccup alone can take a few hundred milliseconds.
	if worst > 2*time.Second {
		t.Errorf("a decision waited %v during the outage (p99 %v): the store's deadline is %v", worst, p99, timeout)
	}
}

func decodeJSONBody(resp *http.Response, v any) {
	defer resp.Body.Close()
	_ = jsonNewDecoder(resp).Decode(v)
}

func jsonNewDecoder(resp *http.Response) interface{ Decode(any) error } {
	return json.NewDecoder(resp.Body)
}

// readyBreaker returns /readyz's store_breaker.
func readyBreaker(t *testing.T, client *http.Client, url string) map[string]any {
	t.Helper()
	resp, err := client.Get(url + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		StoreBreaker map[string]any `json:"store_breaker"`
	}
	decodeJSONBody(resp, &m)
	if m.StoreBreaker == nil {
		t.Fatal("/readyz has no store_breaker on a Redis store")
	}
	return m.StoreBreaker
}
