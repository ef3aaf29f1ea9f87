package memstore

import "github.com/fairgate/fairgate/algo"

// A shard's table: entries live in fixed pages that never move, addressed
// by a uint32 index (0 is the LRU ring's root, never a key); an
// open-addressed index with linear probing maps a key's hash to its entry.
// Compared with a Go map of pointers, a lookup touches one small slot array
// and the entry itself, and holding a key costs no pointer for the garbage
// collector to trace but the key's string and a sliding log's slice.

// slot is one cell of the index: the upper 32 bits of the key's hash (the
// lower bits chose the shard) and the entry's index, 0 when empty.
type slot struct{ tag, idx uint32 }

const (
	pageBits = 7
	pageSize = 1 << pageBits
	minSlots = 8
)

// entry is one key's state.
type entry struct {
	key        string
	st         algo.State
	exp        int64  // µs: the state carries no information from then on
	moved      int64  // µs: when touch last moved it to the front
	prev, next uint32 // LRU ring: root.next is the most recent, root.prev the least
	tag        uint32
	size       uint32 // bytes charged to the shard (charge)
	alg        algo.Algorithm
	pinned     bool // part of the batch being decided: not to be evicted
}

// charge counts entry i's bytes (EntryBytes, its key, 8 per sliding log
// entry) in the shard's total and, while the total is over limit, evicts
// other entries as evictOne chooses. The caller holds sh.mu and has pinned
// i (or i is part of a pinned batch).
func (sh *shard) charge(i uint32, limit, now int64) {
	e := sh.at(i)
	size := uint32(EntryBytes + len(e.key) + 8*cap(e.st.Log))
	sh.bytes += int64(size) - int64(e.size)
	e.size = size
	for sh.bytes > limit && sh.n > 1 {
		if !sh.evictOne(now) {
			return
		}
	}
}

func (sh *shard) init() {
	sh.bytes = 0
	sh.slots = make([]slot, minSlots)
	sh.pages = []*[pageSize]entry{new([pageSize]entry)}
	sh.high, sh.free, sh.n = 1, 0, 0 // entry 0 is the root
}

// at returns the entry with index i.
func (sh *shard) at(i uint32) *entry { return &sh.pages[i>>pageBits][i&(pageSize-1)] }

// lookup returns the index of the entry for (alg, key) whose hash has the
// upper half tag, or 0. The caller holds sh.mu.
func (sh *shard) lookup(tag uint32, alg algo.Algorithm, key string) uint32 {
	m := uint32(len(sh.slots) - 1)
	for p := tag & m; ; p = (p + 1) & m {
		s := sh.slots[p]
		if s.idx == 0 {
			return 0
		}
		if s.tag == tag {
			if e := sh.at(s.idx); e.alg == alg && e.key == key {
				return s.idx
			}
		}
	}
}

// insert adds an entry for (alg, key), evicting one first when the shard
// holds limit entries, and returns its index. The caller holds sh.mu and
// has checked that the key is absent.
func (sh *shard) insert(tag uint32, alg algo.Algorithm, key string, now int64, limit int) uint32 {
	if sh.n >= limit {
		sh.evictOne(now)
	}
	if (sh.n+1)*4 > len(sh.slots)*3 {
		sh.resize(len(sh.slots) * 2)
	}
	i := sh.free
	if i != 0 {
		sh.free = sh.at(i).next
	} else {
		i = sh.high
		if i&(pageSize-1) == 0 {
			sh.pages = append(sh.pages, new([pageSize]entry))
		}
		sh.high++
	}
	e := sh.at(i)
	*e = entry{key: key, tag: tag, alg: alg, moved: now}
	sh.place(slot{tag, i})
	root := sh.at(0)
	e.prev, e.next = 0, root.next
	sh.at(root.next).prev, root.next = i, i
	sh.n++
	return i
}

// place puts s into the first free cell of its probe sequence.
func (sh *shard) place(s slot) {
	m := uint32(len(sh.slots) - 1)
	p := s.tag & m
	for sh.slots[p].idx != 0 {
		p = (p + 1) & m
	}
	sh.slots[p] = s
}

// resize rebuilds the index with n cells.
func (sh *shard) resize(n int) {
	old := sh.slots
	sh.slots = make([]slot, n)
	for _, s := range old {
		if s.idx != 0 {
			sh.place(s)
		}
	}
}

// evictScan is how many of the least recently used entries eviction looks
// at for an expired one before it takes the least recently used.
const evictScan = 8

// evictOne removes an expired entry near the LRU end, else the least
// recently used entry that is not pinned, and reports whether it removed
// one. With every candidate pinned (a batch larger than the shard's share
// of MaxKeys) it removes nothing and the shard holds one more key until
// the next insert.
func (sh *shard) evictOne(now int64) bool {
	var victim uint32
	e := sh.at(0)
	for i, seen := e.prev, 0; i != 0; i = e.prev {
		e = sh.at(i)
		if e.pinned {
			continue
		}
		if victim == 0 {
			victim = i
		}
		if e.exp <= now {
			victim = i
			break
		}
		if seen++; seen >= evictScan {
			break
		}
	}
	if victim != 0 {
		sh.remove(victim)
	}
	return victim != 0
}

// reap removes up to n unpinned entries from the LRU end that expired
// before t.
func (sh *shard) reap(t int64, n int) {
	for range n {
		i := sh.at(0).prev
		if e := sh.at(i); i == 0 || e.exp > t || e.pinned {
			return
		}
		sh.remove(i)
	}
}

// remove deletes entry i from the index and the ring and frees it.
func (sh *shard) remove(i uint32) {
	e := sh.at(i)
	m := uint32(len(sh.slots) - 1)
	p := e.tag & m
	for sh.slots[p].idx != i {
		p = (p + 1) & m
	}
	// Backward-shift deletion: move later cells of the run into the hole
	// when their home position allows it, so no tombstones are needed.
	hole := p
	for j := (hole + 1) & m; sh.slots[j].idx != 0; j = (j + 1) & m {
		home := sh.slots[j].tag & m
		var stays bool // home lies cyclically in (hole, j]
		if hole <= j {
			stays = hole < home && home <= j
		} else {
			stays = hole < home || home <= j
		}
		if !stays {
			sh.slots[hole] = sh.slots[j]
			hole = j
		}
	}
	sh.slots[hole] = slot{}
	sh.bytes -= int64(e.size)
	sh.at(e.prev).next, sh.at(e.next).prev = e.next, e.prev
	*e = entry{next: sh.free}
	sh.free = i
	sh.n--
	if sh.n == 0 {
		sh.init() // give back the pages and index of a burst
	}
}

// touchEvery is how often a busy key moves to the front of the LRU ring:
// the order is kept to within this much, which is all eviction needs, and a
// key used again and again does not write to its neighbours every time.
const touchEvery = 1_000_000 // µs

// touch moves entry i to the most recently used end, at most once per
// touchEvery.
func (sh *shard) touch(i uint32, now int64) {
	e, root := sh.at(i), sh.at(0)
	if root.next == i || now-e.moved < touchEvery && now >= e.moved {
		return
	}
	e.moved = now
	sh.at(e.prev).next, sh.at(e.next).prev = e.next, e.prev
	e.prev, e.next = 0, root.next
	sh.at(root.next).prev, root.next = i, i
}
