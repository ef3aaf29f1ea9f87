package quota

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/internal/redistest"
	"github.com/fairgate/fairgate/internal/testenv"
	"github.com/fairgate/fairgate/store/memstore"
	"github.com/fairgate/fairgate/store/redisstore"
)

// roomy is a provider whose budget holds back nothing but pauses.
var roomy = Provider{Limit: algo.Limit{Limit: 1000, Period: time.Second, Burst: 100}}

// pairs returns, per backend, two Quotas sharing one store's state: two
// fairgate instances (on Redis, each with its own client; under -short,
// memory alone).
func pairs(t *testing.T, c Config) map[string][2]*Quotas {
	t.Helper()
	mk := func(c Config) *Quotas {
		q, err := New(c)
		if err != nil {
			t.Fatal(err)
		}
		return q
	}
	mem := memstore.New(memstore.Config{})
	out := map[string][2]*Quotas{}
	c.Store = mem
	out["memory"] = [2]*Quotas{mk(c), mk(c)}
	if testenv.Short() {
		return out // the fast tier starts no Redis
	}
	prefix := fmt.Sprintf("obp%d:", rand.Uint32())
	var qs [2]*Quotas
	for i := range qs {
		st, err := redisstore.New(redisstore.Config{URL: "redis://" + redistest.Shared(t).Addr, Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		c.Store = st
		qs[i] = mk(c)
	}
	out["redis"] = qs
	return out
}

// perTenantProvider is a provider that limits per end user: it answers
// the tenant "noisy" 429 with Retry-After: 60 and everyone else 200. The
// tenant of a request is its X-Tenant header.
func perTenantProvider(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Tenant") == "noisy" {
			w.Header().Set("Retry-After", "60")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.Write([]byte("ok"))
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestOneTenantsRetryAfterPausesOnlyIt: a provider's 429 with Retry-After
// on one tenant's calls stops that tenant's calls, on every instance
// sharing the store, and no other tenant's, however often it comes.
func TestOneTenantsRetryAfterPausesOnlyIt(t *testing.T) {
	t.Parallel()
	url := perTenantProvider(t)
	for name, qs := range pairs(t, Config{Providers: map[string]Provider{"sms": roomy}, MaxWait: time.Millisecond}) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			client := &http.Client{Transport: &Transport{Quotas: qs[0], Provider: "sms", Tenant: func(r *http.Request) string { return r.Header.Get("X-Tenant") }}}
			send := func(tenant string) (*http.Response, error) {
				req, _ := http.NewRequest("GET", url, nil)
				req.Header.Set("X-Tenant", tenant)
				resp, err := client.Do(req)
				if err == nil {
					resp.Body.Close()
				}
				return resp, err
			}
			// acme and globex call too: two tenants active, one of them
			// asked to wait, is no quorum.
			for _, tenant := range []string{"acme", "globex"} {
				if resp, err := send(tenant); err != nil || resp.StatusCode != 200 {
					t.Fatalf("%s before: %v %v", tenant, resp, err)
				}
			}
			resp, err := send("noisy")
			if err != nil || resp.StatusCode != 429 {
				t.Fatalf("noisy's call: %v %v, want the provider's 429 as it came", resp, err)
			}
			// noisy tries again and again: refused before reaching the
			// provider, on both instances, for about the minute asked.
			for range 5 {
				_, err := send("noisy")
				var de *DeadlineError
				if !errors.As(err, &de) || de.RetryAfter < 59*time.Second || de.RetryAfter > 60*time.Second {
					t.Fatalf("noisy's next call: %v, want a DeadlineError with about 60s to wait", err)
				}
			}
			for i, q := range qs {
				_, err := q.AcquireWithin(ctx, "sms", "noisy", 0)
				var de *DeadlineError
				if !errors.As(err, &de) || de.RetryAfter < 59*time.Second {
					t.Fatalf("instance %d: noisy: %v, want a DeadlineError with about 60s to wait", i, err)
				}
				// Every other tenant, active or new, acquires at once.
				for _, tenant := range []string{"acme", "globex", "initech"} {
					if _, err := q.AcquireWithin(ctx, "sms", tenant, 0); err != nil {
						t.Fatalf("instance %d: %s after noisy's 429s: %v, want admitted at once", i, tenant, err)
					}
				}
			}
			if resp, err := send("acme"); err != nil || resp.StatusCode != 200 {
				t.Fatalf("acme through the transport after noisy's 429s: %v %v", resp, err)
			}
		})
	}
}
