package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/rueidis"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/internal/redistest"
	"github.com/fairgate/fairgate/store"
	"github.com/fairgate/fairgate/store/storetest"
)

func TestMain(m *testing.M) { os.Exit(redistest.MainWithCluster(m)) }

func open(t testing.TB, url string) *Store {
	t.Helper()
	s, err := New(Config{URL: url, Prefix: fmt.Sprintf("t%d:", rand.Uint32())})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// standaloneURL and clusterURL name the shared servers (under -short, they
// skip t).
func standaloneURL(t testing.TB) string { return "redis://" + redistest.Shared(t).Addr }
func clusterURL(t testing.TB) string {
	return "redis-cluster://" + strings.Join(redistest.SharedCluster(t).Addrs(), ",")
}

func TestConformanceStandalone(t *testing.T) {
	t.Parallel()
	storetest.Run(t, open(t, standaloneURL(t)), storetest.Options{})
}

func TestConformanceCluster(t *testing.T) {
	t.Parallel()
	s := open(t, clusterURL(t))
	if !s.cluster {
		t.Fatal("redis-cluster:// did not give a cluster client")
	}
	storetest.Run(t, s, storetest.Options{})
}

// TestClusterDetectedFromPlainURL: a redis:// URL naming a cluster node
// still groups batches by slot.
// TestSlotsStandalone and TestSlotsCluster: two instances (two clients)
// sharing one Redis take exactly the limit's slots, 100 trials, and leases
// not released come back when they run out, on Redis's clock.
func TestSlotsStandalone(t *testing.T) {
	a := open(t, standaloneURL(t))
	storetest.RunSlots(t, a, openPrefix(t, standaloneURL(t), a.Prefix()), storetest.SlotOptions{})
}

func TestSlotsCluster(t *testing.T) {
	a := open(t, clusterURL(t))
	storetest.RunSlots(t, a, openPrefix(t, clusterURL(t), a.Prefix()), storetest.SlotOptions{})
}

// openPrefix is open with the key prefix given: a second instance of a
// store already open.
func openPrefix(t testing.TB, url, prefix string) *Store {
	t.Helper()
	s, err := New(Config{URL: url, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestClusterDetectedFromPlainURL(t *testing.T) {
	s := open(t, "redis://"+redistest.SharedCluster(t).Nodes[0].Addr)
	if !s.cluster {
		t.Fatal("cluster node behind redis:// not detected as a cluster")
	}
	var res store.Result
	checks := []store.Check{{Key: "{a}x", Limit: algo.PerSecond(5), Cost: 1}, {Key: "{b}y", Limit: algo.PerSecond(5), Cost: 1}}
	if err := s.Take(context.Background(), checks, &res); err != nil || !res.Allowed {
		t.Fatalf("cross-slot batch: %+v, %v", res, err)
	}
}

// TestSlotMatchesRedis compares Slot with CLUSTER KEYSLOT.
func TestSlotMatchesRedis(t *testing.T) {
	keys := []string{"", "a", "{a}", "{a}b", "a{b}c", "{}a", "{a", "a}", "}{a}", "{{a}}", "foo{bar}{zap}", "\xff{\x00}", strings.Repeat("k", 1000)}
	r := rand.New(rand.NewPCG(3, 4))
	for range 200 {
		b := make([]byte, r.IntN(12))
		for i := range b {
			b[i] = "ab{}:x\x00\xff"[r.IntN(8)]
		}
		keys = append(keys, string(b))
	}
	for _, k := range keys {
		want, err := redistest.Do(redistest.SharedCluster(t).Nodes[0].Addr, "CLUSTER", "KEYSLOT", k)
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(slot(k)); got != want {
			t.Errorf("slot(%q) = %s, Redis says %s", k, got, want)
		}
	}
}

func TestParseURL(t *testing.T) {
	tests := []struct {
		url   string
		addrs []string
		db    int
		tls   bool
		user  string
		pass  string
		// master and spass: a sentinel URL's master name and sentinel
		// password.
		master, spass string
		err           string
	}{
		{url: "redis://127.0.0.1:6379", addrs: []string{"127.0.0.1:6379"}},
		{url: "redis://u:p@h:1/3", addrs: []string{"h:1"}, db: 3, user: "u", pass: "p"},
		{url: "rediss://h:6380", addrs: []string{"h:6380"}, tls: true},
		{url: "redis-cluster://a:1,b:2,c:3", addrs: []string{"a:1", "b:2", "c:3"}},
		{url: "rediss-cluster://:s%40cret@a:1,b:2", addrs: []string{"a:1", "b:2"}, tls: true, pass: "s@cret"},
		{url: "redis-cluster://a:1,b", err: `address "b": want host:port`},
		{url: "redis-cluster://a:99999", err: "bad port"},
		{url: "memcache://a:1", err: `unknown scheme "memcache"`},
		{url: "127.0.0.1:6379", err: "want redis://host:port"},
		{url: "redis://h:1/x", err: "invalid database number"},
		{url: "redis-sentinel://a:26379,b:26379/mymaster", addrs: []string{"a:26379", "b:26379"}, master: "mymaster"},
		{url: "rediss-sentinel://u:p@a:1/my%2Dmaster?sentinel_password=sp&sentinel_username=su&db=2", addrs: []string{"a:1"}, master: "my-master", tls: true, user: "u", pass: "p", db: 2, spass: "sp"},
		{url: "redis-sentinel://a:1", err: "<master name>"},
		{url: "redis-sentinel://a:1/m?colour=red", err: `unknown parameter "colour"`},
		{url: "redis://h:1?colour=red", err: `unknown parameter "colour"`},
		{url: "redis-cluster://a:1?tls_ca_file=/x", err: "need a TLS scheme"},
		{url: "rediss://h:1?tls_cert_file=/x", err: "tls_cert_file and tls_key_file go together"},
		{url: "rediss://h:1?tls_ca_file=/nonexistent", err: "tls_ca_file: open /nonexistent"},
		{url: "rediss-cluster://a:1,b:2?skip_verify=true", addrs: []string{"a:1", "b:2"}, tls: true},
		{url: "redis://h:1?password_file=/nonexistent", err: "password file"},
	}
	for _, tt := range tests {
		opt, err := parseURL(tt.url)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("parseURL(%q) error = %v, want %q", tt.url, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("parseURL(%q): %v", tt.url, err)
			continue
		}
		got := []any{opt.InitAddress, opt.SelectDB, opt.TLSConfig != nil, opt.Username, opt.Password, opt.Sentinel.MasterSet, opt.Sentinel.Password}
		want := []any{tt.addrs, tt.db, tt.tls, tt.user, tt.pass, tt.master, tt.spass}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("parseURL(%q) -want +got:\n%s", tt.url, diff)
		}
	}
	if _, err := parseURL("redis-cluster://u:hunter2@a:1,b"); err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("error shows the password or is nil: %v", err)
	}
	if _, err := parseURL("redis-sentinel://a:1/m?sentinel_password=hunter2&colour=1"); err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("error shows the sentinel password or is nil: %v", err)
	}
}

func TestNewErrors(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Error("New with neither client nor URL succeeded")
	}
	if _, err := New(Config{URL: "redis://127.0.0.1:1"}); err == nil {
		t.Error("New on a closed port succeeded")
	}
	if _, err := New(Config{URL: standaloneURL(t), Prefix: "{x}"}); err == nil || !strings.Contains(err.Error(), "brace") {
		t.Errorf("prefix with braces: err = %v", err)
	}
}

// TestUserClient: the store accepts the caller's own client and leaves it open.
func TestUserClient(t *testing.T) {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{redistest.Shared(t).Addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := New(Config{Client: c, Prefix: "user:"})
	if err != nil {
		t.Fatal(err)
	}
	var res store.Result
	if err := s.Take(context.Background(), []store.Check{{Key: "k", Limit: algo.PerSecond(1), Cost: 1}}, &res); err != nil || !res.Allowed {
		t.Fatalf("Take: %+v %v", res, err)
	}
	s.Close()
	if err := c.Do(context.Background(), c.B().Ping().Build()).Error(); err != nil {
		t.Fatalf("the caller's client was closed by Store.Close: %v", err)
	}
}

// readState reads the raw state of key under a, as the scripts store it.
func readState(t *testing.T, s *Store, a algo.Algorithm, key string) (algo.State, bool) {
	t.Helper()
	ctx := context.Background()
	c := s.c
	k := s.Key(a, key)
	num := func(m rueidis.RedisMessage) int64 {
		if m.IsNil() {
			return 0
		}
		str, err := m.ToString()
		if err != nil {
			t.Fatalf("state of %q: %v", k, err)
		}
		var v int64
		if _, err := fmt.Sscan(str, &v); err != nil {
			t.Fatalf("state of %q: %q is not an integer: %v", k, str, err)
		}
		return v
	}
	switch a {
	case algo.GCRA:
		m, err := c.Do(ctx, c.B().Get().Key(k).Build()).ToMessage()
		if rueidis.IsRedisNil(err) {
			return algo.State{}, false
		}
		if err != nil {
			t.Fatal(err)
		}
		str, err := m.ToString()
		if err != nil {
			t.Fatal(err)
		}
		// A trailing 'h' marks a hold (B = 1), a 'd' a debt (B = 2).
		flag := map[byte]int64{'h': 1, 'd': 2}[str[len(str)-1]]
		if flag != 0 {
			str = str[:len(str)-1]
		}
		var v int64
		if _, err := fmt.Sscan(str, &v); err != nil {
			t.Fatalf("state of %q: %q is not a TAT: %v", k, str, err)
		}
		return algo.State{A: v, B: flag}, true
	case algo.SlidingLog:
		zs, err := c.Do(ctx, c.B().Zrange().Key(k).Min("0").Max("-1").Withscores().Build()).AsZScores()
		if err != nil {
			t.Fatal(err)
		}
		if len(zs) == 0 {
			return algo.State{}, false
		}
		var st algo.State
		seen := map[string]bool{}
		for _, z := range zs {
			st.Log = append(st.Log, int64(z.Score))
			if seen[z.Member] {
				t.Fatalf("duplicate member %q", z.Member)
			}
			seen[z.Member] = true
		}
		return st, true
	default:
		fields := map[algo.Algorithm][]string{algo.TokenBucket: {"t", "l"}, algo.SlidingWindow: {"w", "c", "p"}, algo.FixedWindow: {"w", "n"}}[a]
		ms, err := c.Do(ctx, c.B().Hmget().Key(k).Field(fields...).Build()).ToArray()
		if err != nil {
			t.Fatal(err)
		}
		if ms[0].IsNil() {
			return algo.State{}, false
		}
		vals := []int64{0, 0, 0}
		for i := range ms {
			vals[i] = num(ms[i])
		}
		return algo.State{A: vals[0], B: vals[1], C: vals[2]}, true
	}
}

// redisTime returns Redis's TIME in µs.
func redisTime(t *testing.T, s *Store) int64 {
	t.Helper()
	v, err := s.c.Do(context.Background(), s.c.B().Time().Build()).AsStrSlice()
	if err != nil || len(v) != 2 {
		t.Fatalf("TIME: %v %v", v, err)
	}
	var sec, usec int64
	fmt.Sscan(v[0], &sec)
	fmt.Sscan(v[1], &usec)
	return sec*1_000_000 + usec
}

// TestDifferential sends random batches through the Lua scripts and runs
// the Go reference at the times Redis reported: decisions and stored state
// must be identical, for all five algorithms, alone and mixed in batches.
func TestDifferential(t *testing.T) {
	t.Parallel()
	s := open(t, standaloneURL(t))
	r := seeded(t, 9)
	type keyed struct {
		key   string
		limit algo.Limit
	}
	var pool []keyed
	for i := range 15 {
		a := algo.Algorithms[i%5]
		l := algo.Limit{Limit: 1 + r.Int64N(8), Algorithm: a}
		l.Period = time.Duration(l.Limit*(500+r.Int64N(4000))) * time.Microsecond
		if i >= 10 {
			l.Period *= 2000 // long periods: grid weighting, coarse windows
		}
		if !a.Windowed() && r.IntN(2) == 0 {
			l.Burst = 1 + r.Int64N(10)
		}
		if a == algo.FixedWindow && r.IntN(2) == 0 {
			l.Offset = time.Duration(r.Int64N(int64(l.Period/time.Microsecond))) * time.Microsecond
		}
		pool = append(pool, keyed{fmt.Sprintf("k%d", i), l})
	}
	ref := storetest.NewReference()
	var res, want store.Result
	for op := range 1500 {
		n := 1 + r.IntN(3)
		var checks []store.Check
		for _, j := range r.Perm(len(pool))[:n] {
			checks = append(checks, store.Check{Key: pool[j].key, Limit: pool[j].limit, Cost: r.Int64N(pool[j].limit.Capacity() + 1)})
		}
		if err := s.Take(context.Background(), checks, &res); err != nil {
			t.Fatalf("op %d: %v", op, err)
		}
		now := res.Now.UnixMicro()
		// The Go reference, at Redis's time.
		ref.Take(now, checks, &want)
		if res.Allowed != want.Allowed {
			t.Fatalf("op %d at %d: batch allowed %v, reference %v; checks %+v", op, now, res.Allowed, want.Allowed, checks)
		}
		for i, c := range checks {
			if res.Decisions[i] != want.Decisions[i] {
				t.Fatalf("op %d at %d, %v %q cost %d: Lua decided %+v, Go %+v", op, now, c.Limit, c.Key, c.Cost, res.Decisions[i], want.Decisions[i])
			}
			st, until, held := ref.State(c.Limit.Algorithm, c.Key, now)
			got, ok := readState(t, s, c.Limit.Algorithm, c.Key)
			switch {
			case !held:
				// Expired for the reference; Redis may hold it up to 1 ms
				// longer (PX is rounded up), which decides the same.
			case !ok:
				// Gone: it must have expired by Redis's clock at the read
				// (give or take the millisecond PX rounds to).
				if after := redisTime(t, s); until-after > 2000 {
					t.Fatalf("op %d: Redis lost the state of %q, %dµs before its expiry", op, c.Key, until-after)
				}
			case !cmp.Equal(st, got, cmp.Comparer(func(a, b []int64) bool { return fmt.Sprint(a) == fmt.Sprint(b) })):
				t.Fatalf("op %d: state of %q (%v): Redis %+v, Go %+v", op, c.Key, c.Limit.Algorithm, got, st)
			}
		}
		if r.IntN(3) == 0 {
			time.Sleep(time.Duration(r.IntN(3000)) * time.Microsecond)
		}
	}
}

// TestDifferentialSettle sends random takes and settlements (charges into
// debt, refunds, retries of an id, refunds of takes of windows gone)
// through the Lua scripts and runs the Go reference at the times Redis
// reported: every decision, settlement and stored state must be identical.
func TestDifferentialSettle(t *testing.T) {
	t.Parallel()
	s := open(t, standaloneURL(t))
	r := seeded(t, 36)
	type keyed struct {
		key   string
		limit algo.Limit
		taken []time.Time
	}
	var pool []*keyed
	for i := range 15 {
		a := algo.Algorithms[i%5]
		l := algo.Limit{Limit: 1 + r.Int64N(8), Algorithm: a}
		l.Period = time.Duration(l.Limit*(500+r.Int64N(4000))) * time.Microsecond
		if i >= 10 {
			l.Period *= 2000
		}
		if !a.Windowed() && r.IntN(2) == 0 {
			l.Burst = 1 + r.Int64N(10)
		}
		if a == algo.FixedWindow && r.IntN(2) == 0 {
			l.Offset = time.Duration(r.Int64N(int64(l.Period/time.Microsecond))) * time.Microsecond
		}
		pool = append(pool, &keyed{key: fmt.Sprintf("k%d", i), limit: l})
	}
	ref := storetest.NewReference()
	var res, want store.Result
	var sres, swant store.SettleResult
	var ids []string
	compareState := func(op int, k *keyed, now int64) {
		st, until, held := ref.State(k.limit.Algorithm, k.key, now)
		got, ok := readState(t, s, k.limit.Algorithm, k.key)
		switch {
		case !held:
		case !ok:
			if after := redisTime(t, s); until-after > 2000 {
				t.Fatalf("op %d: Redis lost the state of %q, %dµs before its expiry", op, k.key, until-after)
			}
		case !cmp.Equal(st, got, cmp.Comparer(func(a, b []int64) bool { return fmt.Sprint(a) == fmt.Sprint(b) })):
			t.Fatalf("op %d: state of %q (%v): Redis %+v, Go %+v", op, k.key, k.limit.Algorithm, got, st)
		}
	}
	for op := range 1500 {
		picked := r.Perm(len(pool))[:1+r.IntN(3)]
		if r.IntN(2) == 0 {
			var checks []store.Check
			for _, j := range picked {
				checks = append(checks, store.Check{Key: pool[j].key, Limit: pool[j].limit, Cost: r.Int64N(pool[j].limit.Capacity() + 1)})
			}
			if err := s.Take(context.Background(), checks, &res); err != nil {
				t.Fatalf("op %d: %v", op, err)
			}
			ref.Take(res.Now.UnixMicro(), checks, &want)
			for i, c := range checks {
				if res.Decisions[i] != want.Decisions[i] {
					t.Fatalf("op %d, %v %q cost %d: Lua decided %+v, Go %+v", op, c.Limit, c.Key, c.Cost, res.Decisions[i], want.Decisions[i])
				}
			}
			for _, j := range picked {
				if res.Allowed {
					pool[j].taken = append(pool[j].taken, res.Now)
				}
				compareState(op, pool[j], res.Now.UnixMicro())
			}
		} else {
			var adjs []store.Adjustment
			for _, j := range picked {
				k := pool[j]
				c := k.limit.Capacity()
				a := store.Adjustment{Key: k.key, Limit: k.limit, Delta: r.Int64N(3*c+1) - 3*c/2, TakenAt: time.Now()}
				if len(k.taken) > 0 {
					a.TakenAt = k.taken[len(k.taken)-1-r.IntN(min(len(k.taken), 4))]
				}
				adjs = append(adjs, a)
			}
			id := fmt.Sprintf("d%d", op)
			if len(ids) > 0 && r.IntN(5) == 0 {
				id = ids[r.IntN(len(ids))]
			}
			ids = append(ids, id)
			if err := s.Settle(context.Background(), id, adjs, &sres); err != nil {
				t.Fatalf("op %d: %v", op, err)
			}
			now := sres.Now.UnixMicro()
			ref.Settle(now, id, adjs, &swant)
			for i, a := range adjs {
				if sres.Settled[i] != swant.Settled[i] {
					t.Fatalf("op %d at %d, %v %q delta %d taken %d: Lua settled %+v, Go %+v", op, now, a.Limit, a.Key, a.Delta, a.TakenUs(), sres.Settled[i], swant.Settled[i])
				}
			}
			for _, j := range picked {
				compareState(op, pool[j], now)
			}
		}
		if r.IntN(3) == 0 {
			time.Sleep(time.Duration(r.IntN(3000)) * time.Microsecond)
		}
	}
}

// TestSettleIDRecord: a settlement's id record lives in the slot of the
// keys it settles (on a cluster, one per slot), for store.SettleIDLifetime.
func TestSettleIDRecord(t *testing.T) {
	t.Parallel()
	for _, url := range []string{standaloneURL(t), clusterURL(t)} {
		s := open(t, url)
		l := algo.Limit{Limit: 10, Period: time.Hour}
		adjs := []store.Adjustment{{Key: "{rec-a}x", Limit: l, Delta: 1}, {Key: "{rec-b}y", Limit: l, Delta: 1}, {Key: "{rec-a}z", Limit: l, Delta: 1}}
		var res store.SettleResult
		if err := s.Settle(context.Background(), "rec-id", adjs, &res); err != nil {
			t.Fatal(err)
		}
		slots := map[uint16]bool{}
		for _, a := range adjs {
			sl := uint16(0)
			if s.cluster {
				sl = slot(s.Key(a.Limit.Algorithm, a.Key))
			}
			slots[sl] = true
		}
		for sl := range slots {
			k := s.settleKey("rec-id", sl)
			if s.cluster && slot(k) != sl {
				t.Fatalf("%s: the id record %q is in slot %d, not its keys' %d", url, k, slot(k), sl)
			}
			ttl, err := s.c.Do(context.Background(), s.c.B().Pttl().Key(k).Build()).AsInt64()
			if err != nil || ttl <= 0 || ttl > store.SettleIDLifetime.Milliseconds() {
				t.Fatalf("%s: the id record %q has PTTL %d (%v), want up to %v", url, k, ttl, err, store.SettleIDLifetime)
			}
		}
	}
}

// TestSlotTags: every cluster slot has a hash tag that hashes to it.
func TestSlotTags(t *testing.T) {
	for sl, tag := range slotTags() {
		if tag == "" || slot(tag) != uint16(sl) || len(tag) > 4 {
			t.Fatalf("slot %d: tag %q hashes to %d", sl, tag, slot(tag))
		}
	}
}

// TestScriptFlushCostsNoError: SCRIPT FLUSH mid-run; callers see no error.
func TestScriptFlushCostsNoError(t *testing.T) {
	t.Parallel()
	s := open(t, standaloneURL(t))
	var errs atomic.Int64
	var calls atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			var res store.Result
			for {
				select {
				case <-stop:
					return
				default:
				}
				c := []store.Check{{Key: fmt.Sprint("flush", w), Limit: algo.PerSecond(1000), Cost: 1}}
				if err := s.Take(context.Background(), c, &res); err != nil {
					errs.Add(1)
					t.Errorf("take during SCRIPT FLUSH: %v", err)
				}
				calls.Add(1)
			}
		})
	}
	for range 10 {
		time.Sleep(20 * time.Millisecond)
		if _, err := redistest.Do(redistest.Shared(t).Addr, "SCRIPT", "FLUSH"); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	if errs.Load() > 0 || calls.Load() == 0 {
		t.Fatalf("%d errors in %d calls", errs.Load(), calls.Load())
	}
}

// TestRestartCostsNoErrorOnceReconnected: a Redis restart (empty script
// cache, no data) mid-run: calls fail while it is down, and once the store
// reconnects, no call fails, NOSCRIPT least of all.
func TestRestartCostsNoErrorOnceReconnected(t *testing.T) {
	t.Parallel()
	redistest.Need(t)
	srv, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	s := open(t, "redis://"+srv.Addr)
	var res store.Result
	c := []store.Check{{Key: "restart", Limit: algo.PerSecond(1000), Cost: 1}}
	for range 10 {
		if err := s.Take(context.Background(), c, &res); err != nil {
			t.Fatal(err)
		}
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := s.Take(ctx, c, &res)
		cancel()
		if err == nil {
			break
		}
		if strings.Contains(err.Error(), "NOSCRIPT") {
			t.Fatalf("NOSCRIPT reached the caller: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("store did not reconnect within 10s: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for i := range 200 {
		if err := s.Take(context.Background(), c, &res); err != nil {
			t.Fatalf("call %d after reconnecting: %v", i, err)
		}
	}
}

// TestRejectionWritesNothing: a rejected take and a peek leave the key's
// value and TTL as they were (no write, no penalty extension).
func TestRejectionWritesNothing(t *testing.T) {
	t.Parallel()
	s := open(t, standaloneURL(t))
	for _, a := range algo.Algorithms {
		l := algo.Limit{Limit: 2, Period: time.Hour, Algorithm: a}
		key := "nowrite:" + a.String()
		var res store.Result
		if err := s.Take(context.Background(), []store.Check{{Key: key, Limit: l, Cost: 2}}, &res); err != nil {
			t.Fatal(err)
		}
		before, _ := readState(t, s, a, key)
		ttl1, _ := redistest.Do(redistest.Shared(t).Addr, "PTTL", s.Key(a, key))
		time.Sleep(5 * time.Millisecond)
		for _, cost := range []int64{1, 0, 2} {
			if err := s.Take(context.Background(), []store.Check{{Key: key, Limit: l, Cost: cost}}, &res); err != nil {
				t.Fatal(err)
			}
		}
		after, _ := readState(t, s, a, key)
		ttl2, _ := redistest.Do(redistest.Shared(t).Addr, "PTTL", s.Key(a, key))
		if !cmp.Equal(before, after) || ttl2 > ttl1 {
			t.Errorf("%v: rejected takes changed state %+v -> %+v or TTL %s -> %s", a, before, after, ttl1, ttl2)
		}
	}
}

// TestEveryScriptCompiles loads every driver's script for every set of
// algorithms into Redis: a syntax error in a rarely used combination fails
// here, not in production.
func TestEveryScriptCompiles(t *testing.T) {
	for m := 1; m <= allAlgorithms; m++ {
		for _, driver := range []string{"take1", "take_multi", "take1_multi", "take_node", "refund", "settle", "settle_multi", "settle_node"} {
			if _, err := redistest.Do(redistest.Shared(t).Addr, "SCRIPT", "LOAD", script(driver, uint8(m))); err != nil {
				t.Errorf("%s script for algorithm set %05b: %v", driver, m, err)
			}
		}
	}
}

// scriptCalls sums the EVALSHA and EVAL calls the servers at addrs have served.
func scriptCalls(t *testing.T, addrs ...string) int {
	t.Helper()
	n, err := redistest.ScriptCalls(addrs...)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// evalCalls sums the script calls every cluster node has served.
func evalCalls(t *testing.T) int { return scriptCalls(t, redistest.SharedCluster(t).Addrs()...) }

// TestClusterCallsPerBatch: a batch whose keys share a hash tag is one
// script call; a batch over three slots is one call per slot (and, when a
// part rejects, one refund call per charged part).
func TestClusterCallsPerBatch(t *testing.T) {
	s := open(t, clusterURL(t))
	l := algo.Limit{Limit: 5, Period: time.Hour}
	var res store.Result
	take := func(checks ...store.Check) int {
		t.Helper()
		before := evalCalls(t)
		if err := s.Take(context.Background(), checks, &res); err != nil {
			t.Fatal(err)
		}
		return evalCalls(t) - before
	}
	// Warm every node's script cache first (its first call of a script is
	// a NOSCRIPT miss and an EVAL), on the same slots with other keys.
	for _, k := range []string{"{acme}w", "{a}w", "{b}w", "{c}w"} {
		for _, checks := range [][]store.Check{
			{{Key: k, Limit: l, Cost: 5}},
			{{Key: k + "1", Limit: l, Cost: 1}, {Key: k + "2", Limit: l.With(algo.FixedWindow), Cost: 1}},
			{{Key: k + "3", Limit: l, Cost: 1}, {Key: k + "4", Limit: l, Cost: 1}},
		} {
			take(checks...)
		}
	}
	take(store.Check{Key: "{a}w5", Limit: l, Cost: 1}, store.Check{Key: "{b}w5", Limit: l, Cost: 1}, store.Check{Key: "{c}w", Limit: l, Cost: 1}) // a refund on each node

	same := []store.Check{{Key: "{acme}a", Limit: l, Cost: 1}, {Key: "{acme}b", Limit: l.With(algo.FixedWindow), Cost: 1}, {Key: "{acme}c", Limit: l, Cost: 1}}
	if n := take(same...); n != 1 || !res.Allowed {
		t.Errorf("same-tag batch of 3: %d script calls (allowed %v), want 1", n, res.Allowed)
	}
	spread := []store.Check{{Key: "{a}x", Limit: l, Cost: 1}, {Key: "{b}x", Limit: l, Cost: 1}, {Key: "{c}x", Limit: l, Cost: 1}}
	if n := take(spread...); n != 3 || !res.Allowed {
		t.Errorf("batch over 3 slots: %d script calls (allowed %v), want 3", n, res.Allowed)
	}
	take(store.Check{Key: "{c}x", Limit: l, Cost: 4}) // {c}x is now empty
	if n := take(spread...); n != 3+2 || res.Allowed {
		t.Errorf("rejected batch over 3 slots: %d script calls (allowed %v), want 3 reservations + 2 refunds", n, res.Allowed)
	}
	if d := res.Decisions[0]; d.Remaining != 4 {
		t.Errorf("refunded part reports remaining %d, want 4 (its peek after the refund)", d.Remaining)
	}
}

// TestCoalescing: 400 concurrent single-key takes reach Redis in fewer
// script calls than takes, and still admit exactly the burst; with
// NoCoalescing every take is a call of its own.
func TestCoalescing(t *testing.T) {
	redistest.Need(t)
	srv, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	calls := func() int { return scriptCalls(t, srv.Addr) }
	for _, noCoalesce := range []bool{false, true} {
		s, err := New(Config{URL: "redis://" + srv.Addr, Prefix: fmt.Sprintf("co%v:", noCoalesce), NoCoalescing: noCoalesce})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		l := algo.Limit{Limit: 50, Period: time.Hour, Algorithm: algo.SlidingWindow}
		before := calls()
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for i := range 400 {
			wg.Go(func() {
				var res store.Result
				checks := []store.Check{{Key: "hot", Limit: l, Cost: 1}}
				if i%2 == 0 { // and half of them as two-check batches
					checks = append(checks, store.Check{Key: fmt.Sprint("own", i), Limit: l.With(algo.GCRA), Cost: 1})
				}
				if err := s.Take(context.Background(), checks, &res); err != nil {
					t.Error(err)
				}
				if res.Allowed {
					admitted.Add(1)
				}
			})
		}
		wg.Wait()
		n := calls() - before
		if admitted.Load() != 50 {
			t.Errorf("coalescing off=%v: %d admitted of 400 on a limit of 50, want exactly 50", noCoalesce, admitted.Load())
		}
		switch {
		case noCoalesce && n < 400:
			t.Errorf("coalescing off: %d script calls for 400 takes, want one each", n)
		case !noCoalesce && n >= 400:
			t.Errorf("coalescing on: %d script calls for 400 concurrent takes, want fewer", n)
		}
		t.Logf("coalescing off=%v: %d script calls for 400 takes", noCoalesce, n)
	}
}

// TestWrongShapeIsAProtocolError: a script reply of the wrong length or
// with a non-integer is store.ErrProtocol, never ErrUnavailable, which the
// limiter would take for an outage and decide by the fail mode unseen.
func TestWrongShapeIsAProtocolError(t *testing.T) {
	s, err := New(Config{URL: "redis://" + redistest.Shared(t).Addr})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := s.Client()
	for script, want := range map[string]int{"return {1, 2}": 3, "return {1, 'x'}": 2} {
		msgs, err := c.Do(context.Background(), c.B().Eval().Script(script).Numkeys(0).Build()).ToArray()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := integers(nil, msgs, want); !errors.Is(err, store.ErrProtocol) || errors.Is(err, store.ErrUnavailable) {
			t.Errorf("%s read as %d integers: %v, want ErrProtocol alone", script, want, err)
		}
	}
	msgs, _ := c.Do(context.Background(), c.B().Eval().Script("return {1, 2}").Numkeys(0).Build()).ToArray()
	if got, err := integers(nil, msgs, 2); err != nil || len(got) != 2 || got[1] != 2 {
		t.Errorf("a good reply: %v %v", got, err)
	}
}

// TestRedactURL: a store URL in a message keeps its shape and names but
// hides the password and every query value: an unknown parameter may be a
// misspelt secret (?password=…), and a '@' in the query is not userinfo.
func TestRedactURL(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"redis://h:1", "redis://h:1"},
		{"redis://u:p@h:1/3", "redis://u:xxxxx@h:1/3"},
		{"redis://u:p@h:1?password=QSECRET", "redis://u:xxxxx@h:1?password=xxxxx"},
		{"redis-sentinel://a:1/m?sentinel_password=sp&sentinel_username=su&db=2", "redis-sentinel://a:1/m?sentinel_password=xxxxx&sentinel_username=xxxxx&db=2"},
		{"rediss://h:1?skip_verify&key_prefix=", "rediss://h:1?skip_verify&key_prefix="},
		{"redis://h:1?db=99&dial_timeout=2s&key_prefix=a:&pasword=QS", "redis://h:1?db=99&dial_timeout=2s&key_prefix=a:&pasword=xxxxx"},
		{"redis://h:1?token=a@b:c", "redis://h:1?token=xxxxx"},
		{"h:1", "h:1"},
		// The attacker review's: URLs that do not parse keep no password.
		{"redis://u:s3c?retpw@localhost:6379", "redis://u:xxxxx@localhost:6379"},
		{"redis:/u:s3cretpw@h:1", "redis:/u:xxxxx@h:1"},
		{"redis://u:s3cretpw@localhost:notaport", "redis://u:xxxxx@localhost:notaport"},
		{"redis-cluster://u:s3cretpw@a:1,b:2", "redis-cluster://u:xxxxx@a:1,b:2"},
		{"redis://u:p/w?x@h:1", "redis://u:xxxxx@h:1"},
	} {
		if got := RedactURL(tc.url); got != tc.want {
			t.Errorf("RedactURL(%q) = %q, want %q", tc.url, got, tc.want)
		}
	}
}

// TestURLErrorsHideQueryValues: the attacker's case, an unknown parameter
// holding a secret, is refused by name without its value.
func TestURLErrorsHideQueryValues(t *testing.T) {
	for _, u := range []string{
		"redis://u:p@h:1?password=QSECRET",
		"redis-cluster://a:1,b:2?auth=QSECRET",
		"redis-sentinel://a:1/m?sentinel_pasword=QSECRET",
		"rediss://h:1?skip_verify=true&colour=QSECRET",
		"redis://h:1?db=2&password=QSECRET",
		// Passwords in URLs that do not parse (net/url quotes the URL).
		"redis://u:QSECRET@localhost:notaport",
		"redis://u:QSEC%zzRET@localhost:6379",
		"redis://u:QSECRET@[::1:6379",
		"redis://u:QSE?CRET@localhost:notaport",
		"redis:/u:QSECRET@localhost:6379",
		"redis-cluster://u:QSECRET@a:1,b:x",
	} {
		err := CheckURL(u)
		if err == nil || strings.Contains(err.Error(), "QSECRET") {
			t.Errorf("CheckURL(%q) = %v: want an error without the value", u, err)
		}
	}
}

// TestURLErrorsShowKnownValues: a known parameter that holds no secret is
// named with its value, so that the error says which value was wrong (the
// second new-user trial saw ?db=99 hidden as xxxxx).
func TestURLErrorsShowKnownValues(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"redis://h:1?db=x9", "db=x9"},
		{"redis://h:1?dial_timeout=soon", "soon"},
		{"rediss://h:1?skip_verify=perhaps", "perhaps"},
	} {
		if err := CheckURL(tc.url); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CheckURL(%q) = %v, want an error with %q", tc.url, err, tc.want)
		}
	}
}

// seeded returns a random source for t, logging its seed if t fails so
// that the run can be repeated.
func seeded(t *testing.T, stream uint64) *rand.Rand {
	seed := rand.Uint64()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("seed %d", seed)
		}
	})
	return rand.New(rand.NewPCG(seed, stream))
}
