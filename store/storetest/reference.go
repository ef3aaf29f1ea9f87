package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/store"
)

// Reference is the executable spec of a batch, in Go: what every backend
// must decide for a batch, given its keys' states. The memory store's
// take and the Redis scripts implement it; the suite checks each backend
// against it, and so do the backends' own differential tests.
//
// The rule: every check is evaluated at the batch's time on its key's
// state (a key held under one algorithm is apart from the same key under
// another). If all admit, every check with a cost is charged: its state
// is the evaluation's, kept until it is full again. If any rejects, none
// is charged: a check that would have admitted reports a peek (cost 0) of
// its state instead; a GCRA key's state is still written back when the
// evaluation clamped it (a TAT written under a slower limit), kept until
// that TAT. A state past its keeping time is a fresh key's.
//
// A settlement (Settle) applies [algo.Limit.Settle] to each adjustment's
// key at the settlement's time and keeps the state of each that moved
// until it is full again; an id settled before, within
// [store.SettleIDLifetime], applies nothing and reports each adjustment
// Repeated.
//
// A Reference is not safe for concurrent use.
type Reference struct {
	keys map[refKey]refEntry
	ids  map[string]int64 // settlement id -> until (µs)
}

type refKey struct {
	alg algo.Algorithm
	key string
}

type refEntry struct {
	st  algo.State
	exp int64 // µs
}

// NewReference returns a Reference in which every key is fresh.
func NewReference() *Reference {
	return &Reference{keys: map[refKey]refEntry{}, ids: map[string]int64{}}
}

// Settle applies settlement id's adjustments at now (µs), as every
// backend must within one failure domain, and writes the answer to res.
// The adjustments must be valid ([store.ValidateSettle]).
func (r *Reference) Settle(now int64, id string, adjs []store.Adjustment, res *store.SettleResult) {
	until, seen := r.ids[id]
	repeated := seen && now < until
	if !repeated {
		r.ids[id] = now + int64(store.SettleIDLifetime/time.Microsecond)
	}
	res.Now = time.UnixMicro(now)
	res.Settled = res.Settled[:0]
	for _, a := range adjs {
		st, _, _ := r.State(a.Limit.Algorithm, a.Key, now)
		delta := a.Delta
		if repeated {
			delta = 0
		}
		out, next := a.Limit.Settle(st, now, a.TakenUs(), delta)
		if out.Applied != 0 {
			r.keys[refKey{a.Limit.Algorithm, a.Key}] = refEntry{next, now + out.ResetUs}
		}
		res.Settled = append(res.Settled, store.NewSettled(out, repeated))
	}
}

// State returns key's state under alg at now (µs), the time (µs) it is
// kept until, and whether one is held.
func (r *Reference) State(alg algo.Algorithm, key string, now int64) (st algo.State, until int64, ok bool) {
	e, ok := r.keys[refKey{alg, key}]
	if !ok || now >= e.exp {
		return algo.State{}, 0, false
	}
	return e.st, e.exp, true
}

// Take decides checks at now (µs) as one all-or-nothing step, as every
// backend must, and writes the answer to res. The checks must be valid
// ([store.Validate]).
func (r *Reference) Take(now int64, checks []store.Check, res *store.Result) {
	outs := make([]algo.Outcome, len(checks))
	next := make([]algo.State, len(checks))
	all := true
	for i, c := range checks {
		st, _, _ := r.State(c.Limit.Algorithm, c.Key, now)
		outs[i], next[i] = c.Limit.Eval(st, now, c.Cost)
		all = all && outs[i].Allowed
	}
	for i, c := range checks {
		k := refKey{c.Limit.Algorithm, c.Key}
		st, _, held := r.State(c.Limit.Algorithm, c.Key, now)
		switch {
		case all && c.Cost > 0:
			r.keys[k] = refEntry{next[i], now + outs[i].ResetUs}
			continue
		case !all && outs[i].Allowed && c.Cost > 0:
			outs[i], next[i] = c.Limit.Eval(st, now, 0)
		}
		if held && c.Limit.Algorithm == algo.GCRA && next[i].A != st.A {
			r.keys[k] = refEntry{next[i], next[i].A}
		}
	}
	res.Allowed = all
	res.Now = time.UnixMicro(now)
	res.Decisions = res.Decisions[:0]
	for i, c := range checks {
		res.Decisions = append(res.Decisions, outs[i].Decision(c.Limit))
	}
}

// testReference: random batches over a pool of keys under every
// algorithm, some sharing a key under two algorithms, with random costs
// (many over what is left), decide exactly as the Reference does at the
// store's own time. All keys share one hash tag, so that a Redis Cluster
// decides each batch in one slot at one TIME.
func testReference(t *testing.T, s store.Store) {
	seed := rand.Uint64()
	r := rand.New(rand.NewPCG(seed, 11))
	p := prefix(t)
	type keyed struct {
		key   string
		limit algo.Limit
	}
	var pool []keyed
	for i := range 12 {
		a := algo.Algorithms[i%len(algo.Algorithms)]
		l := algo.Limit{Limit: 2 + r.Int64N(8), Period: time.Duration(50+r.IntN(400)) * time.Millisecond, Algorithm: a}
		if !a.Windowed() && r.IntN(2) == 0 {
			l.Burst = 1 + r.Int64N(10)
		}
		pool = append(pool, keyed{fmt.Sprintf("%s{ref}:k%d", p, i%9), l}) // keys 0..2 under two algorithms
	}
	ref := NewReference()
	var res, want store.Result
	for op := range 400 {
		var checks []store.Check
		for _, j := range r.Perm(len(pool))[:1+r.IntN(3)] {
			checks = append(checks, store.Check{Key: pool[j].key, Limit: pool[j].limit, Cost: r.Int64N(pool[j].limit.Capacity() + 1)})
		}
		if store.Validate(checks) != nil {
			continue // the same key and algorithm twice
		}
		if err := s.Take(context.Background(), checks, &res); err != nil {
			t.Fatalf("seed %d, op %d: %v", seed, op, err)
		}
		ref.Take(res.Now.UnixMicro(), checks, &want)
		if res.Allowed != want.Allowed {
			t.Fatalf("seed %d, op %d: batch allowed %v, the reference %v; checks %+v", seed, op, res.Allowed, want.Allowed, checks)
		}
		for i, c := range checks {
			if res.Decisions[i] != want.Decisions[i] {
				t.Fatalf("seed %d, op %d, %v %q cost %d: the store decided %+v, the reference %+v", seed, op, c.Limit, c.Key, c.Cost, res.Decisions[i], want.Decisions[i])
			}
		}
		if r.IntN(4) == 0 {
			time.Sleep(time.Duration(r.IntN(20)) * time.Millisecond)
		}
	}
}

// testSettleReference: random takes and settlements (some repeated, some
// refunds of takes of windows gone) over a pool of keys under every
// algorithm, in one hash slot, settle exactly as the Reference does at the
// store's own time.
func testSettleReference(t *testing.T, s store.Store) {
	seed := rand.Uint64()
	r := rand.New(rand.NewPCG(seed, 36))
	p := prefix(t)
	type keyed struct {
		key   string
		limit algo.Limit
		taken []time.Time
	}
	var pool []*keyed
	for i := range 10 {
		a := algo.Algorithms[i%len(algo.Algorithms)]
		l := algo.Limit{Limit: 2 + r.Int64N(8), Period: time.Duration(50+r.IntN(400)) * time.Millisecond, Algorithm: a}
		if !a.Windowed() && r.IntN(2) == 0 {
			l.Burst = 1 + r.Int64N(10)
		}
		pool = append(pool, &keyed{key: fmt.Sprintf("%s{sref}:k%d", p, i), limit: l})
	}
	ref := NewReference()
	var res, want store.Result
	var sres, swant store.SettleResult
	var ids []string
	for op := range 400 {
		picked := r.Perm(len(pool))[:1+r.IntN(3)]
		if r.IntN(2) == 0 {
			var checks []store.Check
			for _, j := range picked {
				checks = append(checks, store.Check{Key: pool[j].key, Limit: pool[j].limit, Cost: r.Int64N(pool[j].limit.Capacity() + 1)})
			}
			if err := s.Take(context.Background(), checks, &res); err != nil {
				t.Fatalf("seed %d, op %d: %v", seed, op, err)
			}
			ref.Take(res.Now.UnixMicro(), checks, &want)
			if res.Allowed != want.Allowed {
				t.Fatalf("seed %d, op %d: batch allowed %v, the reference %v", seed, op, res.Allowed, want.Allowed)
			}
			if res.Allowed {
				for _, j := range picked {
					pool[j].taken = append(pool[j].taken, res.Now)
				}
			}
			continue
		}
		var adjs []store.Adjustment
		for _, j := range picked {
			k := pool[j]
			c := k.limit.Capacity()
			a := store.Adjustment{Key: k.key, Limit: k.limit, Delta: r.Int64N(3*c+1) - 3*c/2, TakenAt: time.Now()}
			if len(k.taken) > 0 {
				a.TakenAt = k.taken[r.IntN(len(k.taken))]
			}
			adjs = append(adjs, a)
		}
		id := settleID()
		if len(ids) > 0 && r.IntN(4) == 0 {
			id = ids[r.IntN(len(ids))] // a retry
		}
		ids = append(ids, id)
		if err := s.Settle(context.Background(), id, adjs, &sres); err != nil {
			t.Fatalf("seed %d, op %d: %v", seed, op, err)
		}
		ref.Settle(sres.Now.UnixMicro(), id, adjs, &swant)
		for i, a := range adjs {
			if sres.Settled[i] != swant.Settled[i] {
				t.Fatalf("seed %d, op %d, %v %q delta %d: the store settled %+v, the reference %+v", seed, op, a.Limit, a.Key, a.Delta, sres.Settled[i], swant.Settled[i])
			}
		}
		if r.IntN(4) == 0 {
			time.Sleep(time.Duration(r.IntN(20)) * time.Millisecond)
		}
	}
}
