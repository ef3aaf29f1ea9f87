package redisstore

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/fairgate/fairgate/store"
)

// Coalescing: the batches that concurrent callers send to one slot while
// earlier calls to it are in flight are merged into one script call
// (lua/take_multi.lua) that decides each batch as its own atomic step, in
// order. Redis's cost per call (the command, TIME, the script's start) is
// then shared. Nothing waits on a timer: a batch is sent at once when no
// call to its slot is in flight, and otherwise joins the next call, which
// leaves when the one in flight returns. Only when a full call's worth
// (maxMerge batches) waits does a second call, and up to maxInflight,
// go out beside it: merging at low concurrency, the throughput of
// parallel calls at high.
//
// Settlements' parts are merged the same way (lua/settle_multi.lua, in
// settle.go), in coalescers of their own (settleKeyBit), so that a merged
// call is all takes or all settlements.
const (
	maxInflight = 4  // script calls in flight per slot, at most
	maxMerge    = 64 // batches merged into one call
)

// settleKeyBit marks the coalescer key of settlements' parts: the same
// slot or node as a take's key, in a coalescer of its own.
const settleKeyBit = 1 << 16

// multiScripts and multi1Scripts hold take_multi.lua and take1_multi.lua
// (every batch one check) per set of algorithms.
var multiScripts, multi1Scripts = func() (m, m1 [allAlgorithms + 1]*rueidis.Lua) {
	for i := 1; i <= allAlgorithms; i++ {
		m[i] = rueidis.NewLuaScriptRetryable(script("take_multi", uint8(i)))
		m1[i] = rueidis.NewLuaScriptRetryable(script("take1_multi", uint8(i)))
	}
	return m, m1
}()

// request is one part waiting in a coalescer: a take's or a settlement's.
type request struct {
	ctx   context.Context
	p     *part       // a take's part, or nil
	sp    *settlePart // a settlement's part, or nil
	reply []int64     // a takeReply, or settle.lua's reply: as for this part alone
	err   error
	done  chan struct{}
	// alone marks a request a node refused, sent again on its own
	// (resendAlone), which closes done itself.
	alone bool
}

type coalescer struct {
	mu       sync.Mutex
	queue    []*request
	inflight int
}

// coalescerFor returns the coalescer of a key: a slot (the only one,
// standalone), or nodeKeyBit | a node's index in the slot map (node.go);
// with settleKeyBit, settlements' (see coKey).
func (s *Store) coalescerFor(key uint32) *coalescer {
	s.coMu.Lock()
	defer s.coMu.Unlock()
	c := s.co[key]
	if c == nil {
		if s.co == nil {
			s.co = make(map[uint32]*coalescer)
		}
		c = &coalescer{}
		s.co[key] = c
	}
	return c
}

// coKey returns the coalescer key of a part for slot: the slot, or on a
// Cluster the node that serves it when the store's slot map knows it
// (merged with the node's other slots, node.go).
func (s *Store) coKey(slot uint16) uint32 {
	if s.cluster {
		if n, ok := s.nodeOf(slot); ok {
			return nodeKeyBit | uint32(n)
		}
	}
	return uint32(slot)
}

// decide runs part p's take, merged with concurrent ones for its slot, and
// fills p.reply as run would. If ctx ends first it returns ctx's error; a
// batch already sent may still be charged then, which errs toward limiting.
func (s *Store) decide(ctx context.Context, p *part) {
	if s.noCoalesce {
		s.runPart(ctx, p)
		return
	}
	if r, merged := s.merge(ctx, s.coKey(p.slot), p, nil, func() { s.runPart(ctx, p) }); merged {
		p.reply, p.err = r.reply, r.err
	}
}

// merge sends a take's part p or a settlement's part sp through the
// coalescer of key: from this goroutine (alone runs it) when nothing is in
// flight or queued there, else in the next merged call. merged reports
// the latter; r then holds the call's answer, or ctx's error if ctx ended
// first.
func (s *Store) merge(ctx context.Context, key uint32, p *part, sp *settlePart, alone func()) (r *request, merged bool) {
	c := s.coalescerFor(key)
	r = s.enqueue(ctx, c, p, sp)
	if r == nil { // nothing to merge with: send it from this goroutine
		alone()
		s.release(c)
		return nil, false
	}
	select {
	case <-r.done:
		return r, true
	case <-ctx.Done():
		return &request{err: fmt.Errorf("%w: %w", store.ErrUnavailable, ctx.Err())}, true
	}
}

// enqueue queues a request for p (a take's part) or sp (a settlement's)
// in c and returns it, starting a flusher when none runs or a full call
// waits. When nothing is in flight or queued it queues nothing and
// returns nil: the caller has c's call in flight, sends its part itself,
// then calls release.
func (s *Store) enqueue(ctx context.Context, c *coalescer, p *part, sp *settlePart) *request {
	c.mu.Lock()
	if c.inflight == 0 && len(c.queue) == 0 {
		c.inflight++
		c.mu.Unlock()
		return nil
	}
	r := &request{ctx: ctx, p: p, sp: sp, done: make(chan struct{})}
	c.queue = append(c.queue, r)
	start := c.inflight == 0 || len(c.queue) >= maxMerge && c.inflight < maxInflight
	if start {
		c.inflight++
	}
	c.mu.Unlock()
	if start {
		go s.flush(c)
	}
	return r
}

// runPart sends part p alone: take1.lua for one check, else take_multi.lua
// with one batch (whose reply has the same layout).
func (s *Store) runPart(ctx context.Context, p *part) {
	if len(p.idx) == 1 {
		s.run(ctx, take1Scripts[p.algos], p)
		return
	}
	msgs, err := s.exec(ctx, multiScripts[p.algos], p.keys, mergedArgs([]*part{p}, false))
	if err != nil {
		p.err = fmt.Errorf("%w: %w", store.ErrUnavailable, err)
		return
	}
	p.reply, p.err = integers(p.reply[:0], msgs, takeHead+takePer*len(p.idx))
}

// release gives back a call's place in flight, handing it to a flusher when
// batches queued meanwhile.
func (s *Store) release(c *coalescer) {
	c.mu.Lock()
	if len(c.queue) > 0 {
		c.mu.Unlock()
		go s.flush(c)
		return
	}
	c.inflight--
	c.mu.Unlock()
}

// flush sends the queued requests of c, up to maxMerge a call, until none
// are left.
func (s *Store) flush(c *coalescer) {
	for {
		c.mu.Lock()
		n := min(len(c.queue), maxMerge)
		if n == 0 {
			c.inflight--
			c.mu.Unlock()
			return
		}
		batch := make([]*request, 0, n)
		for _, r := range c.queue[:n] {
			if r.ctx.Err() == nil { // a caller that gave up is not charged
				batch = append(batch, r)
			}
		}
		c.queue = append(c.queue[:0], c.queue[n:]...)
		c.mu.Unlock()
		if len(batch) > 0 {
			s.send(batch)
		}
	}
}

// send decides the requests, all takes or all settlements, in one script
// call and answers each.
func (s *Store) send(batch []*request) {
	defer func() {
		for _, r := range batch {
			if !r.alone {
				close(r.done)
			}
		}
	}()
	// The call lives as long as its most patient caller, at most 5 s.
	limit := time.Now().Add(5 * time.Second)
	var deadline time.Time
	for _, r := range batch {
		d, ok := r.ctx.Deadline()
		if !ok || d.After(limit) {
			d = limit
		}
		if d.After(deadline) {
			deadline = d
		}
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	if batch[0].sp != nil {
		s.sendSettles(ctx, batch)
	} else {
		s.sendTakes(ctx, batch)
	}
}

// sendTakes decides the take requests in one script call and answers each.
func (s *Store) sendTakes(ctx context.Context, batch []*request) {
	if len(batch) == 1 {
		r := batch[0]
		// Only the request's inputs: the caller may write its own reply and
		// error fields once it stops waiting.
		p := part{idx: r.p.idx, slot: r.p.slot, algos: r.p.algos, keys: r.p.keys, checks: r.p.checks}
		s.runPart(ctx, &p)
		r.reply, r.err = p.reply, p.err
		return
	}
	// A merged call that Redis answers TRYAGAIN (its slot migrating, see
	// tryAgain) goes again, paced, without the batches whose callers gave
	// up meanwhile: those are never charged.
	var ta tryAgain
	for live := batch; ; {
		err := s.sendMerged(ctx, live)
		if !isTryAgain(err) {
			return
		}
		if !ta.next(ctx) {
			err = fmt.Errorf("%w: %w", store.ErrUnavailable, migrating(ctx, err))
			for _, r := range live {
				r.err = err
			}
			return
		}
		live = slices.DeleteFunc(slices.Clone(live), func(r *request) bool { return r.ctx.Err() != nil })
		if len(live) == 0 {
			return
		}
	}
}

// sendMerged decides the requests of batch in one script call and answers
// each, with the call's error when it failed; it returns that error as
// Redis or the client gave it, for send to tell a TRYAGAIN.
func (s *Store) sendMerged(ctx context.Context, batch []*request) error {
	var mask uint8
	singles, oneSlot := true, true
	ps := make([]*part, len(batch))
	nkeys := 0
	for i, r := range batch {
		mask |= r.p.algos
		singles = singles && len(r.p.idx) == 1
		oneSlot = oneSlot && r.p.slot == batch[0].p.slot
		ps[i] = r.p
		nkeys += len(r.p.keys)
	}
	// Several slots: merged by node (node.go), whose call declares no key
	// and so is never answered TRYAGAIN; the batches it sends again alone
	// wait out their own.
	if !oneSlot && s.sendNode(ctx, batch, mask, nkeys) {
		return nil
	}
	if !oneSlot { // the node left the map: each alone
		for _, r := range batch {
			p := part{idx: r.p.idx, slot: r.p.slot, algos: r.p.algos, keys: r.p.keys, checks: r.p.checks}
			s.runPart(ctx, &p)
			r.reply, r.err = p.reply, p.err
		}
		return nil
	}
	keys := make([]string, 0, nkeys)
	for _, r := range batch {
		keys = append(keys, r.p.keys...)
	}
	sc, head := multiScripts[mask], 1 // take_multi.lua: batch_allowed, then its checks
	if singles {
		sc, head = multi1Scripts[mask], 0 // take1_multi.lua: the check alone
	}
	msgs, callErr := sc.Exec(ctx, s.c, keys, mergedArgs(ps, singles)).ToArray()
	var err error
	if callErr != nil {
		err = fmt.Errorf("%w: %w", store.ErrUnavailable, callErr)
	}
	var vals []int64
	if err == nil {
		vals, err = integers(nil, msgs, 1+head*len(batch)+takePer*nkeys)
	}
	if err != nil {
		for _, r := range batch {
			r.err = err
		}
		return callErr
	}
	// Each caller's reply as take_multi.lua's for its batch alone (a
	// takeReply; a single check's allowed is its batch's).
	o := 1
	for _, r := range batch {
		n := head + takePer*len(r.p.idx)
		r.reply = make([]int64, 0, takeHead+takePer*len(r.p.idx))
		r.reply = append(r.reply, vals[0])
		if head == 0 {
			r.reply = append(r.reply, vals[o])
		}
		r.reply = append(r.reply, vals[o:o+n]...)
		r.err = nil // a try before may have failed
		o += n
	}
	return nil
}

// mergedArgs encodes the batches ps for take_multi.lua (singles: for
// take1_multi.lua, where every batch is one check and has no count): the
// distinct limits once, then per check cost × L + the index of its limit
// among the L. cost ≤ 1e9 and L ≤ maxMerge × store.MaxBatch keep the
// value below 2^53, exact in Lua's doubles.
func mergedArgs(ps []*part, singles bool) []string {
	var lt limitTable
	var which []int // per check, its limit's index
	for _, p := range ps {
		for _, w := range p.checks {
			which = append(which, lt.index(w.limit()))
		}
	}
	args := make([]string, 0, 2+4*len(lt.lims)+len(ps)+len(which))
	args = lt.appendArgs(append(args, strconv.Itoa(len(ps))))
	n, k := int64(len(lt.lims)), 0
	for _, p := range ps {
		if !singles {
			args = append(args, strconv.Itoa(len(p.idx)))
		}
		for _, w := range p.checks {
			args = append(args, itoa(w.cost*n+int64(which[k])))
			k++
		}
	}
	return args
}

// limitTable numbers the distinct limits (algorithm code, p1, p2, p3) of a
// merged call, which the merged scripts read once (lib.lua's limits).
type limitTable struct {
	lims  [][4]int64
	byLim map[[4]int64]int // past a few limits, their indexes
}

// index returns l's index in the table, adding it if new.
func (t *limitTable) index(l [4]int64) int {
	li := -1
	if t.byLim == nil {
		li = slices.Index(t.lims, l)
	} else if k, ok := t.byLim[l]; ok {
		li = k
	}
	if li < 0 {
		li = len(t.lims)
		t.lims = append(t.lims, l)
		if len(t.lims) == 8 { // past a few, a linear search costs more than a map
			t.byLim = make(map[[4]int64]int)
			for k, l := range t.lims {
				t.byLim[l] = k
			}
		} else if t.byLim != nil {
			t.byLim[l] = li
		}
	}
	return li
}

// appendArgs appends the table as lib.lua's limits reads it: the number of
// limits L, then 4 values each.
func (t *limitTable) appendArgs(args []string) []string {
	args = append(args, strconv.Itoa(len(t.lims)))
	for _, l := range t.lims {
		args = append(args, algoArgs[l[0]], itoa(l[1]), itoa(l[2]), itoa(l[3]))
	}
	return args
}
