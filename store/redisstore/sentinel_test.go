package redisstore

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/internal/redistest"
	"github.com/fairgate/fairgate/store"
)

// TestSentinel runs the store on one master, one replica and three real
// sentinels (down-after 2 s), under load from four callers: a SENTINEL
// FAILOVER costs no call an error; a master killed with SIGKILL costs
// errors (the fail mode's answers) only until the sentinels promote the
// replica, then every call succeeds again, with no restart. A sentinel's
// address given as a Redis server's is refused by name.
func TestSentinel(t *testing.T) {
	t.Parallel()
	redistest.Need(t)
	ss, err := redistest.StartSentinels(2 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	if _, err := New(Config{URL: "redis://" + ss.Sentinels[0].Addr}); err == nil || !strings.Contains(err.Error(), "is a Redis Sentinel") {
		t.Fatalf("a sentinel given as redis://: %v, want it refused by name", err)
	}
	st, err := New(Config{URL: "redis-sentinel://" + strings.Join(ss.Addrs(), ",") + "/" + redistest.MasterName})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var mu sync.Mutex
	var errs []time.Time
	var calls atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			var res store.Result
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
				err := st.Take(ctx, []store.Check{{Key: "sn:" + string(rune('a'+g)) + string(rune('a'+i%26)), Limit: algo.PerSecond(1_000_000), Cost: 1}}, &res)
				cancel()
				calls.Add(1)
				if err != nil {
					mu.Lock()
					errs = append(errs, time.Now())
					mu.Unlock()
					time.Sleep(10 * time.Millisecond)
				}
			}
		})
	}
	defer func() { close(stop); wg.Wait() }()
	errorsSince := func(t0 time.Time) (n int, last time.Time) {
		mu.Lock()
		defer mu.Unlock()
		for _, at := range errs {
			if !at.Before(t0) {
				n, last = n+1, at
			}
		}
		return n, last
	}
	waitMaster := func(port int) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if p, err := ss.MasterPort(); err == nil && p == port {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the sentinels did not promote the server on port %d", port)
			}
		}
	}
	time.Sleep(500 * time.Millisecond)
	if n, _ := errorsSince(time.Time{}); n > 0 || calls.Load() == 0 {
		t.Fatalf("before any failover: %d errors in %d calls", n, calls.Load())
	}

	// A planned failover: no caller sees an error.
	t0 := time.Now()
	if _, err := redistest.Do(ss.Sentinels[0].Addr, "SENTINEL", "FAILOVER", redistest.MasterName); err != nil {
		t.Fatal(err)
	}
	waitMaster(ss.Replica.Port)
	time.Sleep(2 * time.Second)
	if n, _ := errorsSince(t0); n > 0 {
		t.Errorf("SENTINEL FAILOVER under load: %d calls failed, want none", n)
	}

	// A crash: errors until the old master (now the replica) is promoted.
	before := calls.Load()
	t1 := time.Now()
	ss.Replica.Kill() // the master now
	waitMaster(ss.Master.Port)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, last := errorsSince(t1); !last.IsZero() && time.Since(last) > 2*time.Second {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("calls still fail 20 s after the master was killed")
		}
	}
	n, last := errorsSince(t1)
	t.Logf("master killed: %d calls failed over %v (down-after 2 s), then none in 2 s; %d calls in all", n, last.Sub(t1).Round(time.Millisecond), calls.Load()-before)
	if last.Sub(t1) > 10*time.Second {
		t.Errorf("calls failed for %v after the master was killed, want under 10 s with down-after 2 s", last.Sub(t1))
	}
}

// TestSentinelPassword: sentinels that ask for a password are reached with
// sentinel_password (or sentinel_password_file); without it, New says
// NOAUTH instead of starting and failing every call.
func TestSentinelPassword(t *testing.T) {
	t.Parallel()
	redistest.Need(t)
	ss, err := redistest.StartSentinelsWith(2*time.Second, "sentinel-secret")
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	base := "redis-sentinel://" + strings.Join(ss.Addrs(), ",") + "/" + redistest.MasterName
	if _, err := New(Config{URL: base}); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Fatalf("without the sentinel password: %v, want NOAUTH", err)
	}
	pf := filepath.Join(t.TempDir(), "pass")
	os.WriteFile(pf, []byte("sentinel-secret\n"), 0o600)
	for _, u := range []string{base + "?sentinel_password=sentinel-secret", base + "?sentinel_password_file=" + pf} {
		st, err := New(Config{URL: u})
		if err != nil {
			t.Fatalf("%s: %v", RedactURL(u), err)
		}
		var res store.Result
		if err := st.Take(context.Background(), []store.Check{{Key: "pw", Limit: algo.PerSecond(10), Cost: 1}}, &res); err != nil || !res.Allowed {
			t.Fatalf("%s: %v %+v", RedactURL(u), err, res)
		}
		st.Close()
	}
}
