package rediskeys_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/internal/apikeys"
	"github.com/fairgate/fairgate/internal/apikeys/backendtest"
	"github.com/fairgate/fairgate/internal/apikeys/rediskeys"
	"github.com/fairgate/fairgate/internal/redistest"
	"github.com/fairgate/fairgate/internal/testwait"
	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/limiter/redisctl"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/store/redisstore"
)

var prefixes atomic.Int64

func TestMain(m *testing.M) {
	os.Exit(redistest.MainWithCluster(m))
}

// clients returns two clients (two instances) of Redis at addrs, on a
// prefix no other test uses.
func clients(t *testing.T, addrs ...string) (apikeys.Backend, apikeys.Backend) {
	t.Helper()
	prefix := fmt.Sprintf("t%d:", prefixes.Add(1))
	var out [2]apikeys.Backend
	for i := range out {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		out[i] = rediskeys.New(c, prefix)
	}
	return out[0], out[1]
}

func TestStandalone(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) (apikeys.Backend, apikeys.Backend) { return clients(t, redistest.Shared(t).Addr) })
}

func TestCluster(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) (apikeys.Backend, apikeys.Backend) {
		return clients(t, redistest.SharedCluster(t).Addrs()...)
	})
}

// TestHundredThousandKeys: 100,000 keys on Redis; an instance that falls
// behind the change log reloads them all, and a key revoked on one
// instance is refused on another within 2 s.
func TestHundredThousandKeys(t *testing.T) {
	b1, b2 := clients(t, redistest.Shared(t).Addr)
	ctx := context.Background()
	s1, _ := apikeys.New(apikeys.Config{Backend: b1})
	s2, _ := apikeys.New(apikeys.Config{Backend: b2, Poll: 200 * time.Millisecond})
	if err := s2.Sync(ctx); err != nil { // at version 0, before the keys
		t.Fatal(err)
	}
	const n = 100_000
	start := time.Now()
	var wg sync.WaitGroup
	var failed atomic.Int64
	for w := range 64 {
		wg.Go(func() {
			for i := w; i < n; i += 64 {
				_, r := apikeys.Generate()
				r.Tenant, r.Created = fmt.Sprintf("tenant-%d", i%5000), time.Now()
				if ok, err := b1.Write(ctx, apikeys.Create, r); !ok || err != nil {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.Fatalf("%d of %d creates failed", failed.Load(), n)
	}
	t.Logf("100,000 creates in %v", time.Since(start).Round(time.Millisecond))
	key, r, err := s1.Create(ctx, apikeys.Record{Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if err := s2.Sync(ctx); err != nil { // 100,001 changes behind: a full reload
		t.Fatal(err)
	}
	t.Logf("an instance %d changes behind reloaded in %v", n+1, time.Since(start).Round(time.Millisecond))
	if s2.Len() != n+1 {
		t.Fatalf("instance 2 holds %d keys, want %d", s2.Len(), n+1)
	}
	if _, err := s2.Lookup(apikeys.Sum(key)); err != nil {
		t.Fatalf("instance 2: %v", err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { s2.Run(runCtx); close(done) }()
	defer func() { cancel(); <-done }()
	start = time.Now()
	if err := s1.Revoke(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := s2.Lookup(apikeys.Sum(key)); err == apikeys.ErrUnknown {
			break
		}
		if time.Since(start) > 2*time.Second {
			t.Fatal("a key revoked on instance 1 is still accepted by instance 2 after 2 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("revocation reached instance 2 after %v", time.Since(start).Round(time.Millisecond))
}

// follower is one instance as the daemon wires it: a redisstore client of
// its own, its stored API keys (Set) and limiter (with the run-time
// overlay in package redisctl) on it, each run by its own loop.
type follower struct {
	keys *apikeys.Set
	lim  *limiter.Limiter
}

func newFollower(t *testing.T, url, prefix string) follower {
	t.Helper()
	st, err := redisstore.New(redisstore.Config{URL: url, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if !st.Tracking() {
		t.Fatal("the store's client has no client tracking: Redis 6.2 or later has it")
	}
	keys, err := apikeys.New(apikeys.Config{Backend: rediskeys.New(st.Client(), prefix)})
	if err != nil {
		t.Fatal(err)
	}
	pol := policy.Policy{
		DefaultPlan: "free", DefaultClass: "read",
		Plans:   map[string]policy.Plan{"free": {Rules: []policy.Rule{{Limit: algo.Limit{Limit: 120, Period: time.Minute, Burst: 30}}}}},
		Classes: map[string]policy.Class{"read": {Share: 1}},
	}
	lim, err := limiter.New(limiter.Config{Store: st, Policy: pol, Control: redisctl.New(st.Client(), prefix)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { keys.Run(ctx) })
	wg.Go(func() { lim.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	return follower{keys, lim}
}

// burst is the burst B's policy in force gives tenant (from memory: no
// command to Redis).
func (f follower) burst(tenant string) int64 {
	res, err := f.lim.Snapshot().Resolve(policy.Request{Tenant: tenant, Class: "read"}, time.Now())
	if err != nil {
		return -1
	}
	return res.Layers[0].Limit.Capacity()
}

// TestIdleFollowerSeesChanges: an instance that sends Redis nothing but
// its polls (which read versions through the client's cache) sees a key
// made, a key revoked and an override written by another instance within
// 2 s (the documented bound; the cached versions are read again only
// after 30 s): at first, when the change is written while the follower's
// connections are down (killed; Redis cannot send it the invalidation,
// and its cache must go with the connection), once it has reconnected on
// its own (its new connections must read Redis's invalidations though it
// waits for no reply), and after a Redis restart (its data on disk). The
// follower is looked at in memory only, so that nothing but its own loops
// makes it read from Redis.
func TestIdleFollowerSeesChanges(t *testing.T) {
	redistest.Need(t)
	srv, err := redistest.Start("--appendonly", "yes", "--appendfsync", "always")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	url, prefix := "redis://"+srv.Addr, fmt.Sprintf("t%d:", prefixes.Add(1))
	a, b := newFollower(t, url, prefix), newFollower(t, url, prefix)
	ctx := context.Background()
	killAll := func() {
		if _, err := redistest.Do(srv.Addr, "CLIENT", "KILL", "TYPE", "normal"); err != nil {
			t.Fatal(err)
		}
	}
	const bound = 2 * time.Second
	step := 0
	check := func(when string) {
		t.Helper()
		step++
		var key string
		var r apikeys.Record
		testwait.Eventually(t, 10*time.Second, when+": a key made on A", func() bool {
			var err error
			key, r, err = a.keys.Create(ctx, apikeys.Record{Tenant: "acme"})
			return err == nil
		})
		took := testwait.Took(t, bound, when+": the key made on A accepted by B", func() bool {
			_, err := b.keys.Lookup(apikeys.Sum(key))
			return err == nil
		})
		t.Logf("%s: the key made on A was accepted by B after %v", when, took.Round(time.Millisecond))
		burst := int64(40 + step)
		testwait.Eventually(t, 10*time.Second, when+": an override written on A", func() bool {
			return a.lim.PutOverride(ctx, "acme", policy.Tenant{Burst: burst}) == nil
		})
		took = testwait.Took(t, bound, when+": the override in force on B", func() bool { return b.burst("acme") == burst })
		t.Logf("%s: the override written on A was in force on B after %v", when, took.Round(time.Millisecond))
		if err := a.keys.Revoke(ctx, r.ID); err != nil {
			t.Fatal(err)
		}
		took = testwait.Took(t, bound, when+": the key revoked on A refused by B", func() bool {
			_, err := b.keys.Lookup(apikeys.Sum(key))
			return err == apikeys.ErrUnknown
		})
		t.Logf("%s: the key revoked on A was refused by B after %v", when, took.Round(time.Millisecond))
	}
	check("at first")
	killAll()
	check("written as B's connections were killed")
	killAll()
	time.Sleep(2 * time.Second) // B reconnects on its own polls
	check("after B reconnected")
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	check("after a Redis restart")
}
