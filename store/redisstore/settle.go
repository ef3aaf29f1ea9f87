package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/fairgate/fairgate/store"
)

// settlePart is the adjustments of one settlement that one script call
// applies: those whose keys share a cluster slot (all of them on
// standalone Redis).
type settlePart struct {
	idx   []int // indexes into the settlement
	slot  uint16
	algos uint8
	keys  []string // the id record's key, then one state key per adjustment
	adjs  []wireAdj
	reply []int64 // settle.lua's reply
	err   error
}

// The lengths of settle.lua's reply: now and repeated, then applied,
// remaining and reset per adjustment.
const settleHead, settlePer = 2, 3

// Settle applies settlement id's adjustments, exactly once per id in each
// failure domain: one part per cluster slot (one on standalone Redis),
// applied at Redis's TIME, that records id in that slot (a key
// "<prefix>s:{<tag>}<id>" whose hash tag puts it in the slot, alive for
// store.SettleIDLifetime) in the same atomic step as it applies the
// slot's adjustments. Concurrent settlements' parts for one slot (on a
// Cluster, one node) are merged into one script call, as takes are
// (coalesce.go), each still its own atomic step. The parts of several
// slots run in parallel; when one fails, the others are applied all the
// same, and a retry with the same id applies only the one that failed.
// See [store.Settler].
func (s *Store) Settle(ctx context.Context, id string, adjs []store.Adjustment, res *store.SettleResult) error {
	if err := store.ValidateSettle(id, adjs); err != nil {
		return err
	}
	parts := s.settleParts(id, adjs)
	if len(parts) == 1 {
		s.settle(ctx, &parts[0])
	} else {
		var wg sync.WaitGroup
		for g := range parts {
			wg.Go(func() { s.settle(ctx, &parts[g]) })
		}
		wg.Wait()
	}
	if cap(res.Settled) < len(adjs) {
		res.Settled = make([]store.Settled, len(adjs))
	}
	res.Settled = res.Settled[:len(adjs)]
	var failed error
	var now int64
	for g := range parts {
		p := &parts[g]
		if p.err != nil {
			failed = p.err
			continue
		}
		now = max(now, p.reply[0])
		for j, i := range p.idx {
			v := p.reply[settleHead+settlePer*j:]
			res.Settled[i] = store.Settled{Applied: v[0], Remaining: v[1], ResetAfter: time.Duration(v[2]) * time.Microsecond, Repeated: p.reply[1] == 1}
		}
	}
	res.Now = time.UnixMicro(now)
	return failed
}

// settleParts groups adjs by cluster slot, in first-seen order, and
// encodes each group's keys and adjustments.
func (s *Store) settleParts(id string, adjs []store.Adjustment) []settlePart {
	var parts []settlePart
	for i := range adjs {
		a := &adjs[i]
		k := s.Key(a.Limit.Algorithm, a.Key)
		var sl uint16
		if s.cluster {
			sl = slot(k)
		}
		g := 0
		for g < len(parts) && parts[g].slot != sl {
			g++
		}
		if g == len(parts) {
			parts = append(parts, settlePart{slot: sl, keys: []string{s.settleKey(id, sl)}})
		}
		p := &parts[g]
		p.idx = append(p.idx, i)
		p.algos |= 1 << a.Limit.Algorithm
		p.keys = append(p.keys, k)
		p.adjs = append(p.adjs, newWireAdj(a))
	}
	return parts
}

// settle applies part p, merged with concurrent settlements' parts for its
// slot (on a Cluster, its node), and fills p.reply as runSettle would. If
// ctx ends first it returns ctx's error; a part already sent may still be
// applied then, and a retry with the same id applies nothing twice.
func (s *Store) settle(ctx context.Context, p *settlePart) {
	if s.noCoalesce {
		s.runSettle(ctx, p)
		return
	}
	if r, merged := s.merge(ctx, settleKeyBit|s.coKey(p.slot), nil, p, func() { s.runSettle(ctx, p) }); merged {
		p.reply, p.err = r.reply, r.err
	}
}

// lifetimeArg is store.SettleIDLifetime in ms, the id records' PX.
var lifetimeArg = itoa(int64(store.SettleIDLifetime / time.Millisecond))

// runSettle runs settle.lua for p alone and reads its reply.
func (s *Store) runSettle(ctx context.Context, p *settlePart) {
	args := make([]string, 1, 1+6*len(p.adjs))
	args[0] = lifetimeArg
	for _, w := range p.adjs {
		args = w.appendArgs(args)
	}
	msgs, err := s.exec(ctx, settleScripts[p.algos], p.keys, args)
	if err != nil {
		p.err = fmt.Errorf("%w: settle: %w", store.ErrUnavailable, err)
		return
	}
	p.reply, p.err = integers(p.reply[:0], msgs, settleHead+settlePer*len(p.idx))
	if p.err == nil && p.reply[1] != 0 && p.reply[1] != 1 {
		p.err = fmt.Errorf("%w: settle replied repeated = %d", store.ErrProtocol, p.reply[1])
	}
}

// runSettleAlone runs r's part alone, through runSettle, and answers r.
func (s *Store) runSettleAlone(ctx context.Context, r *request) {
	// Only the request's inputs: the caller may write its own reply and
	// error fields once it stops waiting.
	p := settlePart{idx: r.sp.idx, slot: r.sp.slot, algos: r.sp.algos, keys: r.sp.keys, adjs: r.sp.adjs}
	s.runSettle(ctx, &p)
	r.reply, r.err = p.reply, p.err
}

// sendSettles applies the settlement parts of batch in one script call:
// settle_multi.lua when they share a slot, else (a Cluster node's slots)
// settle_node.lua; and answers each.
func (s *Store) sendSettles(ctx context.Context, batch []*request) {
	if len(batch) == 1 {
		s.runSettleAlone(ctx, batch[0])
		return
	}
	var mask uint8
	oneSlot := true
	ps := make([]*settlePart, len(batch))
	nkeys := 0
	for i, r := range batch {
		mask |= r.sp.algos
		oneSlot = oneSlot && r.sp.slot == batch[0].sp.slot
		ps[i] = r.sp
		nkeys += len(r.sp.keys)
	}
	if !oneSlot && s.sendSettleNode(ctx, batch, ps, mask, nkeys) {
		return
	}
	if !oneSlot { // the node left the map: each alone
		for _, r := range batch {
			s.runSettleAlone(ctx, r)
		}
		return
	}
	keys := make([]string, 0, nkeys)
	for _, p := range ps {
		keys = append(keys, p.keys...)
	}
	// A TRYAGAIN (the slot migrating) is waited out as for takes; the id
	// records make a call that ran apply nothing again.
	msgs, err := s.exec(ctx, settleMultiScripts[mask], keys, settleArgs(ps))
	if err != nil {
		err = fmt.Errorf("%w: settle: %w", store.ErrUnavailable, err)
	}
	var vals []int64
	if err == nil {
		vals, err = integers(nil, msgs, 1+len(batch)+settlePer*(nkeys-len(batch)))
	}
	if err != nil {
		for _, r := range batch {
			r.err = err
		}
		return
	}
	for _, r := range splitSettles(batch, vals) { // settle_multi.lua never answers "not here"
		r.err = fmt.Errorf("%w: settle replied repeated = -1", store.ErrProtocol)
	}
}

// splitSettles answers each request of batch with its part of vals, a
// merged settle script's reply, as settle.lua's for that part alone, and
// returns the requests whose part was not applied (repeated -1: the
// node did not serve its slot). A repeated flag other than 0 or 1 (or
// -1) is a store.ErrProtocol for its request.
func splitSettles(batch []*request, vals []int64) (notHere []*request) {
	o := 1
	for _, r := range batch {
		n := settlePer * len(r.sp.idx)
		switch rep := vals[o]; rep {
		case 0, 1:
			r.reply = make([]int64, 0, settleHead+n)
			r.reply = append(append(r.reply, vals[0], rep), vals[o+1:o+1+n]...)
		case -1:
			notHere = append(notHere, r)
		default:
			r.err = fmt.Errorf("%w: settle replied repeated = %d", store.ErrProtocol, rep)
		}
		o += 1 + n
	}
	return notHere
}

// settleArgs encodes the parts ps for settle_multi.lua and
// settle_node.lua: the number of parts, the distinct limits once, the id
// records' lifetime, then per part its number of adjustments and per
// adjustment delta × L + the index of its limit among the L, and its
// taken_at. |delta| ≤ algo.MaxCount and L ≤ maxMerge × store.MaxBatch
// keep the value within ±2^53, exact in Lua's doubles.
func settleArgs(ps []*settlePart) []string {
	var lt limitTable
	var which []int // per adjustment, its limit's index
	for _, p := range ps {
		for _, w := range p.adjs {
			which = append(which, lt.index(w.limit()))
		}
	}
	args := make([]string, 0, 3+4*len(lt.lims)+len(ps)+2*len(which))
	args = lt.appendArgs(append(args, strconv.Itoa(len(ps))))
	args = append(args, lifetimeArg)
	n, k := int64(len(lt.lims)), 0
	for _, p := range ps {
		args = append(args, strconv.Itoa(len(p.adjs)))
		for _, w := range p.adjs {
			args = append(args, itoa(w.delta*n+int64(which[k])), itoa(w.at))
			k++
		}
	}
	return args
}

// settleKey is the key of settlement id's record in cluster slot sl (on
// standalone Redis, the one record).
func (s *Store) settleKey(id string, sl uint16) string {
	if !s.cluster {
		return s.prefix + "s:" + id
	}
	return s.prefix + "s:{" + slotTags()[sl] + "}" + id
}

// slotTags holds, for each cluster slot, a short hash tag that hashes to
// it: what puts a settlement's id record beside the keys it settles.
var slotTags = sync.OnceValue(func() *[16384]string {
	var tags [16384]string
	for n, left := int64(0), len(tags); left > 0; n++ {
		tag := strconv.FormatInt(n, 36)
		if sl := slot(tag); tags[sl] == "" {
			tags[sl] = tag
			left--
		}
	}
	return &tags
})

var _ store.Settler = (*Store)(nil)
