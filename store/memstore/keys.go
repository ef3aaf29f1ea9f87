package memstore

import (
	"context"
	"fmt"
	"hash/maphash"
	"time"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/store"
)

// Reset forgets key's state under every algorithm. See [store.Resetter].
func (s *Store) Reset(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	h := maphash.String(s.seed, key)
	sh := &s.shards[h&s.mask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for _, a := range algo.Algorithms {
		if ei := sh.lookup(uint32(h>>32), a, key); ei != 0 {
			sh.remove(ei)
		}
	}
	return nil
}

// Bytes returns the bytes the store holds, as Config.MaxBytes counts them.
func (s *Store) Bytes() int64 {
	var n int64
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.bytes
		sh.mu.Unlock()
	}
	return n
}

// Hold makes key admit nothing for d under lim. See [store.Holder].
func (s *Store) Hold(ctx context.Context, key string, lim algo.Limit, d time.Duration) error {
	if err := store.ValidateHold(key, lim, d); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if d <= 0 {
		return nil
	}
	h := maphash.String(s.seed, key)
	sh := &s.shards[h&s.mask]
	us := s.nowUs()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	us = max(us, sh.last)
	sh.last = us
	tag := uint32(h >> 32)
	ei := sh.lookup(tag, lim.Algorithm, key)
	var st algo.State
	if ei != 0 {
		st = sh.at(ei).st
	}
	next, reset, err := lim.Hold(st, us, us+int64(d/time.Microsecond))
	if err != nil {
		return fmt.Errorf("%w: hold of key %q: %w", store.ErrInvalidCheck, key, err)
	}
	if next.A == st.A && ei != 0 {
		sh.touch(ei, us)
		return nil
	}
	if ei == 0 {
		ei = sh.insert(tag, lim.Algorithm, key, us, s.perShard)
	}
	e := sh.at(ei)
	e.st, e.exp = next, us+reset
	sh.touch(ei, us)
	e.pinned = true
	sh.charge(ei, s.maxBytes, us)
	e.pinned = false
	return nil
}

// Sweep removes every expired key, idle or not, and returns how many it
// removed. Idle keys are also removed as traffic passes; call Sweep to
// reclaim memory after a burst of distinct keys with no traffic since. The
// slots of removed keys are reused by later keys; a shard left empty gives
// its memory back.
func (s *Store) Sweep() int {
	now := s.nowUs()
	removed := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for ei := sh.at(0).next; ei != 0 && sh.n > 0; {
			e := sh.at(ei)
			next := e.next
			if e.exp <= now {
				sh.remove(ei)
				removed++
			}
			ei = next
		}
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
	ei := sh.lookup(uint32(h>>32), alg, key)
	if ei == 0 {
		return algo.State{}, false
	}
	return sh.at(ei).st, true
}
