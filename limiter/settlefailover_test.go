package limiter_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/internal/redistest"
	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/store"
	"github.com/fairgate/fairgate/store/redisstore"
)

// The history of TestSettleOnceUnderFailover: per tenant, the takes,
// settlement calls and final read of its counting layer, each with its
// call and return time, checked with porcupine against a sequential
// model in which each settlement id is applied once at most.

// foKind is what an operation of the history did.
type foKind uint8

const (
	foTake   foKind = iota // Decide: an estimate charged
	foSettle               // Limiter.Settle: one call, retries by the guard included
	foRead                 // a take of cost 0: the count as it stands
)

// foInput is an operation's input.
type foInput struct {
	kind foKind
	// units: a take's estimate, a settlement's delta (true − estimate).
	units int64
	// sid numbers a settlement within its tenant (its id's index).
	sid int
}

// foOutput is an operation's answer. known is false when the call
// failed: a take decided unavailable, a settlement that returned an
// error. Such a call may have run in the store all the same (one that
// timed out on a paused server runs when it resumes), at any time after
// it was made: it is given an infinite return time.
type foOutput struct {
	known     bool
	allowed   bool  // a take: admitted
	repeated  bool  // a settlement: its id had been applied
	remaining int64 // the counting layer's remaining after the call
}

// foState is the model's state: the count of the layer and the set of
// settlements applied, one bit per sid.
type foState struct {
	count   int64
	applied [16]uint64
}

func (s foState) has(sid int) bool { return s.applied[sid/64]&(1<<(sid%64)) != 0 }

func (s foState) with(sid int) foState {
	s.applied[sid/64] |= 1 << (sid % 64)
	return s
}

// foMaxSettlements bounds a tenant's settlements (the state's bits).
const foMaxSettlements = 16 * 64

// foModel is the counting layer under limit: a take admitted adds its
// units; a settlement adds its delta and is recorded if it was not
// applied yet, and adds nothing if it was; every known answer's
// remaining is limit − count. A settlement answered applied must not
// have been applied before; one answered Repeated may not have been
// either: Limiter.Settle retries a store call that timed out with the
// same id, and when the first call had run, the retry finds it applied
// and the settlement is answered Repeated, applied by this very call. A
// failed call either did nothing or did what it would have.
func foModel(limit int64) porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Partition: func(ops []porcupine.Operation) [][]porcupine.Operation {
			by := map[int][]porcupine.Operation{}
			var order []int
			for _, op := range ops {
				if _, ok := by[op.ClientId]; !ok {
					order = append(order, op.ClientId)
				}
				by[op.ClientId] = append(by[op.ClientId], op)
			}
			var out [][]porcupine.Operation
			for _, c := range order {
				out = append(out, by[c])
			}
			return out
		},
		Init: func() []interface{} { return []interface{}{foState{}} },
		Step: func(state, input, output interface{}) []interface{} {
			s, in, out := state.(foState), input.(foInput), output.(foOutput)
			next := s
			switch in.kind {
			case foTake:
				if !out.known {
					return []interface{}{s, foState{count: s.count + in.units, applied: s.applied}}
				}
				if out.allowed {
					next.count += in.units
				}
			case foSettle:
				if !out.known {
					if s.has(in.sid) {
						return []interface{}{s}
					}
					return []interface{}{s, foState{count: s.count + in.units, applied: s.with(in.sid).applied}}
				}
				// Repeated means the id had been applied when the
				// call's last store call ran: by an earlier call, or by
				// this one's own first store call, which timed out
				// after it ran (the guard retries with the same id).
				if !out.repeated && s.has(in.sid) {
					return nil
				}
				if !s.has(in.sid) {
					next = s.with(in.sid)
					next.count += in.units
				}
			}
			if out.remaining != limit-next.count {
				return nil
			}
			return []interface{}{next}
		},
		DescribeOperation: func(input, output interface{}) string {
			in, out := input.(foInput), output.(foOutput)
			answer := fmt.Sprintf("-> remaining %d", out.remaining)
			if !out.known {
				answer = "-> failed"
			}
			switch in.kind {
			case foTake:
				return fmt.Sprintf("take %d %s (admitted %v)", in.units, answer, out.allowed)
			case foSettle:
				return fmt.Sprintf("settle #%d %+d %s (repeated %v)", in.sid, in.units, answer, out.repeated)
			}
			return "read " + answer
		},
	}
	return nm.ToModel()
}

// TestSettleOnceUnderFailover: settlements are applied exactly once
// while the store fails. Two limiters (two fairgate instances) on one
// store decide and settle measured-cost requests of 8 tenants, one client
// each, while the Redis (on Cluster: the master of some tenants' keys)
// is paused for 1 s (calls time out, and those it had received run when
// it resumes: the ambiguous case) and then killed and restarted from its
// append-only file (with appendfsync always, so that what it
// acknowledged survives; a replica promoted after a crash can lose the
// last writes, which no id can bring back). A settlement whose call
// fails is settled again with the same decision, from both instances at
// once, until one answers. The history of every call on each tenant's
// counting layer (a fixed window that never fills, so that it counts
// every unit booked) must be linearizable under a model in which a
// settlement applies at most once, and in the end every settlement has
// been answered, applied or found applied; the calls that failed are
// those fairgate_settlements_total{result="failed"} counts.
func TestSettleOnceUnderFailover(t *testing.T) {
	for _, name := range []string{"redis", "cluster"} {
		t.Run(name, func(t *testing.T) {
			redistest.Need(t)
			t.Parallel()
			durable := []string{"--appendonly", "yes", "--appendfsync", "always"}
			var url string
			var victim *redistest.Server
			if name == "redis" {
				srv, err := redistest.Start(durable...)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(srv.Close)
				url, victim = "redis://"+srv.Addr, srv
			} else {
				cl, err := redistest.StartCluster(3, 0, append(durable, "--cluster-require-full-coverage", "no")...)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(cl.Close)
				url, victim = "redis-cluster://"+strings.Join(cl.Addrs(), ","), cl.Nodes[0]
			}
			settleUnderFailover(t, url, victim, name == "cluster")
		})
	}
}

func settleUnderFailover(t *testing.T, url string, victim *redistest.Server, cluster bool) {
	const limit = algo.MaxCount
	day := 24 * time.Hour
	dayUs := int64(day / time.Microsecond)
	off := time.Duration(((time.Now().Add(-12*time.Hour).UnixMicro()%dayUs)+dayUs)%dayUs) * time.Microsecond
	pol := policy.Policy{
		Plans: map[string]policy.Plan{"p": {Name: "p", Rules: []policy.Rule{
			{Name: "rate", Limit: algo.Limit{Limit: 1_000_000, Period: time.Second}},
			{Name: "count", Limit: algo.Limit{Limit: limit, Period: day, Algorithm: algo.FixedWindow, Offset: off}},
		}}},
		DefaultPlan: "p", DefaultClass: "llm",
		Classes: map[string]policy.Class{"llm": {Name: "llm", Share: 1, Fail: policy.FailClosed, NoNearCache: true, Cost: &policy.MeasuredCost{
			Unit: "tokens", Estimate: policy.Estimate{Default: 100, Cap: 10_000}, Measure: policy.Measure{JSON: "usage.total_tokens"}}}},
	}
	var stores []*redisstore.Store
	var lims []*limiter.Limiter
	for range 2 {
		st, err := redisstore.New(redisstore.Config{URL: url, Prefix: "fo:"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		l, err := limiter.New(limiter.Config{Store: st, Policy: pol, BreakerCooldown: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		stores, lims = append(stores, st), append(lims, l)
	}
	// The tenants, and the key of each one's counting layer. On Cluster,
	// half of them on the victim's slots.
	countKey := func(tenant string) (string, algo.Limit) {
		res, err := lims[0].Snapshot().Resolve(policy.Request{Tenant: tenant, Class: "llm", Settles: true}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return res.Layers[1].Key, res.Layers[1].Limit
	}
	var tenants []string
	onVictim := 0
	for i := 0; len(tenants) < 8; i++ {
		tn := fmt.Sprint("tenant-", i)
		if cluster {
			// The victim answers a GET of a key it serves; of any other, MOVED.
			key, _ := countKey(tn)
			_, err := redistest.Do(victim.Addr, "GET", stores[0].Key(algo.FixedWindow, key))
			if mine := err == nil; mine && onVictim == 4 || !mine && len(tenants)-onVictim == 4 {
				continue
			} else if mine {
				onVictim++
			}
		}
		tenants = append(tenants, tn)
	}

	// up is closed while the store is meant to be up; a client whose
	// call failed waits on it before it calls again.
	var upMu sync.Mutex
	up := make(chan struct{})
	close(up)
	setDown := func() {
		upMu.Lock()
		up = make(chan struct{})
		upMu.Unlock()
	}
	setUp := func() {
		upMu.Lock()
		close(up)
		upMu.Unlock()
	}
	waitUp := func() {
		upMu.Lock()
		c := up
		upMu.Unlock()
		<-c
		time.Sleep(20 * time.Millisecond)
	}

	start := time.Now()
	clock := func() int64 { return time.Since(start).Nanoseconds() }
	var mu sync.Mutex
	var ops []porcupine.Operation
	record := func(c int, in foInput, call int64, out foOutput) {
		ret := clock()
		if !out.known {
			ret = math.MaxInt64
		}
		mu.Lock()
		ops = append(ops, porcupine.Operation{ClientId: c, Input: in, Call: call, Output: out, Return: ret})
		mu.Unlock()
	}
	countOf := func(layers []limiter.SettledLayer) int64 {
		for _, x := range layers {
			if strings.HasSuffix(x.Policy, ".count") {
				return x.Remaining
			}
		}
		t.Errorf("no count layer in %+v", layers)
		return 0
	}
	var settleCalls, settleFailed, settlements atomic.Int64
	// settle settles d at trueCost until a call answers: from instance
	// i, and after a failure from both at once, with the same decision.
	settle := func(c, sid int, d *limiter.Decision, trueCost int64, i int) {
		in := foInput{kind: foSettle, units: trueCost - d.Settlement.Cost, sid: sid}
		call := func(l *limiter.Limiter) bool {
			at := clock()
			out, err := l.Settle(context.Background(), d, trueCost)
			settleCalls.Add(1)
			if err != nil {
				settleFailed.Add(1)
				record(c, in, at, foOutput{})
				return false
			}
			record(c, in, at, foOutput{known: true, repeated: out.Repeated, remaining: countOf(out.Layers)})
			return true
		}
		if call(lims[i]) {
			return
		}
		for first := time.Now(); ; {
			if time.Since(first) > store.SettleIDLifetime/4 {
				t.Errorf("%s's settlement %d: no call answered in %v", tenants[c], sid, store.SettleIDLifetime/4)
				return
			}
			waitUp()
			var wg sync.WaitGroup
			var answered atomic.Bool
			for _, l := range lims {
				wg.Go(func() {
					if call(l) {
						answered.Store(true)
					}
				})
			}
			wg.Wait()
			if answered.Load() {
				return
			}
		}
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for c, tn := range tenants {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), 36))
			for sid := 0; ; {
				select {
				case <-stop:
					return
				default:
				}
				if sid == foMaxSettlements {
					return
				}
				i := rng.IntN(2)
				est, trueCost := 1+rng.Int64N(2000), rng.Int64N(3000)
				at := clock()
				d, err := lims[i].Decide(context.Background(), policy.Request{Tenant: tn, Class: "llm", Cost: est, HasCost: true, Settles: true})
				if err != nil {
					t.Error(err)
					return
				}
				in := foInput{kind: foTake, units: est}
				switch {
				case d.Allowed && d.Settlement != nil:
					record(c, in, at, foOutput{known: true, allowed: true, remaining: d.Layers[1].Remaining})
				case d.Reason == limiter.ReasonUnavailable:
					record(c, in, at, foOutput{})
					waitUp()
					continue
				default:
					t.Errorf("%s: %+v", tn, d)
					return
				}
				time.Sleep(time.Duration(rng.IntN(10)) * time.Millisecond) // the answer streams
				settlements.Add(1)
				settle(c, sid, &d, trueCost, i)
				sid++
			}
		})
	}
	// The failures: a pause of 1 s, then a crash and a restart.
	time.Sleep(600 * time.Millisecond)
	setDown()
	if err := victim.Pause(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if err := victim.Resume(); err != nil {
		t.Fatal(err)
	}
	setUp()
	time.Sleep(600 * time.Millisecond)
	setDown()
	victim.Kill()
	time.Sleep(400 * time.Millisecond)
	if err := victim.Restart(); err != nil {
		t.Fatal(err)
	}
	for cluster {
		// A cluster node answers CLUSTERDOWN until it has met the
		// others again.
		if info, err := redistest.Do(victim.Addr, "CLUSTER", "INFO"); err == nil && strings.Contains(info, "cluster_state:ok") {
			break
		}
		if time.Since(start) > time.Minute {
			t.Fatal("the restarted node did not rejoin the cluster within a minute")
		}
		time.Sleep(20 * time.Millisecond)
	}
	setUp()
	time.Sleep(600 * time.Millisecond)
	close(stop)
	wg.Wait()
	// The count as it stands, read last with a take of cost 0.
	for c, tn := range tenants {
		key, lim := countKey(tn)
		at := clock()
		var res store.Result
		if err := stores[0].Take(context.Background(), []store.Check{{Key: key, Limit: lim}}, &res); err != nil {
			t.Fatalf("read %s: %v", tn, err)
		}
		record(c, foInput{kind: foRead}, at, foOutput{known: true, remaining: res.Decisions[0].Remaining})
	}

	// Every settlement was answered, and the failed calls are those the
	// metrics count.
	var failedMetric, appliedMetric int64
	for _, l := range lims {
		s := l.Guard().Stats()
		failedMetric += s.SettlementsFailed
		appliedMetric += s.SettlementsApplied
	}
	if failedMetric != settleFailed.Load() || appliedMetric != settleCalls.Load()-settleFailed.Load() {
		t.Errorf("fairgate_settlements_total: %d failed, %d applied; the calls: %d failed of %d", failedMetric, appliedMetric, settleFailed.Load(), settleCalls.Load())
	}
	// Each settlement answered applied once at most, or found applied
	// after calls that failed: one of those ran (the ambiguous case).
	type sidOf [2]int // tenant, settlement
	applied, failed := map[sidOf]int{}, map[sidOf]bool{}
	for _, op := range ops {
		in, out := op.Input.(foInput), op.Output.(foOutput)
		if in.kind != foSettle {
			continue
		}
		k := sidOf{op.ClientId, in.sid}
		switch {
		case !out.known:
			failed[k] = true
		case !out.repeated:
			applied[k]++
		}
	}
	ranFailed := 0
	for k := range failed {
		if applied[k] == 0 {
			ranFailed++
		}
	}
	for k, n := range applied {
		if n > 1 {
			t.Errorf("%s's settlement %d was answered applied %d times", tenants[k[0]], k[1], n)
		}
	}
	if settleFailed.Load() == 0 {
		t.Fatal("no settlement call failed: the failures tested nothing")
	}
	t.Logf("%d settlements of %d tenants, %d calls, %d of them failed; %d settlements had a failed call, %d of them were applied by it (a retry found them applied); %d operations in the history",
		settlements.Load(), len(tenants), settleCalls.Load(), settleFailed.Load(), len(failed), ranFailed, len(ops))

	model := foModel(limit)
	// The checker is not vacuous: the history with one settlement's
	// answer as if it had been applied twice is refused.
	for i, op := range ops {
		in, out := op.Input.(foInput), op.Output.(foOutput)
		if in.kind == foSettle && out.known && !out.repeated && in.units != 0 {
			bad := append([]porcupine.Operation(nil), ops...)
			out.remaining -= in.units
			bad[i].Output = out
			if porcupine.CheckOperationsTimeout(model, bad, 30*time.Second) != porcupine.Illegal {
				t.Fatal("a settlement applied twice passed the check")
			}
			break
		}
	}
	res, info := porcupine.CheckOperationsVerbose(model, ops, 60*time.Second)
	switch res {
	case porcupine.Ok:
	case porcupine.Unknown:
		t.Fatalf("the checker timed out on %d operations", len(ops))
	default:
		file := filepath.Join(t.TempDir(), "settle-history.html")
		if f, err := os.Create(file); err == nil {
			porcupine.Visualize(model, info, f)
			f.Close()
		}
		for c := range tenants {
			var part []porcupine.Operation
			for _, op := range ops {
				if op.ClientId == c {
					part = append(part, op)
				}
			}
			if porcupine.CheckOperations(model, part) {
				continue
			}
			slices.SortFunc(part, func(a, b porcupine.Operation) int { return cmpInt(a.Call, b.Call) })
			for _, op := range part {
				ret := "inf"
				if op.Return != math.MaxInt64 {
					ret = fmt.Sprint(op.Return / 1000)
				}
				t.Logf("%s [%d µs, %s] %s", tenants[c], op.Call/1000, ret, model.DescribeOperation(op.Input, op.Output))
			}
			break
		}
		t.Fatalf("the history is not linearizable with each settlement applied once (%d operations; visualisation in %s)", len(ops), file)
	}
}
