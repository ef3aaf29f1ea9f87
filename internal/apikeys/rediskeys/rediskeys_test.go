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

	"github.com/fairgate/fairgate/internal/apikeys"
	"github.com/fairgate/fairgate/internal/apikeys/backendtest"
	"github.com/fairgate/fairgate/internal/apikeys/rediskeys"
	"github.com/fairgate/fairgate/internal/redistest"
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
