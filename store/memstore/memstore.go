package memstore

import (
	"cmp"
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
	// MaxKeys bounds the keys held. Zero means 1,000,000 (about 152 MB for
	// the counter algorithms with short keys; see the package doc).
	MaxKeys int
	// MaxBytes bounds the bytes held, counted per key as EntryBytes plus
	// the key's length plus 8 per sliding log entry: whichever of MaxKeys
	// and MaxBytes is reached first evicts. Zero means DefaultMaxBytes.
	MaxBytes int64
	// IdleAfter is how long a key whose state has expired (it is full
	// again) is kept before traffic reaps it. Keeping it saves re-inserting
	// keys that are used often but stay under their limit; under memory
	// pressure expired keys are evicted first regardless. Zero means 1 minute.
	IdleAfter time.Duration
	// MaxSettleIDs bounds the settlement ids held (see [Store.Settle]),
	// each for store.SettleIDLifetime, about 85 bytes apiece (so about 90
	// MB at the default, held only while that many settlements of
	// replayable handles come within 2 minutes). The ids are held in 16
	// tables, and one scope's (one tenant's, see [Store.Settle]) in one
	// table, at most half of it: a tenant can fill only its own half.
	// Zero means DefaultMaxSettleIDs.
	MaxSettleIDs int
	// Now is the clock. Zero means the system clock, read as the monotonic
	// time since New (one clock read per call; immune to wall-clock steps).
	Now func() time.Time
}

// DefaultMaxBytes is the byte bound of a store whose Config.MaxBytes is
// zero: 128 MiB.
const DefaultMaxBytes = 128 << 20

// EntryBytes is what one key costs beyond its own bytes and its sliding
// log: the entry, its index cell and the allocator's rounding, measured.
const EntryBytes = 160

// Store is the in-memory store. It is safe for concurrent use.
type Store struct {
	shards   []shard
	mask     uint64
	perShard int
	maxBytes int64 // per shard
	seed     maphash.Seed
	idle     int64            // µs
	now      func() time.Time // nil: the monotonic clock since base
	base     time.Time
	baseUs   int64
	slots    slotShards        // concurrency slots (slots.go)
	ids      [idShards]idTable // settlement ids (settle.go)
	maxIDs   int               // per idTable
}

// nowUs reads the store's clock in µs since the epoch.
func (s *Store) nowUs() int64 {
	if s.now != nil {
		return s.now().UnixMicro()
	}
	return s.baseUs + int64(time.Since(s.base)/time.Microsecond)
}

// shard is one independently locked part of the store: an open-addressed
// index over pages of entries, and the entries' LRU ring. See table.go.
type shard struct {
	// The first cache line holds what every call writes (the lock, the
	// clock floor, the call count) and the index header it reads; the
	// rest is read-mostly.
	mu    sync.Mutex
	last  int64              // µs: the latest clock reading decided under this lock
	ops   uint32             // calls since the shard last reaped
	memoI uint32             // the memo entry to replace next
	slots []slot             // open-addressed index, a power of two long
	n     int                // entries held
	pages []*[pageSize]entry // the entries; entry 0 is the LRU ring's root
	high  uint32             // entries ever allocated, root included
	free  uint32             // head of the free list (through next), 0: empty
	memo  [memoSize]algo.Compiled
	bytes int64    // bytes held, as charge counts them
	_     [96]byte // a whole number of cache line pairs: no false sharing (TestShardSize)
}

// memoSize is how many compiled limits a shard remembers. The limits of a
// policy are few, so a shard sees the same ones again and again.
const memoSize = 4

// compiled returns l compiled, from the memo when l is there, else
// compiling it into the memo. It returns nil when l is not valid. The
// caller holds sh.mu.
func (sh *shard) compiled(l *algo.Limit) *algo.Compiled {
	for i := range sh.memo {
		if sh.memo[i].Limit() == *l {
			return &sh.memo[i]
		}
	}
	c, err := l.Compile()
	if err != nil {
		return nil
	}
	i := sh.memoI
	sh.memoI = (i + 1) % memoSize
	sh.memo[i] = c
	return &sh.memo[i]
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
		maxBytes: max(1, (cmp.Or(c.MaxBytes, DefaultMaxBytes)+int64(n)-1)/int64(n)),
		seed:     maphash.MakeSeed(),
		now:      c.Now,
	}
	if s.now == nil {
		s.base = time.Now()
		s.baseUs = s.base.UnixMicro()
	}
	s.maxIDs = max(1, (cmp.Or(c.MaxSettleIDs, DefaultMaxSettleIDs)+idShards-1)/idShards)
	s.idle = int64(c.IdleAfter / time.Microsecond)
	if s.idle <= 0 {
		s.idle = int64(time.Minute / time.Microsecond)
	}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.init()
	}
	return s
}

// Local reports true: the store decides in this process. See [store.Local].
func (s *Store) Local() bool { return true }

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
	if len(checks) == 1 {
		return s.takeOne(ctx, fixed, us, checks, res)
	}
	if !plausible(checks) {
		return store.Validate(checks)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	n := len(checks)

	var hBuf [batchInline]uint64
	var idxBuf, lockBuf [batchInline]uint32
	var entBuf [batchInline]uint32
	var stBuf [batchInline]algo.State
	var outBuf [batchInline]algo.Outcome
	var clBuf [batchInline]algo.Compiled
	hs, idx, locks, ents, sts, outs, cls := hBuf[:0], idxBuf[:0], lockBuf[:0], entBuf[:0], stBuf[:0], outBuf[:0], clBuf[:0]
	if n > batchInline {
		hs, idx, locks = make([]uint64, 0, n), make([]uint32, 0, n), make([]uint32, 0, n)
		ents, sts, outs = make([]uint32, 0, n), make([]algo.State, 0, n), make([]algo.Outcome, 0, n)
		cls = make([]algo.Compiled, 0, n)
	}
	for i := range checks {
		h := maphash.String(s.seed, checks[i].Key)
		hs, idx = append(hs, h), append(idx, uint32(h&s.mask))
	}
	locks = sortedUnique(append(locks, idx...))
	if !fixed {
		us = s.nowUs()
	}
	us = s.lock(locks, fixed, us)
	// The limits, compiled (copied: a later check may replace a memo entry).
	for i := range checks {
		cl := s.shards[idx[i]].compiled(&checks[i].Limit)
		if cl == nil {
			for _, l := range locks {
				s.shards[l].mu.Unlock()
			}
			return store.Validate(checks)
		}
		cls = append(cls, *cl)
	}

	// Entries found are pinned until the batch is done, so that inserting
	// another of its keys cannot evict them.
	allowed := true
	for i := range checks {
		c := &checks[i]
		sh := &s.shards[idx[i]]
		ei := sh.lookup(uint32(hs[i]>>32), c.Limit.Algorithm, c.Key)
		var st algo.State
		if ei != 0 {
			e := sh.at(ei)
			st, e.pinned = e.st, true
		}
		o, next := cls[i].Eval(st, us, c.Cost)
		allowed = allowed && o.Allowed
		ents, sts, outs = append(ents, ei), append(sts, next), append(outs, o)
	}
	s.write(checks, hs, idx, ents, sts, outs, cls, allowed, us)
	s.unlock(locks, us)

	res.Allowed = allowed
	res.Now = time.UnixMicro(us)
	res.Decisions = res.Decisions[:0]
	for i := range checks {
		res.Decisions = append(res.Decisions, outs[i].Decision(checks[i].Limit))
	}
	return nil
}

// lock takes a batch's shards, in order, and returns the batch's time:
// us, or, on the store's clock, never earlier than any of the shards has
// seen (a batch never moves a key back in time).
func (s *Store) lock(locks []uint32, fixed bool, us int64) int64 {
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
	return us
}

// write ends a batch under its locks: charges every check when all
// admitted, reports an uncharged peek for a check another one rejected,
// writes back clamped GCRA state, and unpins the entries.
func (s *Store) write(checks []store.Check, hs []uint64, idx, ents []uint32, sts []algo.State, outs []algo.Outcome, cls []algo.Compiled, allowed bool, us int64) {
	for i := range checks {
		c := &checks[i]
		sh := &s.shards[idx[i]]
		switch {
		case allowed && c.Cost > 0:
			if ents[i] == 0 {
				ents[i] = sh.insert(uint32(hs[i]>>32), c.Limit.Algorithm, c.Key, us, s.perShard)
				sh.at(ents[i]).pinned = true
			}
			e := sh.at(ents[i])
			e.st, e.exp = sts[i], us+outs[i].ResetUs
			sh.touch(ents[i], us)
			sh.charge(ents[i], s.maxBytes, us)
		case !allowed && outs[i].Allowed && c.Cost > 0:
			// Uncharged because another check rejected: report a peek.
			var st algo.State
			if ents[i] != 0 {
				st = sh.at(ents[i]).st
			}
			outs[i], sts[i] = cls[i].Eval(st, us, 0)
			fallthrough
		default:
			if ents[i] != 0 {
				if e := sh.at(ents[i]); c.Limit.Algorithm == algo.GCRA && sts[i].A != e.st.A {
					// A TAT written under a slower limit, clamped to this one.
					e.st, e.exp = sts[i], sts[i].A
				}
				sh.touch(ents[i], us)
			}
		}
	}
	for i, ei := range ents {
		if ei != 0 {
			s.shards[idx[i]].at(ei).pinned = false
		}
	}
}

// unlock releases a batch's shards, reaping idle keys every reapEvery
// batches of a shard.
func (s *Store) unlock(locks []uint32, us int64) {
	for _, l := range locks {
		sh := &s.shards[l]
		if sh.ops++; sh.ops >= reapEvery {
			sh.ops = 0
			sh.reap(us-s.idle, 2*reapEvery)
		}
		sh.mu.Unlock()
	}
}

// plausible reports whether checks pass store.Validate's checks other than
// the validity of each limit, which the shards' memos of compiled limits
// check; when it says no, store.Validate gives the error.
func plausible(checks []store.Check) bool {
	if len(checks) == 0 || len(checks) > store.MaxBatch {
		return false
	}
	for i := range checks {
		c := &checks[i]
		if c.Key == "" || c.Limit.Limit < 1 || c.Cost < 0 || c.Cost > c.Limit.Capacity() {
			return false
		}
		for j := range i {
			if checks[j].Key == c.Key && checks[j].Limit.Algorithm == c.Limit.Algorithm {
				return false
			}
		}
	}
	return true
}

// takeOne is take for a batch of one check: the same steps without the
// bookkeeping a batch needs. The limit is validated through the shard's
// memo of compiled limits (see [shard.compiled]); anything amiss is
// reported by store.Validate, so the errors are the batch path's.
func (s *Store) takeOne(ctx context.Context, fixed bool, us int64, checks []store.Check, res *store.Result) error {
	c := &checks[0]
	if !plausible(checks) {
		return store.Validate(checks)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	h := maphash.String(s.seed, c.Key)
	sh := &s.shards[h&s.mask]
	if !fixed {
		us = s.nowUs()
	}
	sh.mu.Lock()
	cl := sh.compiled(&c.Limit)
	if cl == nil {
		sh.mu.Unlock()
		return store.Validate(checks)
	}
	if !fixed {
		us = max(us, sh.last)
		sh.last = us
	}
	tag := uint32(h >> 32)
	ei := sh.lookup(tag, c.Limit.Algorithm, c.Key)
	var fresh algo.State
	st := &fresh
	if ei != 0 {
		st = &sh.at(ei).st
	}
	o := cl.Apply(st, us, c.Cost) // changes *st only when it charges
	if o.Allowed && c.Cost > 0 {
		if ei == 0 {
			ei = sh.insert(tag, c.Limit.Algorithm, c.Key, us, s.perShard)
			sh.at(ei).st = fresh
		}
		sh.at(ei).exp = us + o.ResetUs
		if c.Limit.Algorithm == algo.SlidingLog || sh.at(ei).size == 0 {
			e := sh.at(ei)
			e.pinned = true
			sh.charge(ei, s.maxBytes, us)
			e.pinned = false
		}
	}
	if ei != 0 {
		sh.touch(ei, us)
	}
	if sh.ops++; sh.ops >= reapEvery {
		sh.ops = 0
		sh.reap(us-s.idle, 2*reapEvery)
	}
	sh.mu.Unlock()
	res.Allowed = o.Allowed
	res.Now = time.UnixMicro(us)
	res.Decisions = append(res.Decisions[:0], o.Decision(c.Limit))
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

// Close does nothing: the store holds no resources but memory. It exists
// to satisfy [store.Store]; a closed Store still answers.
func (s *Store) Close() error { return nil }

var _ store.Store = (*Store)(nil)
var _ store.Resetter = (*Store)(nil)
var _ store.Local = (*Store)(nil)
