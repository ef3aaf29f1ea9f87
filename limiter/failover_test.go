package limiter_test

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/internal/redistest"
	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/store"
	"github.com/fairgate/fairgate/store/memstore"
	"github.com/fairgate/fairgate/store/redisstore"
)

// TestClusterFailover runs decisions under load on a real Redis Cluster of
// 3 masters and 3 replicas and kills one master with SIGKILL. Tenants whose
// keys live on the other masters are decided by the store without
// interruption; tenants on the lost master follow their fail mode (open:
// the fallback decides; closed: unavailable) until its replica is promoted,
// and are decided by the store again within 15 s. It reports how long that
// took and how many requests the lost master's tenants were admitted while
// the fallback decided (Redis replication is asynchronous, so the last
// writes before the kill can be lost too). The load runs until those
// tenants have been decided by the store for 2 s on end, or for 20 s.
func TestClusterFailover(t *testing.T) {
	// Without cluster-require-full-coverage no, Redis answers CLUSTERDOWN
	// for every slot while one master is out (its default), and no client
	// can keep the healthy masters' keys going.
	cl, st := startCluster(t, 1, "--cluster-require-full-coverage", "no")
	pol := policy.Policy{
		DefaultPlan: "p", DefaultClass: "open",
		Plans: map[string]policy.Plan{"p": {Name: "p", Rules: []policy.Rule{{Limit: algo.Limit{Limit: 600, Period: time.Minute, Burst: 20}}}}},
		Classes: map[string]policy.Class{
			"open":   {Name: "open", Share: 1, Fail: policy.FailOpen},
			"closed": {Name: "closed", Share: 1, Fail: policy.FailClosed},
		},
	}
	l, err := limiter.New(limiter.Config{Store: st, Policy: pol, Timeout: 250 * time.Millisecond, BreakerCooldown: 500 * time.Millisecond,
		Fallback: memstore.New(memstore.Config{}), NoNearCache: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go l.Run(ctx)

	// Which master owns each tenant's key: the first master's slots are the
	// ones the kill takes away.
	victim := cl.Nodes[0]
	ownsVictim := map[string]bool{}
	tenants := make([]string, 60)
	for i := range tenants {
		tenants[i] = fmt.Sprint("tenant-", i)
		res, _ := l.Snapshot().Resolve(policy.Request{Tenant: tenants[i], Class: "open"}, time.Now())
		// The victim answers a GET of a key it serves; of any other, MOVED.
		_, err := redistest.Do(victim.Addr, "GET", st.Key(algo.GCRA, res.Layers[0].Key))
		ownsVictim[tenants[i]] = err == nil
	}

	type rec struct {
		at      time.Duration
		tenant  string
		class   string
		reason  limiter.Reason
		allowed bool
	}
	var mu sync.Mutex
	var recs []rec
	start := time.Now()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; ; i += 8 {
				select {
				case <-stop:
					return
				default:
				}
				tn := tenants[i%len(tenants)]
				class := []string{"open", "closed"}[i/len(tenants)%2]
				d, err := l.Decide(context.Background(), policy.Request{Tenant: tn, Class: class})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				recs = append(recs, rec{time.Since(start), tn, class, d.Reason, d.Allowed})
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
	// storeAgain reports whether, since the kill at killedAt, the lost
	// master's tenants have been decided without the store, and then by
	// the store alone for the last 2 s.
	storeAgain := func(killedAt time.Duration) bool {
		mu.Lock()
		defer mu.Unlock()
		var lastBad, lastGood time.Duration
		for _, r := range recs {
			if !ownsVictim[r.tenant] || r.at <= killedAt {
				continue
			}
			if r.reason == limiter.ReasonAllowed || r.reason == limiter.ReasonLimited {
				lastGood = max(lastGood, r.at)
			} else {
				lastBad = max(lastBad, r.at)
			}
		}
		return lastBad > 0 && lastGood > lastBad && time.Since(start)-lastBad >= 2*time.Second
	}
	time.Sleep(3 * time.Second)
	killedAt := time.Since(start)
	victim.Kill()
	for time.Since(start) < 20*time.Second && !storeAgain(killedAt) {
		time.Sleep(100 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	run := time.Since(start)

	var others, othersBad, lostFallback, lostAdmitted int
	var lastBad time.Duration
	for _, r := range recs {
		store := r.reason == limiter.ReasonAllowed || r.reason == limiter.ReasonLimited
		if !ownsVictim[r.tenant] {
			if r.at > killedAt {
				others++
				if !store {
					othersBad++
				}
			}
			continue
		}
		if r.at > killedAt && !store {
			lastBad = max(lastBad, r.at)
			lostFallback++
			if r.reason == limiter.ReasonDegradedOpen {
				lostAdmitted++
			}
			if r.class == "closed" && r.reason != limiter.ReasonUnavailable {
				t.Errorf("a fail-closed request of a lost tenant was %s", r.reason)
			}
		}
	}
	recovered := lastBad - killedAt
	// Over-admission: each tenant's admitted requests over the whole run
	// against what its limit allows in that time (burst 20 + 10 a second).
	admitted := map[string]int{}
	for _, r := range recs {
		if r.allowed {
			admitted[r.tenant]++
		}
	}
	bound := 20 + int(run/(100*time.Millisecond))
	worstLost, worstOther := 0, 0
	for tn, n := range admitted {
		if ownsVictim[tn] {
			worstLost = max(worstLost, n-bound)
		} else {
			worstOther = max(worstOther, n-bound)
		}
	}
	t.Logf("over-admission (admitted beyond burst + rate × run): at most %d per tenant on the lost master, %d on the others (bound %d)", worstLost, worstOther, bound)
	if worstOther > 0 {
		t.Errorf("tenants on healthy masters were admitted %d over their limit", worstOther)
	}
	t.Logf("after the kill: %d decisions for tenants on the other masters, %d of them not by the store; tenants on the lost master decided without the store for %v (%d requests, %d admitted by the fallback)",
		others, othersBad, recovered.Round(10*time.Millisecond), lostFallback, lostAdmitted)
	// None is expected (0 in every run here); a handful of store calls
	// timing out on a loaded CI machine is not an interruption.
	if othersBad*200 > others {
		t.Errorf("%d of %d decisions for tenants on healthy masters were not made by the store", othersBad, others)
	}
	if lostFallback == 0 {
		t.Error("the lost master's tenants never left the store: the kill tested nothing")
	}
	if recovered > 15*time.Second {
		t.Errorf("the lost master's tenants were decided by the store again only after %v, want within 15 s", recovered)
	}
}

// TestReshardUnderLoad moves 1,000 slots from one master to another with
// redis-cli --cluster reshard while takes run on keys in every slot range:
// no caller sees an error (the client follows MOVED and ASK) and every
// take is decided by the store.
func TestReshardUnderLoad(t *testing.T) {
	cl, st := startCluster(t, 0)
	id := func(n *redistest.Server) string {
		s, err := redistest.Do(n.Addr, "CLUSTER", "MYID")
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	from, to := id(cl.Nodes[0]), id(cl.Nodes[1])
	before := servedSlots(t, cl, to)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var calls int
	var errs []error
	for w := range 8 {
		wg.Go(func() {
			for i := w; ; i += 8 {
				select {
				case <-stop:
					return
				default:
				}
				var res store.Result
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				err := st.Take(ctx, []store.Check{{Key: fmt.Sprint("reshard-", i%2000), Limit: algo.Limit{Limit: 1000, Period: time.Second}, Cost: 1}}, &res)
				cancel()
				mu.Lock()
				calls++
				if err != nil {
					errs = append(errs, err)
				}
				mu.Unlock()
			}
		})
	}
	time.Sleep(300 * time.Millisecond)
	cmd := exec.Command("redis-cli", "--cluster", "reshard", cl.Nodes[0].Addr, "--cluster-from", from, "--cluster-to", to, "--cluster-slots", "1000", "--cluster-yes")
	out, err := cmd.CombinedOutput()
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatalf("reshard: %v: %s", err, out)
	}
	if len(errs) > 0 {
		t.Fatalf("%d of %d takes failed during the resharding, the first: %v", len(errs), calls, errs[0])
	}
	if after := servedSlots(t, cl, to); after != before+1000 {
		t.Fatalf("the target serves %d slots after the resharding, want %d + 1000", after, before)
	}
	t.Logf("%d takes while 1,000 slots moved: no error", calls)
}

// servedSlots counts the slots node id serves, by CLUSTER NODES.
func servedSlots(t *testing.T, cl *redistest.Cluster, id string) int {
	t.Helper()
	nodes, err := exec.Command("redis-cli", "-p", strconv.Itoa(cl.Nodes[1].Port), "CLUSTER", "NODES").Output()
	if err != nil {
		t.Fatal(err)
	}
	served := 0
	for _, line := range strings.Split(string(nodes), "\n") {
		f := strings.Fields(line)
		if len(f) < 9 || f[0] != id {
			continue
		}
		for _, r := range f[8:] {
			lo, hi, ok := strings.Cut(r, "-")
			a, _ := strconv.Atoi(lo)
			b := a
			if ok {
				b, _ = strconv.Atoi(hi)
			}
			served += b - a + 1
		}
	}
	return served
}

// startCluster starts a cluster of 3 masters with replicas each and a
// store on it, both closed when the test ends.
func startCluster(t *testing.T, replicas int, extra ...string) (*redistest.Cluster, *redisstore.Store) {
	t.Helper()
	redistest.Need(t)
	cl, err := redistest.StartCluster(3, replicas, extra...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	st, err := redisstore.New(redisstore.Config{URL: "redis-cluster://" + strings.Join(cl.Addrs(), ",")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return cl, st
}
