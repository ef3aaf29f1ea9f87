package quota

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/internal/redistest"
	"github.com/fairgate/fairgate/store"
	"github.com/fairgate/fairgate/store/memstore"
	"github.com/fairgate/fairgate/store/redisstore"
)

func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }

// sms is the example config's provider: 100/s account-wide with a burst of
// 20, and 20/s per tenant with a burst of 5.
var sms = Provider{
	Limit:  algo.Limit{Limit: 100, Period: time.Second, Burst: 20},
	Tenant: algo.Limit{Limit: 20, Period: time.Second, Burst: 5},
}

// admission is one admitted call as the store saw it.
type admission struct {
	at     time.Time // the store's clock when it decided
	tenant string    // the share key's tenant part
}

// recorder is a store that records the admissions it decides.
type recorder struct {
	*redisstore.Store
	mu  sync.Mutex
	got []admission
}

func (r *recorder) Take(ctx context.Context, checks []store.Check, res *store.Result) error {
	err := r.Store.Take(ctx, checks, res)
	if err == nil && res.Allowed {
		r.mu.Lock()
		r.got = append(r.got, admission{res.Now, checks[0].Key[strings.LastIndexByte(checks[0].Key, ':')+1:]})
		r.mu.Unlock()
	}
	return err
}

// instances returns n Quotas on the test Redis, each with its own client,
// sharing one key prefix: n fairgate instances on one Redis.
func instances(t *testing.T, n int, p Provider, maxWait time.Duration) ([]*Quotas, []*recorder) {
	t.Helper()
	prefix := fmt.Sprintf("ob%d:", rand.Uint32())
	var qs []*Quotas
	var rs []*recorder
	for range n {
		st, err := redisstore.New(redisstore.Config{URL: "redis://" + redistest.Shared(t).Addr, Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		r := &recorder{Store: st}
		q, err := New(Config{Store: r, Providers: map[string]Provider{"sms": p}, MaxWait: maxWait})
		if err != nil {
			t.Fatal(err)
		}
		qs, rs = append(qs, q), append(rs, r)
	}
	return qs, rs
}

// merged returns every recorder's admissions in time order.
func merged(rs []*recorder) []admission {
	var all []admission
	for _, r := range rs {
		r.mu.Lock()
		all = append(all, r.got...)
		r.mu.Unlock()
	}
	slices.SortFunc(all, func(a, b admission) int { return a.at.Compare(b.at) })
	return all
}

// checkBound fails t if some interval of the admissions holds more than
// the limit's GCRA bound: burst + (length / emission interval).
func checkBound(t *testing.T, all []admission, l algo.Limit) {
	t.Helper()
	em := l.Period / time.Duration(l.Limit)
	for j := range all {
		for i := 0; i < j; i++ {
			span := all[j].at.Sub(all[i].at)
			if n, bound := int64(j-i+1), l.Burst+int64(span/em); n > bound {
				t.Fatalf("%d admissions in %v (from %v): over the bound of %d", n, span, all[i].at, bound)
			}
		}
	}
}

func TestBudgetNeverExceeded(t *testing.T) {
	t.Parallel()
	qs, rs := instances(t, 2, sms, 2*time.Second)
	const run = 3 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), run)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	// Twelve tenants × 3 workers, on both instances: demand far over 100/s.
	for tn := range 12 {
		for w := range 3 {
			q := qs[(tn+w)%2]
			wg.Go(func() {
				for ctx.Err() == nil {
					err := q.Acquire(ctx, "sms", fmt.Sprintf("tenant-%d", tn))
					var de *DeadlineError
					if err != nil && !errors.As(err, &de) && !errors.Is(err, context.DeadlineExceeded) {
						mu.Lock()
						errs = append(errs, err)
						mu.Unlock()
						return
					}
				}
			})
		}
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("acquire errors: %v", errs)
	}
	all := merged(rs)
	checkBound(t, all, sms.Limit)
	byTenant := map[string][]admission{}
	for _, a := range all {
		byTenant[a.tenant] = append(byTenant[a.tenant], a)
	}
	for tn, got := range byTenant {
		checkBound(t, got, sms.Tenant)
		_ = tn
	}
	// The run must have pressed on the budget for the bound to mean much.
	if min := int(0.9 * 100 * run.Seconds()); len(all) < min {
		t.Errorf("%d admissions in %v, want at least %d: the budget was not used", len(all), run, min)
	}
	t.Logf("%d admissions in %v over %d tenants", len(all), run, len(byTenant))
}

func TestFairShares(t *testing.T) {
	t.Parallel()
	qs, rs := instances(t, 2, sms, 2*time.Second)
	const warm, run = time.Second, 4 * time.Second
	start := time.Now()
	ctx, cancel := context.WithDeadline(context.Background(), start.Add(run))
	defer cancel()
	var wg sync.WaitGroup
	// Nine tenants ask at 9/s each, each from one instance; the tenant
	// "flood" asks as fast as 8 workers on both instances can.
	const quietRate = 9
	for tn := range 9 {
		q := qs[tn%2]
		wg.Go(func() {
			tenant := fmt.Sprintf("quiet-%d", tn)
			for k := 0; ; k++ {
				next := start.Add(time.Duration(k) * time.Second / quietRate)
				if !next.Before(start.Add(run)) {
					return
				}
				time.Sleep(time.Until(next))
				if err := q.Acquire(ctx, "sms", tenant); err != nil && ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("%s: %v", tenant, err)
				}
			}
		})
	}
	for w := range 8 {
		q := qs[w%2]
		wg.Go(func() {
			for ctx.Err() == nil {
				q.Acquire(ctx, "sms", "flood")
			}
		})
	}
	wg.Wait()
	counts := map[string]int{}
	from, to := start.Add(warm), start.Add(run)
	for _, a := range merged(rs) {
		if !a.at.Before(from) && a.at.Before(to) {
			counts[a.tenant]++
		}
	}
	secs := (run - warm).Seconds()
	for tn := range 9 {
		tenant := fmt.Sprintf("quiet-%d", tn)
		// Within 20% below: the quiet senders pace themselves by sleeping,
		// and a loaded machine wakes them late (the flood, held to its
		// share, takes no more than the rest either way).
		if got, want := float64(counts[tenant]), quietRate*secs; got < 0.8*want || got > 1.1*want {
			t.Errorf("%s: %v admitted in %v s, want %v (-20%%, +10%%)", tenant, got, secs, want)
		}
	}
	// The budget left over is 100 - 9×9 = 19/s, under the flooder's share
	// of 20/s: the flooder gets that rest, and no more than its share.
	rest := (100 - 9*quietRate) * secs
	if got := float64(counts["flood"]); got < 0.8*rest || got > 20*secs+float64(sms.Tenant.Burst) {
		t.Errorf("flood: %v admitted in %v s, want about the rest of the budget, %v", got, secs, rest)
	}
	t.Logf("admitted in %v s: %v", secs, counts)
}

func TestPauseAcrossInstances(t *testing.T) {
	t.Parallel()
	qs, rs := instances(t, 2, sms, 3*time.Second)
	ctx := context.Background()
	for range 3 {
		if err := qs[0].Acquire(ctx, "sms", "a"); err != nil {
			t.Fatal(err)
		}
	}
	const d = 500 * time.Millisecond
	before := redisTime(t, rs[0])
	if err := qs[0].Pause(ctx, "sms", d); err != nil {
		t.Fatal(err)
	}
	after := redisTime(t, rs[0])
	// A shorter pause from the other instance does not shorten it.
	if err := qs[1].Pause(ctx, "sms", 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	for i, q := range qs {
		_, err := q.AcquireWithin(ctx, "sms", "b", 0)
		var de *DeadlineError
		if !errors.As(err, &de) || de.Share || de.RetryAfter > d || de.RetryAfter < d-200*time.Millisecond {
			t.Fatalf("instance %d during the pause: %v, want a budget DeadlineError with retry-after just under %v", i, err, d)
		}
	}
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Go(func() {
			if err := qs[w%2].Acquire(ctx, "sms", fmt.Sprintf("w%d", w)); err != nil {
				t.Errorf("worker %d: %v", w, err)
			}
		})
	}
	wg.Wait()
	var got []admission
	for _, a := range merged(rs) {
		if !a.at.Before(before) {
			got = append(got, a)
		}
	}
	if len(got) != 6 {
		t.Fatalf("%d admissions after the pause began, want the 6 workers'", len(got))
	}
	if end := before.Add(d); got[0].at.Before(end) {
		t.Fatalf("admitted at %v, before the pause ended (no earlier than %v)", got[0].at, end)
	}
	// Waiters sleep the retry-after plus at most a quarter more.
	if late := after.Add(d + d/4 + 100*time.Millisecond); got[0].at.After(late) {
		t.Errorf("first admission at %v, want soon after the pause ended (by %v)", got[0].at, late)
	}
}

// redisTime reads the Redis clock, by a peek on a key of its own.
func redisTime(t *testing.T, r *recorder) time.Time {
	t.Helper()
	var res store.Result
	c := store.Check{Key: "clock", Limit: algo.Limit{Limit: 1, Period: time.Second}}
	if err := r.Store.Take(context.Background(), []store.Check{c}, &res); err != nil {
		t.Fatal(err)
	}
	return res.Now
}

// stores returns the two backends for tests that run on both.
func stores(t *testing.T) map[string]store.Store {
	st, err := redisstore.New(redisstore.Config{URL: "redis://" + redistest.Shared(t).Addr, Prefix: fmt.Sprintf("ob%d:", rand.Uint32())})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return map[string]store.Store{"memory": memstore.New(memstore.Config{}), "redis": st}
}

func TestDeadlineRetryAfterSuffices(t *testing.T) {
	t.Parallel()
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			budgetOnly := Provider{Limit: algo.Limit{Limit: 10, Period: time.Second, Burst: 2}}
			q, err := New(Config{Store: st, Providers: map[string]Provider{"sms": sms, "mail": budgetOnly}})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			for _, c := range []struct {
				provider string
				share    bool
				burst    int64
			}{{"sms", true, sms.Tenant.Burst}, {"mail", false, budgetOnly.Limit.Burst}} {
				for range c.burst {
					if _, err := q.AcquireWithin(ctx, c.provider, "t1", 0); err != nil {
						t.Fatalf("%s: within the burst: %v", c.provider, err)
					}
				}
				_, err := q.AcquireWithin(ctx, c.provider, "t1", 0)
				var de *DeadlineError
				if !errors.As(err, &de) || de.Share != c.share || de.RetryAfter <= 0 || de.Provider != c.provider || de.Tenant != "t1" {
					t.Fatalf("%s: over the burst: %v, want a DeadlineError (share %v)", c.provider, err, c.share)
				}
				time.Sleep(de.RetryAfter)
				if _, err := q.AcquireWithin(ctx, c.provider, "t1", 0); err != nil {
					t.Fatalf("%s: after waiting the DeadlineError's %v: %v", c.provider, de.RetryAfter, err)
				}
				// With a wait limit the same call waits instead.
				waited, err := q.AcquireWithin(ctx, c.provider, "t1", time.Second)
				if err != nil || waited <= 0 {
					t.Fatalf("%s: waiting acquire: waited %v, %v", c.provider, waited, err)
				}
			}
		})
	}
}

func TestShareSparesTheBudget(t *testing.T) {
	t.Parallel()
	st := memstore.New(memstore.Config{})
	q, err := New(Config{Store: st, Providers: map[string]Provider{"sms": sms}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	start := time.Now()
	for i := range 50 {
		_, err := q.AcquireWithin(ctx, "sms", "greedy", 0)
		if i < int(sms.Tenant.Burst) != (err == nil) {
			t.Fatalf("acquire %d: %v", i, err)
		}
	}
	// The 45 refused calls spent nothing of the budget: 20 - 5 are left,
	// plus what refilled meanwhile (100 a second: a loaded machine takes
	// tens of milliseconds here). Had they spent it, none would be.
	var res store.Result
	if err := st.Take(ctx, []store.Check{{Key: budgetKey("sms"), Limit: sms.Limit}}, &res); err != nil {
		t.Fatal(err)
	}
	refilled := int64(time.Since(start).Seconds()*float64(sms.Limit.Limit)) + 1
	if got := res.Decisions[0].Remaining; got < 14 || got > 15+refilled {
		t.Fatalf("budget remaining %d after 5 admitted calls, want 15 (and up to %d refilled)", got, refilled)
	}
}

func TestCancelEndsWait(t *testing.T) {
	t.Parallel()
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			q, err := New(Config{Store: st, Providers: map[string]Provider{"sms": sms}, MaxWait: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			if err := q.Pause(context.Background(), "sms", 30*time.Second); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(50*time.Millisecond, cancel)
			// Without the cancellation this would sleep 30 s and succeed.
			if _, err := q.AcquireWithin(ctx, "sms", "t", time.Minute); !errors.Is(err, context.Canceled) {
				t.Fatalf("AcquireWithin after cancel: %v, want context.Canceled", err)
			}
		})
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	q, err := New(Config{Store: memstore.New(memstore.Config{}), Providers: map[string]Provider{"sms": sms}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cases := []struct {
		name string
		err  error
		want error
		says string
	}{
		{"unknown provider", q.Acquire(ctx, "fax", "t"), ErrUnknownProvider, `"fax": configured are sms`},
		{"empty tenant", q.Acquire(ctx, "sms", ""), ErrInvalid, "empty tenant"},
		{"negative wait", func() error { _, err := q.AcquireWithin(ctx, "sms", "t", -1); return err }(), ErrInvalid, "negative wait"},
		{"pause too long", q.Pause(ctx, "sms", 2*time.Hour), ErrInvalid, "over the 1h0m0s limit"},
		{"pause unknown", q.Pause(ctx, "fax", time.Second), ErrUnknownProvider, `"fax"`},
		{"tenant pause too long", func() error { _, err := q.PauseTenant(ctx, "sms", "t", 2*time.Hour); return err }(), ErrInvalid, `tenant "t": pause of 2h0m0s is over the 1h0m0s limit`},
		{"tenant pause without tenant", func() error { _, err := q.PauseTenant(ctx, "sms", "", time.Second); return err }(), ErrInvalid, "empty tenant"},
		{"tenant pause unknown", func() error { _, err := q.PauseTenant(ctx, "fax", "t", time.Second); return err }(), ErrUnknownProvider, `"fax"`},
		{"min tenants 1", func() error { _, err := New(Config{Store: memstore.New(memstore.Config{}), MinTenants: 1}); return err }(), ErrInvalid, "MinTenants 1 is under 2"},
		{"negative window", func() error {
			_, err := New(Config{Store: memstore.New(memstore.Config{}), Window: -time.Second})
			return err
		}(), ErrInvalid, "Window -1s is negative"},
		{"bad name", q.SetProviders(map[string]Provider{"SMS": sms}), ErrInvalid, `"SMS"`},
		{"bad limit", q.SetProviders(map[string]Provider{"sms": {}}), ErrInvalid, `provider "sms": limit`},
		{"not gcra", q.SetProviders(map[string]Provider{"sms": {Limit: algo.Limit{Limit: 1, Period: time.Second, Burst: 1, Algorithm: algo.TokenBucket}}}), ErrInvalid, "must use gcra"},
		{"bad share", q.SetProviders(map[string]Provider{"sms": {Limit: sms.Limit, Tenant: algo.Limit{Limit: 5}}}), ErrInvalid, "tenant share"},
	}
	for _, c := range cases {
		if !errors.Is(c.err, c.want) || !strings.Contains(fmt.Sprint(c.err), c.says) {
			t.Errorf("%s: %v, want %v saying %q", c.name, c.err, c.want, c.says)
		}
	}
	// The refused SetProviders left the providers as they were.
	if got := q.Providers(); !slices.Equal(got, []string{"sms"}) {
		t.Errorf("providers after refused changes: %v", got)
	}
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	q, err := New(Config{Store: memstore.New(memstore.Config{}), Providers: map[string]Provider{"sms": sms}, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 6 {
		q.AcquireWithin(ctx, "sms", "t", 0)
	}
	q.Pause(ctx, "sms", time.Second)
	q.PauseTenant(ctx, "sms", "t", time.Second)
	q.PauseTenant(ctx, "sms", "u", time.Second) // a quorum: the provider's second pause
	if got := testutil.ToFloat64(q.m.requeues.WithLabelValues("sms")); got != 1 {
		t.Errorf("requeues = %v, want 1", got)
	}
	if got := testutil.ToFloat64(q.m.pauses.WithLabelValues("sms")); got != 2 {
		t.Errorf("pauses = %v, want 2", got)
	}
	if got := testutil.ToFloat64(q.m.tenantPauses.WithLabelValues("sms")); got != 2 {
		t.Errorf("tenant pauses = %v, want 2", got)
	}
	if n, err := testutil.GatherAndCount(reg, "fairgate_outbound_wait_seconds"); err != nil || n != 1 {
		t.Errorf("wait histogram series: %d, %v", n, err)
	}
	// A second set on the same registry shares the metrics.
	if _, err := New(Config{Store: memstore.New(memstore.Config{}), Providers: map[string]Provider{"sms": sms}, Registerer: reg}); err != nil {
		t.Errorf("second Quotas on one registry: %v", err)
	}
}

// TestQuorumWindowClock drives the tally's clock: two tenants asked to
// wait within Window pause the provider for everyone; the same two with
// more than Window between them do not.
func TestQuorumWindowClock(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	q, err := New(Config{Store: memstore.New(memstore.Config{}), Providers: map[string]Provider{"sms": sms},
		Window: time.Minute, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, c := range []struct {
		tenant  string
		advance time.Duration
		want    bool
	}{
		{"a", 0, false},
		{"b", time.Minute + time.Second, false}, // a's request to wait left the window
		{"c", 30 * time.Second, true},           // b and c within one window: a quorum
	} {
		now = now.Add(c.advance)
		got, err := q.PauseTenant(ctx, "sms", c.tenant, time.Hour)
		if err != nil || got != c.want {
			t.Errorf("tenant %s after %v: provider paused %v, %v; want %v", c.tenant, c.advance, got, err, c.want)
		}
	}
}
