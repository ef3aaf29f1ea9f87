package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/internal/redistest"
	"github.com/fairgate/fairgate/internal/testenv"
	"github.com/fairgate/fairgate/store"
	"github.com/fairgate/fairgate/store/guard"
)

// reshardNode is one master of the test's cluster, reached alone for the
// migration's commands.
type reshardNode struct {
	port int
	id   string
	c    rueidis.Client
}

// do runs one command on the node and fails t if it errs.
func (n *reshardNode) do(t *testing.T, args ...string) rueidis.RedisResult {
	t.Helper()
	r := n.c.Do(context.Background(), n.c.B().Arbitrary(args...).Build())
	if err := r.Error(); err != nil {
		t.Fatalf("node %d: %s: %v", n.port, strings.Join(args, " "), err)
	}
	return r
}

// moveSlot moves slot from src to dst as `redis-cli --cluster reshard`
// does (clusterManagerMoveSlot, with its pipeline of 10 keys): IMPORTING
// on dst, MIGRATING on src, the keys in batches of GETKEYSINSLOT + MIGRATE
// … KEYS, then the owner set on every master in turn (src before dst when
// src comes first: until dst hears of it, each sends a MOVED to the other).
// It calls migrating once the slot is MIGRATING, and between the steps
// lets the workload make progress, so that calls meet each state of the
// slot.
func moveSlot(t *testing.T, slot uint16, src, dst *reshardNode, all []*reshardNode, migrating, progress func()) (moved int) {
	t.Helper()
	sl := strconv.Itoa(int(slot))
	dst.do(t, "CLUSTER", "SETSLOT", sl, "IMPORTING", src.id)
	src.do(t, "CLUSTER", "SETSLOT", sl, "MIGRATING", dst.id)
	migrating()
	progress()
	for {
		keys, err := src.do(t, "CLUSTER", "GETKEYSINSLOT", sl, "10").AsStrSlice()
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) == 0 {
			break
		}
		src.do(t, append([]string{"MIGRATE", "127.0.0.1", strconv.Itoa(dst.port), "", "0", "5000", "KEYS"}, keys...)...)
		moved += len(keys)
		progress()
	}
	for _, n := range all {
		n.do(t, "CLUSTER", "SETSLOT", sl, "NODE", dst.id)
		progress()
	}
	return moved
}

// reshardTally counts a workload's calls and its errors by kind.
type reshardTally struct {
	calls atomic.Int64
	mu    sync.Mutex
	errs  map[string]int
}

func (ta *reshardTally) note(err error) {
	ta.calls.Add(1)
	if err == nil {
		return
	}
	kind := "other: " + err.Error()
	for _, k := range []string{"TRYAGAIN until the call's deadline", "TRYAGAIN", "MOVED", "ASK", "NOSCRIPT", "CLUSTERDOWN", "breaker open", "deadline exceeded"} {
		if strings.Contains(err.Error(), k) {
			kind = k
			break
		}
	}
	ta.mu.Lock()
	if ta.errs == nil {
		ta.errs = map[string]int{}
	}
	ta.errs[kind]++
	ta.mu.Unlock()
}

// waited counts the calls that timed out waiting out TRYAGAIN.
func (ta *reshardTally) waited() int {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	return ta.errs["TRYAGAIN until the call's deadline"]
}

func (ta *reshardTally) errors() (n int, s string) {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	for _, c := range ta.errs {
		n += c
	}
	return n, fmt.Sprint(ta.errs)
}

// TestReshardWhileServing: a real 3-master Redis Cluster has three slots
// moved from master to master and back (redis-cli's way: IMPORTING and
// MIGRATING, MIGRATE in batches of 10 keys, then the owner set on every
// master), five times each, while goroutines decide on keys in those
// slots through a guard: single checks on hot keys (coalesced), batches
// of two checks in one slot, batches over two slots (reserve, then refund
// when one part rejects), settlements replayed with their id, and
// concurrency slots of two keys. Every call gets an answer: no error
// reaches a caller and no breaker opens. After the migrations, each key
// drained to a reject has admitted exactly its limit (limits of a day,
// the test lasts seconds): the moves lost no state and no decision, and
// admitted nothing extra; what a batch admitted is charged exactly once to
// each of its keys, refunds included; a settlement id applies once
// whichever node it meets; every key lives on the slot's last owner with
// its expiry.
func TestReshardWhileServing(t *testing.T) {
	url, nodes := startReshardCluster(t)
	s := open(t, url)
	var logs testenv.SyncBuffer
	// A deadline far above a call's time, so that only the migration can
	// fail a call, not a slow test machine.
	g, err := guard.New(guard.Config{Store: s, Timeout: 2 * time.Second, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}

	// The three slots, each first on a master of its own.
	tags := [3]string{}
	slots := [3]uint16{}
	owner := [3]int{}
	for i, n := 0, 0; i < 3; n++ {
		tag := "r" + strconv.Itoa(n)
		sl := slot(tag)
		o := ownerOf(t, nodes, sl)
		if o != i {
			continue
		}
		tags[i], slots[i], owner[i] = tag, sl, o
		i++
	}
	key := func(i int, name string, round int) string {
		return fmt.Sprintf("{%s}%s:%d", tags[i], name, round)
	}

	const day = 24 * time.Hour
	// A fixed window in force for the next 12 hours at least.
	offset := time.Duration(time.Now().Add(-day/2).UnixMicro()%day.Microseconds()) * time.Microsecond
	hotLim := algo.Limit{Limit: 50, Period: day}
	aLim := algo.Limit{Limit: 30, Period: day, Algorithm: algo.FixedWindow, Offset: offset}
	bLim := algo.Limit{Limit: 60, Period: day}
	xLim := algo.Limit{Limit: 25, Period: day, Algorithm: algo.TokenBucket}
	y1Lim := algo.Limit{Limit: 50, Period: day}
	y2Lim := algo.Limit{Limit: 50, Period: day, Algorithm: algo.SlidingLog}
	settleLim := algo.Limit{Limit: 1_000_000, Period: day, Algorithm: algo.FixedWindow, Offset: offset}
	// The workload of round r, from the moment the r-th move sets its
	// slot MIGRATING to the next: on keys of its own, so that each round's
	// keys take their admissions while the slots move, and are first
	// written during a migration.
	hot := func(r int) []store.Check {
		return []store.Check{{Key: key(0, "hot", r), Limit: hotLim, Cost: 1}}
	}
	hot2 := func(r int) []store.Check { // another key of slot 0, coalesced with hot
		return []store.Check{{Key: key(0, "hot2", r), Limit: hotLim.With(algo.TokenBucket), Cost: 1}}
	}
	batch := func(r int) []store.Check {
		return []store.Check{{Key: key(1, "a", r), Limit: aLim, Cost: 1}, {Key: key(1, "b", r), Limit: bLim, Cost: 1}}
	}
	cross := func(r int) []store.Check {
		return []store.Check{{Key: key(1, "x", r), Limit: xLim, Cost: 1}, {Key: key(2, "y1", r), Limit: y1Lim, Cost: 1}, {Key: key(2, "y2", r), Limit: y2Lim, Cost: 1}}
	}
	settleKey := key(2, "s", 0)
	concKeys := []store.SlotAcquire{{Key: key(0, "conc", 0), Limit: 3}, {Key: key(0, "conc2", 0), Limit: 2}}

	const rounds = 15 // five moves of each slot
	var round atomic.Int64
	admitted := map[string]*[rounds]atomic.Int64{"hot": {}, "hot2": {}, "batch": {}, "cross": {}}
	var takes, settles, concs reshardTally
	var settled, repeatsApplied, concOver atomic.Int64
	var holders [2]atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	stopWorkers := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopWorkers() // before the clients close, should the test end early
	worker := func(f func(ctx context.Context, r int)) {
		wg.Go(func() {
			ctx := context.Background()
			for {
				select {
				case <-stop:
					return
				default:
				}
				f(ctx, int(round.Load()))
			}
		})
	}
	take := func(name string, checks func(int) []store.Check) func(context.Context, int) {
		return func(ctx context.Context, r int) {
			var res store.Result
			err := g.Call(ctx, time.Now(), checks(r), &res)
			takes.note(err)
			if err == nil && res.Allowed {
				admitted[name][r].Add(1)
			}
		}
	}
	for range 4 {
		worker(take("hot", hot))
		worker(take("hot2", hot2))
	}
	for range 2 {
		worker(take("batch", batch))
		worker(take("cross", cross))
	}
	var ids, leases atomic.Int64
	for range 2 {
		worker(func(ctx context.Context, _ int) {
			n := ids.Add(1)
			id := fmt.Sprintf("reshard-%d", n)
			adjs := []store.Adjustment{{Key: settleKey, Limit: settleLim, Delta: 1 + n%3}}
			var res store.SettleResult
			err := g.Settle(ctx, id, adjs, &res)
			settles.note(err)
			if err != nil {
				return
			}
			if !res.Settled[0].Repeated {
				settled.Add(res.Settled[0].Applied)
			}
			// The same id again, maybe on the slot's next owner: applies nothing.
			err = g.Settle(ctx, id, adjs, &res)
			settles.note(err)
			if err == nil && (!res.Settled[0].Repeated || res.Settled[0].Applied != 0) {
				repeatsApplied.Add(1)
			}
		})
		worker(func(ctx context.Context, _ int) {
			id := fmt.Sprintf("lease-%d", leases.Add(1))
			rs := make([]store.SlotResult, len(concKeys))
			err := g.AcquireSlots(ctx, id, time.Minute, concKeys, rs)
			concs.note(err)
			if err != nil {
				return
			}
			for i, r := range rs {
				if r.InUse > concKeys[i].Limit {
					concOver.Add(1)
				}
				if r.Acquired && holders[i].Add(1) > concKeys[i].Limit {
					concOver.Add(1)
				}
			}
			runtime.Gosched()
			for i, r := range rs {
				if r.Acquired {
					holders[i].Add(-1)
				}
			}
			concs.note(g.ReleaseSlots(ctx, id, []string{concKeys[0].Key, concKeys[1].Key}))
		})
	}

	// progress waits until the workload has made 20 more calls.
	progress := func() {
		for from := takes.calls.Load(); takes.calls.Load() < from+20; {
			time.Sleep(100 * time.Microsecond)
		}
	}
	before := redisStats(t, nodes)
	start := time.Now()
	moves, movedKeys := 0, 0
	var longest time.Duration // the longest move: how long TRYAGAIN could last
	for pass := range rounds / 3 {
		for i, sl := range slots {
			dst := (owner[i] + 1) % 3
			if pass%2 == 1 {
				dst = (owner[i] + 2) % 3 // back
			}
			began := time.Now()
			movedKeys += moveSlot(t, sl, nodes[owner[i]], nodes[dst], nodes, func() { round.Store(int64(moves)) }, progress)
			longest = max(longest, time.Since(began))
			owner[i] = dst
			moves++
		}
	}
	stopWorkers()
	moving := time.Since(start)
	var duringMoves int64
	for _, a := range admitted {
		for r := range a {
			duringMoves += a[r].Load()
		}
	}

	// Drain every round's keys to a reject, outside the migrations: each
	// must then have admitted exactly its limit.
	ctx := context.Background()
	drain := func(name string, checks []store.Check, r int) int64 {
		for {
			var res store.Result
			if err := s.Take(ctx, checks, &res); err != nil {
				t.Fatalf("drain %s: %v", name, err)
			}
			if !res.Allowed {
				return admitted[name][r].Load()
			}
			admitted[name][r].Add(1)
		}
	}
	peek := func(c store.Check) int64 {
		c.Cost = 0
		var res store.Result
		if err := s.Take(ctx, []store.Check{c}, &res); err != nil {
			t.Fatal(err)
		}
		return res.Decisions[0].Remaining
	}
	var total, totalLimit int64
	for r := range rounds {
		for _, d := range []struct {
			name   string
			checks []store.Check
			limit  int64
		}{{"hot", hot(r), hotLim.Limit}, {"hot2", hot2(r), hotLim.Limit}, {"batch", batch(r), aLim.Limit}, {"cross", cross(r), xLim.Limit}} {
			got := drain(d.name, d.checks, r)
			total, totalLimit = total+got, totalLimit+d.limit
			if got != d.limit {
				t.Errorf("round %d, %s: admitted %d, want the limit %d", r, d.name, got, d.limit)
			}
		}
		// A batch is charged to each of its keys once; a cross-slot batch
		// that one part rejected is refunded in the others.
		if got, want := peek(batch(r)[1]), bLim.Limit-aLim.Limit; got != want {
			t.Errorf("round %d: %s has %d remaining, want %d", r, batch(r)[1].Key, got, want)
		}
		for _, c := range cross(r)[1:] {
			if got, want := peek(c), c.Limit.Limit-xLim.Limit; got != want {
				t.Errorf("round %d: %s has %d remaining, want %d", r, c.Key, got, want)
			}
		}
	}
	if got, want := peek(store.Check{Key: settleKey, Limit: settleLim}), settleLim.Limit-settled.Load(); got != want {
		t.Errorf("settled key has %d remaining, want %d (%d units settled)", got, want, settled.Load())
	}
	if n := repeatsApplied.Load(); n != 0 {
		t.Errorf("%d settlements replayed with their id applied again", n)
	}
	if n := concOver.Load(); n != 0 {
		t.Errorf("concurrency slots held beyond their limit %d times", n)
	}

	// Every key of the three slots lives on the slot's last owner, with
	// its expiry.
	keys := 0
	for i, sl := range slots {
		if o := ownerOf(t, nodes, sl); o != owner[i] {
			t.Errorf("slot %d is on master %d, want %d", sl, o, owner[i])
		}
		for j, n := range nodes {
			cnt, err := n.do(t, "CLUSTER", "COUNTKEYSINSLOT", strconv.Itoa(int(sl))).AsInt64()
			if err != nil {
				t.Fatal(err)
			}
			if j != owner[i] && cnt != 0 {
				t.Errorf("master %d holds %d keys of slot %d, which it gave away", j, cnt, sl)
			}
		}
		n := nodes[owner[i]]
		ks, err := n.do(t, "CLUSTER", "GETKEYSINSLOT", strconv.Itoa(int(sl)), "100000").AsStrSlice()
		if err != nil {
			t.Fatal(err)
		}
		keys += len(ks)
		for _, k := range ks {
			ttl, err := n.do(t, "PTTL", k).AsInt64()
			if err != nil {
				t.Fatal(err)
			}
			if ttl <= 0 {
				t.Errorf("key %s on its last owner has PTTL %d, want an expiry", k, ttl)
			}
			if strings.Contains(k, "s:{") && ttl > store.SettleIDLifetime.Milliseconds() {
				t.Errorf("settlement record %s has PTTL %d ms, past its lifetime", k, ttl)
			}
		}
	}
	// The first settlement's id record, made as the moves began and moved
	// with its slot up to five times, kept its expiry.
	k := s.settleKey("reshard-1", slots[2])
	ttl, err := nodes[owner[2]].do(t, "PTTL", k).AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	if least := (store.SettleIDLifetime - time.Since(start) - time.Second).Milliseconds(); ttl < least {
		t.Errorf("first settlement's record %s: PTTL %d ms, want at least %d", k, ttl, least)
	}

	bs, _ := g.Breakers()
	opened := strings.Count(logs.String(), "breaker open")
	if bs.NotClosed != 0 || opened != 0 {
		t.Errorf("breakers: %d not closed at the end, %d opened during the moves", bs.NotClosed, opened)
	}
	for _, ta := range []struct {
		name string
		t    *reshardTally
	}{{"takes", &takes}, {"settlements", &settles}, {"concurrency slots", &concs}} {
		// A call waits out TRYAGAIN for its deadline and tryAgainWait at
		// most: only a move that lasted longer (a machine starved of CPU
		// while the test runs) may time one out.
		n, kinds := ta.t.errors()
		if waited := ta.t.waited(); waited > 0 && longest > tryAgainWait {
			t.Logf("%s: %d of %d calls timed out waiting out TRYAGAIN; the longest move took %v", ta.name, waited, ta.t.calls.Load(), longest.Round(time.Millisecond))
			n -= waited
		}
		if n != 0 {
			t.Errorf("%s: %d of %d calls failed: %s (the longest move took %v)", ta.name, n, ta.t.calls.Load(), kinds, longest.Round(time.Millisecond))
		}
	}
	t.Logf("Redis replied, on all masters, before the moves: %s; at the end: %s", before, redisStats(t, nodes))
	t.Logf("%d slot moves (%d keys migrated) in %v; %d takes, %d settlement calls (%d units, %d retried by the guard), %d concurrency slot calls; admitted %d during the moves, %d in all of a total limit %d; %d keys on the last owners",
		moves, movedKeys, moving.Round(time.Millisecond), takes.calls.Load(), settles.calls.Load(), settled.Load(), g.Stats().SettlementRetries, concs.calls.Load(), duringMoves, total, totalLimit, keys)
}

// startReshardCluster starts a 3-master cluster of the test's own (the
// package's shared one is not to be resharded) and returns its URL and
// its masters.
func startReshardCluster(t *testing.T) (string, []*reshardNode) {
	t.Helper()
	redistest.Need(t)
	cl, err := redistest.StartCluster(3, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	var nodes []*reshardNode
	for _, n := range cl.Nodes {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{n.Addr}, ForceSingleClient: true, DisableCache: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		rn := &reshardNode{port: n.Port, c: c}
		if rn.id, err = rn.do(t, "CLUSTER", "MYID").ToString(); err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, rn)
	}
	return "redis-cluster://" + strings.Join(cl.Addrs(), ","), nodes
}

// TestReshardStuckMigration: a slot left half-migrated (redis-cli stopped
// between two MIGRATEs: the slot MIGRATING on its master and IMPORTING on
// another, one of a batch's two keys moved) answers a call of both keys
// TRYAGAIN for as long as it stays so. The store tries such a call again
// until its deadline and then fails it as a timeout (store.ErrUnavailable
// and context.DeadlineExceeded), so the slot's breaker, which opens after
// 5 failures in a row that are not timeouts, stays closed through 10 of
// them; calls of one key are decided meanwhile (the moved key's through
// ASK), and once the migration is finished the batch is decided, each
// key charged once for each call that answered.
func TestReshardStuckMigration(t *testing.T) {
	url, nodes := startReshardCluster(t)
	s := open(t, url)
	g, err := guard.New(guard.Config{Store: s, Timeout: 30 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	lim := algo.Limit{Limit: 10, Period: 24 * time.Hour}
	batch := []store.Check{{Key: "{stuck}a", Limit: lim, Cost: 1}, {Key: "{stuck}b", Limit: lim, Cost: 1}}
	var res store.Result
	if err := s.Take(ctx, batch, &res); err != nil || !res.Allowed {
		t.Fatalf("batch before the migration: %+v, %v", res, err)
	}
	sl := slot("stuck")
	src := ownerOf(t, nodes, sl)
	dst := (src + 1) % 3
	slArg := strconv.Itoa(int(sl))
	nodes[dst].do(t, "CLUSTER", "SETSLOT", slArg, "IMPORTING", nodes[src].id)
	nodes[src].do(t, "CLUSTER", "SETSLOT", slArg, "MIGRATING", nodes[dst].id)
	nodes[src].do(t, "MIGRATE", "127.0.0.1", strconv.Itoa(nodes[dst].port), "", "0", "5000", "KEYS", s.Key(algo.GCRA, batch[0].Key))

	notTimeouts := 0
	for range 10 {
		err := g.Call(ctx, time.Now(), batch, &res)
		if !errors.Is(err, store.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
			if notTimeouts++; notTimeouts == 1 {
				t.Errorf("batch on the half-migrated slot: %v, want store.ErrUnavailable and context.DeadlineExceeded", err)
			}
		}
	}
	if notTimeouts > 1 {
		t.Errorf("%d of 10 batches on the half-migrated slot failed otherwise than by a timeout", notTimeouts)
	}
	if bs, _ := g.Breakers(); bs.NotClosed != 0 {
		t.Errorf("%d breakers opened by batches that met TRYAGAIN until their deadline", bs.NotClosed)
	}
	for _, c := range batch {
		if err := s.Take(ctx, []store.Check{c}, &res); err != nil || !res.Allowed { // the store itself: the guard's 30 ms is for the batches above
			t.Errorf("%s alone on the half-migrated slot: %+v, %v", c.Key, res, err)
		}
	}

	// Three callers at once: the first batch is sent alone (250 ms), the
	// two queued behind it are merged into one call when it fails. The
	// call meets TRYAGAIN until the move finishes, which is after the
	// second caller gave up (500 ms) and the call was sent again: the
	// second batch is dropped from it and not charged, the third's (5 s)
	// is decided.
	co := s.coalescerFor(s.coKey(sl))
	queued := func(inflight, waiting int) bool {
		co.mu.Lock()
		defer co.mu.Unlock()
		return co.inflight == inflight && len(co.queue) == waiting
	}
	errs := make([]error, 3)
	done := [3]chan struct{}{make(chan struct{}), make(chan struct{}), make(chan struct{})}
	call := func(i int, d time.Duration) {
		go func() {
			defer close(done[i])
			cctx, cancel := context.WithTimeout(ctx, d)
			defer cancel()
			var res store.Result
			errs[i] = s.Take(cctx, batch, &res)
			if errs[i] == nil && !res.Allowed {
				errs[i] = fmt.Errorf("rejected: %+v", res)
			}
		}()
	}
	// waitFor waits until cond holds while the first caller waits.
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			select {
			case <-done[0]:
				t.Fatalf("the first caller returned (%v) before %s", errs[0], what)
			case <-time.After(time.Millisecond):
			}
		}
	}
	call(0, 250*time.Millisecond)
	waitFor("its call was in flight", func() bool { return queued(1, 0) })
	call(1, 500*time.Millisecond)
	call(2, 5*time.Second)
	waitFor("two batches queued behind it", func() bool { return queued(1, 2) })
	<-done[1]
	// A try sent before the second caller gave up may still be in the
	// client's own retries (3 tries, each answered TRYAGAIN by the old
	// master): the fourth TRYAGAIN from now is of a try sent after.
	from := tryAgains(t, nodes[src])
	for deadline := time.Now().Add(5 * time.Second); tryAgains(t, nodes[src]) < from+4; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the merged call was not sent again after its second caller gave up (%v)", errs[1])
		}
	}
	moveSlot(t, sl, nodes[src], nodes[dst], nodes, func() {}, func() {})
	for _, d := range done {
		<-d
	}
	for i, err := range errs[:2] {
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("caller %d, gone before the move finished: %v, want a timeout", i, err)
		}
	}
	if errs[2] != nil {
		t.Errorf("caller still waiting when the move finished: %v", errs[2])
	}
	if err := s.Take(ctx, batch, &res); err != nil || !res.Allowed {
		t.Fatalf("batch after the migration: %+v, %v", res, err)
	}
	for i, d := range res.Decisions {
		if want := lim.Limit - 4; d.Remaining != want {
			t.Errorf("%s: %d remaining after four takes, want %d", batch[i].Key, d.Remaining, want)
		}
	}
}

// tryAgains is how many TRYAGAIN replies node has sent (INFO errorstats).
func tryAgains(t *testing.T, n *reshardNode) int64 {
	t.Helper()
	info, err := n.do(t, "INFO", "errorstats").ToString()
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(info, "errorstat_TRYAGAIN:count=")
	if !ok {
		return 0
	}
	c, err := strconv.ParseInt(strings.TrimSpace(strings.SplitN(rest, "\n", 2)[0]), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// ownerOf is the index of the master that serves slot sl, as the first
// node sees it (CLUSTER SLOTS).
func ownerOf(t *testing.T, nodes []*reshardNode, sl uint16) int {
	t.Helper()
	ranges, err := nodes[0].do(t, "CLUSTER", "SLOTS").ToArray()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range ranges {
		v, err := r.ToArray()
		if err != nil || len(v) < 3 {
			t.Fatalf("CLUSTER SLOTS entry %v: %v", r, err)
		}
		from, _ := v[0].AsInt64()
		to, _ := v[1].AsInt64()
		if int64(sl) < from || int64(sl) > to {
			continue
		}
		m, _ := v[2].ToArray()
		port, _ := m[1].AsInt64()
		if i := slices.IndexFunc(nodes, func(n *reshardNode) bool { return int64(n.port) == port }); i >= 0 {
			return i
		}
	}
	t.Fatalf("no master serves slot %d", sl)
	return -1
}

// redisStats sums, over nodes, the redirections and errors Redis replied
// (INFO errorstats: MOVED, ASK, TRYAGAIN, NOSCRIPT) and the ASKING and
// script calls it served (INFO commandstats).
func redisStats(t *testing.T, nodes []*reshardNode) string {
	t.Helper()
	sums := map[string]int64{}
	for _, n := range nodes {
		for _, section := range []string{"errorstats", "commandstats"} {
			info, err := n.do(t, "INFO", section).ToString()
			if err != nil {
				t.Fatal(err)
			}
			for _, line := range strings.Split(info, "\n") {
				name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
				if !ok || !strings.HasPrefix(name, "errorstat_") && !slices.Contains([]string{"cmdstat_asking", "cmdstat_evalsha", "cmdstat_eval"}, name) {
					continue
				}
				for _, f := range strings.Split(rest, ",") {
					if k, v, _ := strings.Cut(f, "="); k == "count" || k == "calls" {
						c, _ := strconv.ParseInt(v, 10, 64)
						sums[strings.TrimPrefix(strings.TrimPrefix(name, "errorstat_"), "cmdstat_")] += c
					}
				}
			}
		}
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(sums)) {
		out = append(out, fmt.Sprintf("%s %d", k, sums[k]))
	}
	return strings.Join(out, ", ")
}

// TestRefusedBatchHoldsNoOne: a batch merged by node that the node
// refuses (its slot half-migrated, its keys split between the masters, so
// that sent alone it meets TRYAGAIN until it gives up) does not hold the
// other batches of its call: they are answered at once, while it still
// waits (the attacker review of issue 37 found them held until it gave
// up, past their own deadlines).
func TestRefusedBatchHoldsNoOne(t *testing.T) {
	url, nodes := startReshardCluster(t)
	s := open(t, url)
	ctx := context.Background()
	lim := algo.Limit{Limit: 1_000_000, Period: 24 * time.Hour}
	stuck := []store.Check{{Key: "{stuck}a", Limit: lim, Cost: 1}, {Key: "{stuck}b", Limit: lim, Cost: 1}}
	var res store.Result
	if err := s.Take(ctx, stuck, &res); err != nil || !res.Allowed {
		t.Fatalf("batch before the migration: %+v, %v", res, err)
	}
	sl := slot("stuck")
	src := ownerOf(t, nodes, sl)
	var others []store.Check // one key each in other slots of the same master
	for i := 0; len(others) < 15; i++ {
		tag := fmt.Sprintf("other%d", i)
		if o := slot(tag); o != sl && ownerOf(t, nodes, o) == src {
			others = append(others, store.Check{Key: "{" + tag + "}k", Limit: lim, Cost: 1})
		}
	}
	for _, c := range others { // load the scripts and the slot map
		if err := s.Take(ctx, []store.Check{c}, &res); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(5 * time.Second); s.nodes.cur.Load() == nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the slot map was never read")
		}
	}
	dst := (src + 1) % 3
	slArg := strconv.Itoa(int(sl))
	nodes[dst].do(t, "CLUSTER", "SETSLOT", slArg, "IMPORTING", nodes[src].id)
	nodes[src].do(t, "CLUSTER", "SETSLOT", slArg, "MIGRATING", nodes[dst].id)
	nodes[src].do(t, "MIGRATE", "127.0.0.1", strconv.Itoa(nodes[dst].port), "", "0", "5000", "KEYS", s.Key(algo.GCRA, stuck[0].Key))

	// Rounds of the stuck batch and the others at once, until one merged
	// call carried the stuck batch (the node refused it).
	for round := 0; ; round++ {
		if round == 50 {
			t.Fatal("in 50 rounds the stuck batch never travelled in a merged call")
		}
		resent := s.nodes.resent.Load()
		start := time.Now()
		var wg sync.WaitGroup
		var stuckTook time.Duration
		var stuckErr error
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			var res store.Result
			stuckErr = s.Take(cctx, stuck, &res)
			stuckTook = time.Since(start)
		})
		took := make([]time.Duration, len(others))
		errs := make([]error, len(others))
		for i, c := range others {
			wg.Go(func() {
				cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
				defer cancel()
				var res store.Result
				errs[i] = s.Take(cctx, []store.Check{c}, &res)
				took[i] = time.Since(start)
			})
		}
		wg.Wait()
		if s.nodes.resent.Load() == resent {
			continue
		}
		if stuckErr == nil {
			t.Fatalf("the batch on the half-migrated slot was decided: want it to wait out TRYAGAIN and fail")
		}
		for i := range others {
			if errs[i] != nil {
				t.Errorf("%s: %v", others[i].Key, errs[i])
			}
			if took[i] > stuckTook/2 {
				t.Errorf("%s answered after %v, the refused batch after %v: held by it", others[i].Key, took[i], stuckTook)
			}
		}
		t.Logf("round %d: the refused batch gave up after %v (%v); the others answered within %v", round, stuckTook, stuckErr, slices.Max(took))
		return
	}
}
