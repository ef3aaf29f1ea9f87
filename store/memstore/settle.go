package memstore

import (
	"context"
	"fmt"
	"hash/maphash"
	"strings"
	"sync"
	"time"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/store"
)

// DefaultMaxSettleIDs is the bound on settlement ids held of a store
// whose Config.MaxSettleIDs is zero: at most about 90 MB of ids.
const DefaultMaxSettleIDs = 1 << 20

// idShards is how many independently locked tables of settlement ids a
// store keeps.
const idShards = 16

// idTable is one shard of the settlement ids applied within
// store.SettleIDLifetime: a set, and the same ids in the order they came,
// which is the order they expire in (every id lives as long).
type idTable struct {
	mu    sync.Mutex
	set   map[string]struct{}
	queue []idRecord // from head on: the ids held, oldest first
	head  int
	// scopes counts the ids held by scope (see [idScope]), each at most
	// half the table's bound.
	scopes map[string]int
}

// idScope is the scope of a settlement id: what comes before its first
// '.', "" for none. The limiter's ids are "<tenant's tag>.<random>", so
// that one tenant's ids share a table and hold at most half of it: a
// tenant settling faster than its half allows has its own settlements
// refused, never another's (the tenants of the other tables are
// untouched, those of its own keep the other half).
func idScope(id string) string {
	scope, _, ok := strings.Cut(id, ".")
	if !ok {
		return ""
	}
	return scope
}

type idRecord struct {
	id  string
	exp int64 // µs
}

// seen reports whether id is held at now and, when not, records it until
// exp, having forgotten the ids expired at now. full reports an id not
// held that the table has no room for (limit ids held, none expired): it
// is not recorded, and the settlement must not be applied. An id is never
// forgotten before it expires, since a retry of its settlement would then
// apply it twice. The caller holds t.mu.
func (t *idTable) seen(id string, now, exp int64, limit int) (held, full bool) {
	for t.head < len(t.queue) && t.queue[t.head].exp <= now {
		old := t.queue[t.head].id
		delete(t.set, old)
		if sc := idScope(old); sc != "" {
			if t.scopes[sc]--; t.scopes[sc] == 0 {
				delete(t.scopes, sc)
			}
		}
		t.queue[t.head] = idRecord{}
		t.head++
	}
	if _, ok := t.set[id]; ok {
		return true, false
	}
	sc := idScope(id)
	if len(t.set) >= limit || sc != "" && t.scopes[sc] >= max(1, limit/2) {
		return false, true
	}
	if t.head > len(t.queue)/2 {
		t.queue = append(t.queue[:0], t.queue[t.head:]...)
		t.head = 0
	}
	if t.set == nil {
		t.set = map[string]struct{}{}
	}
	id = strings.Clone(id) // not the caller's buffer
	t.set[id] = struct{}{}
	if sc != "" {
		if t.scopes == nil {
			t.scopes = map[string]int{}
		}
		t.scopes[sc]++
	}
	t.queue = append(t.queue, idRecord{id, exp})
	return false, false
}

// ErrSettleIDsFull is a settlement refused because the store holds
// Config.MaxSettleIDs settlement ids, none expired yet: it wraps
// store.ErrUnavailable, so the guard retries it and then reports it, and a
// later retry (the same id) applies it once.
var ErrSettleIDsFull = fmt.Errorf("%w: memstore: the settlement ids of the last 2 minutes fill Config.MaxSettleIDs (or this tenant's half of its table); retry, or raise it", store.ErrUnavailable)

// Settle applies a settlement's adjustments as one atomic step, exactly
// once per id within store.SettleIDLifetime. See [store.Settler].
//
// The id is recorded under the same locks as the keys' states: a call
// that finds it applies nothing. The ids held are bounded by
// Config.MaxSettleIDs (at that bound, a new settlement is refused with [ErrSettleIDsFull]
// rather than an id forgotten early, which would let a retry apply twice).
func (s *Store) Settle(ctx context.Context, id string, adjs []store.Adjustment, res *store.SettleResult) error {
	if err := store.ValidateSettle(id, adjs); err != nil {
		return err
	}
	return s.settle(ctx, false, 0, id, adjs, res)
}

// SettleUnrecorded applies a settlement's adjustments as one atomic step
// without recording an id, for a caller that applies each settlement at
// most once itself: it never fills the id table. See
// [store.UnrecordedSettler].
func (s *Store) SettleUnrecorded(ctx context.Context, adjs []store.Adjustment, res *store.SettleResult) error {
	if err := store.ValidateAdjustments(adjs); err != nil {
		return err
	}
	return s.settle(ctx, false, 0, "", adjs, res)
}

// SettleAt is Settle at the given time instead of the store's clock.
func (s *Store) SettleAt(ctx context.Context, now time.Time, id string, adjs []store.Adjustment, res *store.SettleResult) error {
	if err := store.ValidateSettle(id, adjs); err != nil {
		return err
	}
	return s.settle(ctx, true, now.UnixMicro(), id, adjs, res)
}

// settle applies adjs, validated, under the id table's record of id; an
// id "" is not recorded (SettleUnrecorded).
func (s *Store) settle(ctx context.Context, fixed bool, us int64, id string, adjs []store.Adjustment, res *store.SettleResult) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var hBuf [batchInline]uint64
	var idxBuf, lockBuf [batchInline]uint32
	hs, idx, locks := hBuf[:0], idxBuf[:0], lockBuf[:0]
	for i := range adjs {
		h := maphash.String(s.seed, adjs[i].Key)
		hs, idx = append(hs, h), append(idx, uint32(h&s.mask))
	}
	locks = sortedUnique(append(locks, idx...))
	if !fixed {
		us = s.nowUs()
	}
	us = s.lock(locks, fixed, us)
	var t *idTable
	var repeated bool
	if id != "" {
		shard := id // a scope's ids share a table (idScope)
		if sc := idScope(id); sc != "" {
			shard = sc
		}
		t = &s.ids[maphash.String(s.seed, shard)%idShards]
		t.mu.Lock()
		var full bool
		repeated, full = t.seen(id, us, us+int64(store.SettleIDLifetime/time.Microsecond), s.maxIDs)
		if full {
			t.mu.Unlock()
			s.unlock(locks, us)
			return ErrSettleIDsFull
		}
	}
	res.Settled = res.Settled[:0]
	for i := range adjs {
		a := &adjs[i]
		sh := &s.shards[idx[i]]
		tag := uint32(hs[i] >> 32)
		ei := sh.lookup(tag, a.Limit.Algorithm, a.Key)
		var st algo.State
		if ei != 0 {
			st = sh.at(ei).st
		}
		delta := a.Delta
		if repeated {
			delta = 0
		}
		out, next := a.Limit.Settle(st, us, a.TakenUs(), delta)
		res.Settled = append(res.Settled, store.NewSettled(out, repeated))
		if out.Applied != 0 {
			if ei == 0 {
				ei = sh.insert(tag, a.Limit.Algorithm, a.Key, us, s.perShard)
			}
			e := sh.at(ei)
			e.st, e.exp = next, us+out.ResetUs
			e.pinned = true
			sh.charge(ei, s.maxBytes, us)
			e.pinned = false
		}
		if ei != 0 {
			sh.touch(ei, us)
		}
	}
	if t != nil {
		t.mu.Unlock()
	}
	s.unlock(locks, us)
	res.Now = time.UnixMicro(us)
	return nil
}

var (
	_ store.Settler           = (*Store)(nil)
	_ store.UnrecordedSettler = (*Store)(nil)
)
