package memstore

import (
	"context"
	"hash/maphash"
	"sync"
	"time"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/store"
)

// Config configures a Store. The zero value is ready to use.
type Config struct {
	// Shards is the number of independently locked shards, rounded up to a
	// power of two. Zero means 64.
	Shards int
	// MaxKeys bounds the keys held. Zero means 1,000,000 (about 200 MB at
	// the largest per-key size of the counter algorithms).
	MaxKeys int
	// Now is the clock. Zero means time.Now.
	Now func() time.Time
}

// Store is the in-memory store. It is safe for concurrent use.
type Store struct {
	shards   []shard
	mask     uint64
	perShard int
	seed     maphash.Seed
	now      func() time.Time
}

type mkey struct {
	alg algo.Algorithm
	key string
}

type entry struct {
	k          mkey
	st         algo.State
	exp        int64 // µs: the state carries no information from then on
	prev, next *entry
}

type shard struct {
	mu   sync.Mutex
	m    map[mkey]*entry
	root entry // LRU ring: root.next is the most recent, root.prev the least
	free *entry
	_    [40]byte // keep shards on separate cache lines
}

// New returns a store configured by c.
func New(c Config) *Store {
	n := 64
	if c.Shards > 0 {
		n = 1
		for n < c.Shards {
			n <<= 1
		}
	}
	maxKeys := c.MaxKeys
	if maxKeys <= 0 {
		maxKeys = 1_000_000
	}
	s := &Store{
		shards:   make([]shard, n),
		mask:     uint64(n - 1),
		perShard: max(1, (maxKeys+n-1)/n),
		seed:     maphash.MakeSeed(),
		now:      c.Now,
	}
	if s.now == nil {
		s.now = time.Now
	}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.m = make(map[mkey]*entry)
		sh.root.next, sh.root.prev = &sh.root, &sh.root
	}
	return s
}

// batchInline is the batch size decided without allocating.
const batchInline = 8

// Take decides checks atomically. See [store.Store].
func (s *Store) Take(ctx context.Context, checks []store.Check, res *store.Result) error {
	return s.TakeAt(ctx, s.now(), checks, res)
}

// TakeAt is Take at the given time instead of the store's clock.
func (s *Store) TakeAt(ctx context.Context, now time.Time, checks []store.Check, res *store.Result) error {
	if err := store.Validate(checks); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	us := now.UnixMicro()
	n := len(checks)

	var idxBuf, lockBuf [batchInline]uint32
	var entBuf [batchInline]*entry
	var stBuf [batchInline]algo.State
	var outBuf [batchInline]algo.Outcome
	idx, locks, ents, sts, outs := idxBuf[:0], lockBuf[:0], entBuf[:0], stBuf[:0], outBuf[:0]
	if n > batchInline {
		idx, locks = make([]uint32, 0, n), make([]uint32, 0, n)
		ents, sts, outs = make([]*entry, 0, n), make([]algo.State, 0, n), make([]algo.Outcome, 0, n)
	}
	for i := range checks {
		idx = append(idx, uint32(maphash.String(s.seed, checks[i].Key)&s.mask))
	}
	locks = sortedUnique(append(locks, idx...))
	for _, l := range locks {
		s.shards[l].mu.Lock()
	}

	allowed := true
	for i := range checks {
		c := &checks[i]
		e := s.shards[idx[i]].m[mkey{c.Limit.Algorithm, c.Key}]
		var st algo.State
		if e != nil {
			st = e.st
		}
		o, next := c.Limit.Eval(st, us, c.Cost)
		allowed = allowed && o.Allowed
		ents, sts, outs = append(ents, e), append(sts, next), append(outs, o)
	}
	for i := range checks {
		c := &checks[i]
		sh := &s.shards[idx[i]]
		switch {
		case allowed && c.Cost > 0:
			e := ents[i]
			if e == nil {
				e = sh.insert(mkey{c.Limit.Algorithm, c.Key}, us, s.perShard)
			}
			e.st, e.exp = sts[i], us+outs[i].ResetUs
			sh.touch(e)
		case !allowed && outs[i].Allowed && c.Cost > 0:
			// Uncharged because another check rejected: report a peek.
			var st algo.State
			if ents[i] != nil {
				st = ents[i].st
			}
			outs[i], _ = c.Limit.Eval(st, us, 0)
			fallthrough
		default:
			if ents[i] != nil {
				sh.touch(ents[i])
			}
		}
	}
	for _, l := range locks {
		s.shards[l].reap(us, 2)
		s.shards[l].mu.Unlock()
	}

	res.Allowed = allowed
	res.Now = time.UnixMicro(us)
	res.Decisions = res.Decisions[:0]
	for i := range checks {
		res.Decisions = append(res.Decisions, outs[i].Decision(checks[i].Limit))
	}
	return nil
}

// sortedUnique sorts a small slice in place and removes repeats.
func sortedUnique(a []uint32) []uint32 {
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && a[j] < a[j-1]; j-- {
			a[j], a[j-1] = a[j-1], a[j]
		}
	}
	out := a[:0]
	for i, v := range a {
		if i == 0 || v != a[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// insert adds an entry for k, evicting one first when the shard is full.
// The caller holds sh.mu.
func (sh *shard) insert(k mkey, now int64, limit int) *entry {
	if len(sh.m) >= limit {
		sh.evictOne(now)
	}
	e := sh.free
	if e != nil {
		sh.free = e.next
		*e = entry{}
	} else {
		e = new(entry)
	}
	e.k = k
	sh.m[k] = e
	e.prev, e.next = &sh.root, sh.root.next
	e.prev.next, e.next.prev = e, e
	return e
}

// evictScan is how many of the least recently used entries eviction looks
// at for an expired one before it takes the least recently used.
const evictScan = 8

// evictOne removes an expired entry near the LRU end, else the LRU entry.
func (sh *shard) evictOne(now int64) {
	victim := sh.root.prev
	for e, i := sh.root.prev, 0; e != &sh.root && i < evictScan; e, i = e.prev, i+1 {
		if e.exp <= now {
			victim = e
			break
		}
	}
	if victim != &sh.root {
		sh.remove(victim)
	}
}

// reap removes up to n expired entries from the LRU end.
func (sh *shard) reap(now int64, n int) {
	for i := 0; i < n; i++ {
		e := sh.root.prev
		if e == &sh.root || e.exp > now {
			return
		}
		sh.remove(e)
	}
}

func (sh *shard) remove(e *entry) {
	delete(sh.m, e.k)
	e.prev.next, e.next.prev = e.next, e.prev
	*e = entry{next: sh.free}
	sh.free = e
}

// touch moves e to the most recently used end.
func (sh *shard) touch(e *entry) {
	if sh.root.next == e {
		return
	}
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = &sh.root, sh.root.next
	e.prev.next, e.next.prev = e, e
}

// Sweep removes every expired key and returns how many it removed. Idle keys
// are also removed as traffic passes; call Sweep to reclaim memory after a
// burst of distinct keys with no traffic since.
func (s *Store) Sweep() int {
	now := s.now().UnixMicro()
	removed := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for _, e := range sh.m {
			if e.exp <= now {
				sh.remove(e)
				removed++
			}
		}
		sh.free = nil // let the garbage collector have them
		sh.mu.Unlock()
	}
	return removed
}

// Len returns the number of keys held.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// State returns the stored state of key under alg and whether one is held,
// for tests and diagnostics.
func (s *Store) State(alg algo.Algorithm, key string) (algo.State, bool) {
	sh := &s.shards[maphash.String(s.seed, key)&s.mask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.m[mkey{alg, key}]
	if e == nil {
		return algo.State{}, false
	}
	return e.st, true
}

// Close does nothing: the store holds no resources but memory. It exists
// to satisfy [store.Store]; a closed Store still answers.
func (s *Store) Close() error { return nil }

var _ store.Store = (*Store)(nil)
