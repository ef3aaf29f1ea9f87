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
	// MaxKeys bounds the keys held. Zero means 1,000,000 (about 175 MB for
	// the counter algorithms with short keys; see the package doc).
	MaxKeys int
	// IdleAfter is how long a key whose state has expired (it is full
	// again) is kept before traffic reaps it. Keeping it saves re-inserting
	// keys that are used often but stay under their limit; under memory
	// pressure expired keys are evicted first regardless. Zero means 1 minute.
	IdleAfter time.Duration
	// Now is the clock. Zero means the system clock, read as the monotonic
	// time since New (one clock read per call; immune to wall-clock steps).
	Now func() time.Time
}

// Store is the in-memory store. It is safe for concurrent use.
type Store struct {
	shards   []shard
	mask     uint64
	perShard int
	seed     maphash.Seed
	idle     int64            // µs
	now      func() time.Time // nil: the monotonic clock since base
	base     time.Time
	baseUs   int64
}

// nowUs reads the store's clock in µs since the epoch.
func (s *Store) nowUs() int64 {
	if s.now != nil {
		return s.now().UnixMicro()
	}
	return s.baseUs + int64(time.Since(s.base)/time.Microsecond)
}

type mkey struct {
	alg algo.Algorithm
	key string
}

type entry struct {
	k          mkey
	h          uint64 // maphash of k.key: the shard map's key
	chain      *entry // next entry with the same hash (collisions are rare)
	st         algo.State
	exp        int64 // µs: the state carries no information from then on
	moved      int64 // µs: when touch last moved it to the front
	prev, next *entry
}

type shard struct {
	mu   sync.Mutex
	m    map[uint64]*entry // by maphash of the key; entries with one hash chain
	root entry             // LRU ring: root.next is the most recent, root.prev the least
	free *entry
	n    int      // entries held (the map counts hashes)
	last int64    // µs: the latest clock reading decided under this lock
	ops  uint32   // calls since the shard last reaped
	_    [20]byte // keep shards on separate cache lines
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
		s.base = time.Now()
		s.baseUs = s.base.UnixMicro()
	}
	s.idle = int64(c.IdleAfter / time.Microsecond)
	if s.idle <= 0 {
		s.idle = int64(time.Minute / time.Microsecond)
	}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.m = make(map[uint64]*entry)
		sh.root.next, sh.root.prev = &sh.root, &sh.root
	}
	return s
}

// batchInline is the batch size decided without allocating.
const batchInline = 4

// reapEvery is how many calls a shard serves between looks at its least
// recently used end for idle keys; each look removes up to 2×reapEvery.
const reapEvery = 16

// Take decides checks atomically. See [store.Store].
//
// The clock is read before the batch's shards are locked; under the locks a
// reading older than one a shard has already decided at is moved up to it,
// so the decisions of any one key are made at non-decreasing times in the
// order they are made (the bounds of docs/algorithms.md assume so).
func (s *Store) Take(ctx context.Context, checks []store.Check, res *store.Result) error {
	return s.take(ctx, false, 0, checks, res)
}

// TakeAt is Take at the given time instead of the store's clock. Calls for
// one key should not go back in time; the algorithms tolerate it, but the
// window bounds of docs/algorithms.md assume time moves forward.
func (s *Store) TakeAt(ctx context.Context, now time.Time, checks []store.Check, res *store.Result) error {
	return s.take(ctx, true, now.UnixMicro(), checks, res)
}

func (s *Store) take(ctx context.Context, fixed bool, us int64, checks []store.Check, res *store.Result) error {
	if err := store.Validate(checks); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(checks) == 1 {
		s.takeOne(fixed, us, &checks[0], res)
		return nil
	}
	n := len(checks)

	var hBuf [batchInline]uint64
	var idxBuf, lockBuf [batchInline]uint32
	var entBuf [batchInline]*entry
	var stBuf [batchInline]algo.State
	var outBuf [batchInline]algo.Outcome
	hs, idx, locks, ents, sts, outs := hBuf[:0], idxBuf[:0], lockBuf[:0], entBuf[:0], stBuf[:0], outBuf[:0]
	if n > batchInline {
		hs, idx, locks = make([]uint64, 0, n), make([]uint32, 0, n), make([]uint32, 0, n)
		ents, sts, outs = make([]*entry, 0, n), make([]algo.State, 0, n), make([]algo.Outcome, 0, n)
	}
	for i := range checks {
		h := maphash.String(s.seed, checks[i].Key)
		hs, idx = append(hs, h), append(idx, uint32(h&s.mask))
	}
	locks = sortedUnique(append(locks, idx...))
	if !fixed {
		us = s.nowUs()
	}
	for _, l := range locks {
		s.shards[l].mu.Lock()
	}
	if !fixed {
		for _, l := range locks {
			us = max(us, s.shards[l].last)
		}
		for _, l := range locks {
			s.shards[l].last = us
		}
	}

	allowed := true
	for i := range checks {
		c := &checks[i]
		e := s.shards[idx[i]].lookup(hs[i], c.Limit.Algorithm, c.Key)
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
				e = sh.insert(hs[i], mkey{c.Limit.Algorithm, c.Key}, us, s.perShard)
			}
			e.st, e.exp = sts[i], us+outs[i].ResetUs
			sh.touch(e, us)
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
				sh.touch(ents[i], us)
			}
		}
	}
	for _, l := range locks {
		sh := &s.shards[l]
		if sh.ops++; sh.ops >= reapEvery {
			sh.ops = 0
			sh.reap(us-s.idle, 2*reapEvery)
		}
		sh.mu.Unlock()
	}

	res.Allowed = allowed
	res.Now = time.UnixMicro(us)
	res.Decisions = res.Decisions[:0]
	for i := range checks {
		res.Decisions = append(res.Decisions, outs[i].Decision(checks[i].Limit))
	}
	return nil
}

// takeOne is take for a batch of one check: the same steps without the
// bookkeeping a batch needs.
func (s *Store) takeOne(fixed bool, us int64, c *store.Check, res *store.Result) {
	h := maphash.String(s.seed, c.Key)
	sh := &s.shards[h&s.mask]
	if !fixed {
		us = s.nowUs()
	}
	sh.mu.Lock()
	if !fixed {
		us = max(us, sh.last)
		sh.last = us
	}
	e := sh.lookup(h, c.Limit.Algorithm, c.Key)
	var st algo.State
	if e != nil {
		st = e.st
	}
	o, next := c.Limit.Eval(st, us, c.Cost)
	if o.Allowed && c.Cost > 0 {
		if e == nil {
			e = sh.insert(h, mkey{c.Limit.Algorithm, c.Key}, us, s.perShard)
		}
		e.st, e.exp = next, us+o.ResetUs
	}
	if e != nil {
		sh.touch(e, us)
	}
	if sh.ops++; sh.ops >= reapEvery {
		sh.ops = 0
		sh.reap(us-s.idle, 2*reapEvery)
	}
	sh.mu.Unlock()
	res.Allowed = o.Allowed
	res.Now = time.UnixMicro(us)
	res.Decisions = append(res.Decisions[:0], o.Decision(c.Limit))
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

// lookup returns the entry for (alg, key) with hash h, or nil. The caller
// holds sh.mu.
func (sh *shard) lookup(h uint64, alg algo.Algorithm, key string) *entry {
	for e := sh.m[h]; e != nil; e = e.chain {
		if e.k.alg == alg && e.k.key == key {
			return e
		}
	}
	return nil
}

// insert adds an entry for k with hash h, evicting one first when the shard
// is full. The caller holds sh.mu.
func (sh *shard) insert(h uint64, k mkey, now int64, limit int) *entry {
	if sh.n >= limit {
		sh.evictOne(now)
	}
	e := sh.free
	if e != nil {
		sh.free = e.next
		*e = entry{}
	} else {
		e = new(entry)
	}
	e.k, e.h, e.moved = k, h, now
	e.chain = sh.m[h]
	sh.m[h] = e
	sh.n++
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

// reap removes up to n entries from the LRU end that expired before t.
func (sh *shard) reap(t int64, n int) {
	for i := 0; i < n; i++ {
		e := sh.root.prev
		if e == &sh.root || e.exp > t {
			return
		}
		sh.remove(e)
	}
}

func (sh *shard) remove(e *entry) {
	if head := sh.m[e.h]; head == e {
		if e.chain == nil {
			delete(sh.m, e.h)
		} else {
			sh.m[e.h] = e.chain
		}
	} else {
		for p := head; p != nil; p = p.chain {
			if p.chain == e {
				p.chain = e.chain
				break
			}
		}
	}
	sh.n--
	e.prev.next, e.next.prev = e.next, e.prev
	*e = entry{next: sh.free}
	sh.free = e
}

// touchEvery is how often a busy key moves to the front of the LRU ring:
// the order is kept to within this much, which is all eviction needs, and a
// key used again and again does not write to its neighbours every time.
const touchEvery = 1_000_000 // µs

// touch moves e to the most recently used end, at most once per touchEvery.
func (sh *shard) touch(e *entry, now int64) {
	if sh.root.next == e || now-e.moved < touchEvery && now >= e.moved {
		return
	}
	e.moved = now
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = &sh.root, sh.root.next
	e.prev.next, e.next.prev = e, e
}

// Sweep removes every expired key, idle or not, and returns how many it
// removed. Idle keys are also removed as traffic passes; call Sweep to
// reclaim memory after a burst of distinct keys with no traffic since.
func (s *Store) Sweep() int {
	now := s.nowUs()
	removed := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		var expired []*entry
		for _, head := range sh.m {
			for e := head; e != nil; e = e.chain {
				if e.exp <= now {
					expired = append(expired, e)
				}
			}
		}
		for _, e := range expired {
			sh.remove(e)
		}
		removed += len(expired)
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
		n += sh.n
		sh.mu.Unlock()
	}
	return n
}

// State returns the stored state of key under alg and whether one is held,
// for tests and diagnostics.
func (s *Store) State(alg algo.Algorithm, key string) (algo.State, bool) {
	h := maphash.String(s.seed, key)
	sh := &s.shards[h&s.mask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.lookup(h, alg, key)
	if e == nil {
		return algo.State{}, false
	}
	return e.st, true
}

// Close does nothing: the store holds no resources but memory. It exists
// to satisfy [store.Store]; a closed Store still answers.
func (s *Store) Close() error { return nil }

var _ store.Store = (*Store)(nil)
