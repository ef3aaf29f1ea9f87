package quota

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairgate/fairgate/internal/redistest"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/store/memstore"
	"github.com/fairgate/fairgate/store/redisstore"
)

// providerPaused reports whether q refuses a tenant that never called
// provider (so has neither a pause nor a spent share) for the provider's
// budget, and for how long.
func providerPaused(t *testing.T, q *Quotas, provider string) (bool, time.Duration) {
	t.Helper()
	_, err := q.AcquireWithin(context.Background(), provider, fmt.Sprintf("newcomer-%d", time.Now().UnixNano()), 0)
	var de *DeadlineError
	switch {
	case err == nil:
		return false, 0
	case errors.As(err, &de) && !de.Paused && !de.Share:
		return true, de.RetryAfter
	}
	t.Fatalf("a new tenant's acquire: %v, want admitted or refused for the budget", err)
	return false, 0
}

func TestQuorumPausesProvider(t *testing.T) {
	t.Parallel()
	type vote struct {
		tenant   string
		d        time.Duration
		instance int
	}
	cases := []struct {
		name   string
		active int // tenants t0… that called through instance 0
		votes  []vote
		// want is the provider's pause: 0 for none.
		want time.Duration
	}{
		{"one of one", 1, []vote{{"t0", 30 * time.Second, 0}}, 0},
		{"one of two", 2, []vote{{"t0", 30 * time.Second, 0}}, 0},
		{"the same tenant twice is one vote", 2, []vote{{"t0", 30 * time.Second, 0}, {"t0", 30 * time.Second, 0}}, 0},
		{"two of two", 2, []vote{{"t0", 30 * time.Second, 0}, {"t1", 20 * time.Second, 0}}, 20 * time.Second},
		{"two of four", 4, []vote{{"t0", 30 * time.Second, 0}, {"t1", 20 * time.Second, 0}}, 20 * time.Second},
		{"two of six is under half", 6, []vote{{"t0", 30 * time.Second, 0}, {"t1", 20 * time.Second, 0}}, 0},
		{"three of six", 6, []vote{{"t0", 30 * time.Second, 0}, {"t1", 20 * time.Second, 0}, {"t2", 10 * time.Second, 0}}, 10 * time.Second},
		// The pause is the latest a quorum asked for: one tenant's hour
		// does not lengthen it.
		{"one tenant cannot lengthen it", 4, []vote{{"t0", time.Hour, 0}, {"t1", 10 * time.Second, 0}}, 10 * time.Second},
		{"a tenant that never called counts as calling", 1, []vote{{"t0", 30 * time.Second, 0}, {"stranger", 30 * time.Second, 0}}, 30 * time.Second},
		// Each instance keeps its own tally (the pauses are in the store).
		{"votes through two instances", 0, []vote{{"t0", 30 * time.Second, 0}, {"t1", 30 * time.Second, 1}}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			for name, qs := range pairs(t, Config{Providers: map[string]Provider{"sms": sms}}) {
				ctx := context.Background()
				for i := range c.active {
					if _, err := qs[0].AcquireWithin(ctx, "sms", fmt.Sprintf("t%d", i), 0); err != nil {
						t.Fatal(err)
					}
				}
				got := false
				for _, v := range c.votes {
					p, err := qs[v.instance].PauseTenant(ctx, "sms", v.tenant, v.d)
					if err != nil {
						t.Fatalf("%s: PauseTenant(%s, %v): %v", name, v.tenant, v.d, err)
					}
					got = got || p
				}
				paused, left := providerPaused(t, qs[1], "sms")
				if got != (c.want > 0) || paused != (c.want > 0) {
					t.Fatalf("%s: PauseTenant said the provider paused: %v; a new tenant refused: %v; want %v", name, got, paused, c.want > 0)
				}
				if paused && (left > c.want || left < c.want-2*time.Second) {
					t.Fatalf("%s: provider paused for %v, want %v", name, left, c.want)
				}
				// The tenants asked to wait are paused in any case.
				for _, v := range c.votes {
					_, err := qs[1].AcquireWithin(ctx, "sms", v.tenant, 0)
					var de *DeadlineError
					if !errors.As(err, &de) || !de.Paused || de.RetryAfter < v.d-2*time.Second {
						t.Fatalf("%s: %s after its pause of %v: %v", name, v.tenant, v.d, err)
					}
				}
			}
		})
	}
}

// outOfBudget is a provider that answers every call 429 with Retry-After:
// 30 while out is true, and 200 otherwise; it counts the calls.
func outOfBudget(t *testing.T, out *atomic.Bool) (string, *atomic.Int64) {
	calls := new(atomic.Int64)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if out.Load() {
			w.Header().Set("Retry-After", "30")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL, calls
}

// TestTransportQuorum: a provider whose account-wide budget is out
// answers every tenant 429; the second tenant's answer, of four calling,
// pauses the provider for all of them.
func TestTransportQuorum(t *testing.T) {
	t.Parallel()
	var out atomic.Bool
	url, calls := outOfBudget(t, &out)
	for name, qs := range pairs(t, Config{Providers: map[string]Provider{"sms": roomy}, MaxWait: time.Millisecond}) {
		t.Run(name, func(t *testing.T) {
			calls.Store(0)
			out.Store(false)
			client := &http.Client{Transport: &Transport{Quotas: qs[0], Provider: "sms"}}
			send := func(tenant string) (*http.Response, error) {
				req, _ := http.NewRequestWithContext(WithTenant(context.Background(), tenant), "GET", url, nil)
				resp, err := client.Do(req)
				if err == nil {
					resp.Body.Close()
				}
				return resp, err
			}
			for _, tenant := range []string{"a", "b", "c", "d"} {
				if resp, err := send(tenant); err != nil || resp.StatusCode != 200 {
					t.Fatalf("%s: %v %v", tenant, resp, err)
				}
			}
			out.Store(true)
			if resp, err := send("a"); err != nil || resp.StatusCode != 429 {
				t.Fatalf("a: %v %v, want the 429", resp, err)
			}
			if paused, _ := providerPaused(t, qs[1], "sms"); paused {
				t.Fatal("the provider paused on one tenant's 429")
			}
			if resp, err := send("b"); err != nil || resp.StatusCode != 429 {
				t.Fatalf("b: %v %v, want the 429", resp, err)
			}
			if paused, left := providerPaused(t, qs[1], "sms"); !paused || left < 28*time.Second {
				t.Fatalf("after two of four tenants' 429s: provider paused %v for %v, want about 30s", paused, left)
			}
			_, err := send("c")
			var de *DeadlineError
			if !errors.As(err, &de) || de.Paused {
				t.Fatalf("c during the provider's pause: %v, want a budget DeadlineError", err)
			}
			if n := calls.Load(); n != 6 {
				t.Fatalf("the provider saw %d calls, want 6 (none after the pause)", n)
			}
		})
	}
}

// TestOperatorCallPausesProvider: the provider's Retry-After to the
// operator's own call (ForOperator, no tenant) pauses the provider; a call
// with no tenant outside ForOperator is refused before it is sent.
func TestOperatorCallPausesProvider(t *testing.T) {
	t.Parallel()
	var out atomic.Bool
	out.Store(true)
	url, calls := outOfBudget(t, &out)
	for name, qs := range pairs(t, Config{Providers: map[string]Provider{"sms": sms}, MaxWait: time.Millisecond}) {
		t.Run(name, func(t *testing.T) {
			calls.Store(0)
			client := &http.Client{Transport: &Transport{Quotas: qs[0], Provider: "sms"}}
			req, _ := http.NewRequest("GET", url, nil)
			if _, err := client.Do(req); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "ForOperator") {
				t.Fatalf("a call with no tenant: %v, want ErrInvalid naming ForOperator", err)
			}
			if calls.Load() != 0 {
				t.Fatal("a call with no tenant reached the provider")
			}
			if paused, _ := providerPaused(t, qs[1], "sms"); paused {
				t.Fatal("paused before the operator's call")
			}
			req, _ = http.NewRequestWithContext(ForOperator(context.Background()), "GET", url, nil)
			resp, err := client.Do(req)
			if err != nil || resp.StatusCode != 429 {
				t.Fatalf("the operator's call: %v %v", resp, err)
			}
			resp.Body.Close()
			if paused, left := providerPaused(t, qs[1], "sms"); !paused || left < 28*time.Second {
				t.Fatalf("after the operator's call: provider paused %v for %v, want about 30s", paused, left)
			}
		})
	}
	// The operator's own calls draw on the budget alone: past a tenant's
	// share (burst 5), up to the budget's burst (20).
	for name, qs := range pairs(t, Config{Providers: map[string]Provider{"sms": sms}}) {
		for i := range sms.Limit.Burst {
			if _, err := qs[0].AcquireWithin(ForOperator(context.Background()), "sms", "", 0); err != nil {
				t.Fatalf("%s: the operator's call %d: %v", name, i, err)
			}
		}
	}
}

// TestTenantPauseBounds: a tenant's pause is one store key that lives as
// long as the pause, at most MaxPause; an admitted call's write of it
// lives a millisecond.
func TestTenantPauseBounds(t *testing.T) {
	t.Parallel()
	prefix := fmt.Sprintf("obb%d:", time.Now().UnixNano())
	st, err := redisstore.New(redisstore.Config{URL: "redis://" + redistest.Shared(t).Addr, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	q, err := New(Config{Store: st, Providers: map[string]Provider{"sms": roomy}, MaxPause: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	pttl := func(tenant string) time.Duration {
		t.Helper()
		v, err := redistest.Do(redistest.Shared(t).Addr, "PTTL", st.Key(pauseLimit.Algorithm, pauseKey("sms", policy.TenantTag(tenant))))
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatal(err)
		}
		return time.Duration(n) * time.Millisecond
	}
	ctx := context.Background()
	if _, err := q.PauseTenant(ctx, "sms", "acme", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if got := pttl("acme"); got > 2*time.Second+time.Millisecond || got < 1500*time.Millisecond {
		t.Errorf("acme's pause key lives %v, want the pause's 2s", got)
	}
	if _, err := q.PauseTenant(ctx, "sms", "globex", 11*time.Second); !errors.Is(err, ErrInvalid) {
		t.Errorf("a pause over MaxPause: %v, want ErrInvalid", err)
	}
	if got := pttl("globex"); got != -2*time.Millisecond {
		t.Errorf("globex's refused pause left a key living %v", got)
	}
	// An admitted call writes the key for a microsecond's worth.
	if _, err := q.AcquireWithin(ctx, "sms", "initech", 0); err != nil {
		t.Fatal(err)
	}
	if got := pttl("initech"); got > time.Millisecond {
		t.Errorf("an admitted call's pause key lives %v, want at most 1ms", got)
	}
	// A provider's far-off Retry-After pauses the tenant for MaxPause.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "86400")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	t.Cleanup(srv.Close)
	client := &http.Client{Transport: &Transport{Quotas: q, Provider: "sms"}}
	req, _ := http.NewRequestWithContext(WithTenant(ctx, "umbrella"), "GET", srv.URL, nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := pttl("umbrella"); got > 10*time.Second+time.Millisecond || got < 9*time.Second {
		t.Errorf("a day's Retry-After paused the tenant's key for %v, want MaxPause (10s)", got)
	}
}

// TestTally: the quorum's rules, on the process's clock passed in.
func TestTally(t *testing.T) {
	t.Parallel()
	const w = time.Minute
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	type step struct {
		at     time.Duration
		tag    string
		pause  time.Duration // 0: a call
		quorum bool
		until  time.Duration
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"a vote older than the window is gone", []step{
			{0, "a", time.Hour, false, 0},
			{w + time.Second, "b", time.Hour, false, 0},
		}},
		{"a vote within the window counts", []step{
			{0, "a", time.Hour, false, 0},
			{w, "b", 10 * time.Second, true, w + 10*time.Second},
		}},
		{"a call older than the window is not active", []step{
			{0, "c", 0, false, 0},
			{0, "d", 0, false, 0},
			{0, "e", 0, false, 0},
			{w + time.Second, "a", time.Minute, false, 0},
			{w + 2*time.Second, "b", time.Minute, true, w + time.Second + time.Minute},
		}},
		{"the quiet half still counts", []step{
			{0, "c", 0, false, 0},
			{0, "d", 0, false, 0},
			{0, "e", 0, false, 0},
			{time.Second, "a", time.Minute, false, 0},
			{2 * time.Second, "b", time.Minute, false, 0},
			// Of five active, three make the quorum: the pause is the
			// third latest end, c's.
			{3 * time.Second, "c", 30 * time.Second, true, 33 * time.Second},
		}},
	}
	for _, c := range cases {
		ty := newTally()
		for i, s := range c.steps {
			now := t0.Add(s.at)
			if s.pause == 0 {
				ty.call(s.tag, now, w)
				continue
			}
			until, ok := ty.pause(s.tag, now, now.Add(s.pause), w, 2)
			if ok != s.quorum || ok && !until.Equal(t0.Add(s.until)) {
				t.Errorf("%s: step %d: pause(%s at +%v for %v) = %v, %v; want %v, +%v", c.name, i, s.tag, s.at, s.pause, until.Sub(t0), ok, s.quorum, s.until)
			}
		}
	}
}

// TestTallyBounded: a flood of tenants keeps a tally at maxTallied, keeps
// the votes within the window, and is forgotten once the window passes.
func TestTallyBounded(t *testing.T) {
	t.Parallel()
	const w = time.Minute
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ty := newTally()
	ty.pause("t:a", t0, t0.Add(time.Hour), w, 2)
	ty.pause("t:b", t0, t0.Add(time.Hour), w, 2)
	for i := range 2 * maxTallied {
		ty.call(fmt.Sprintf("t:flood-%d", i), t0.Add(time.Second), w)
	}
	if n := ty.size(); n > maxTallied {
		t.Fatalf("after %d tenants the tally holds %d, over %d", 2*maxTallied+2, n, maxTallied)
	}
	for _, tag := range []string{"t:a", "t:b"} {
		if e := ty.m[tag]; e == nil || !e.votes(t0.Add(time.Second), w) {
			t.Errorf("%s's vote was evicted by the flood", tag)
		}
	}
	// Past the window the old tenants go first.
	for i := range maxTallied {
		ty.call(fmt.Sprintf("t:late-%d", i), t0.Add(2*w), w)
	}
	if n := ty.size(); n > maxTallied {
		t.Fatalf("the tally holds %d, over %d", n, maxTallied)
	}
	for tag, e := range ty.m {
		if !e.called.Equal(t0.Add(2 * w)) {
			t.Fatalf("%s, last seen %v, outlived a window's newer tenants", tag, e.called)
		}
	}
	// A reload keeps a provider's tally and drops a removed one's.
	q, err := New(Config{Store: memstore.New(memstore.Config{}), Providers: map[string]Provider{"sms": sms, "mail": roomy}})
	if err != nil {
		t.Fatal(err)
	}
	before := (*q.provs.Load())["sms"].tally
	if err := q.SetProviders(map[string]Provider{"sms": roomy}); err != nil {
		t.Fatal(err)
	}
	if p := *q.provs.Load(); p["sms"].tally != before || len(p) != 1 {
		t.Errorf("after a reload: %v, want sms's tally kept and mail's dropped", p)
	}
}
