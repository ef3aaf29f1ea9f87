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
	args  []string
	reply []int64
	err   error
}

// The lengths of settle.lua's reply: now and repeated, then applied,
// remaining and reset per adjustment.
const settleHead, settlePer = 2, 3

// Settle applies settlement id's adjustments, exactly once per id in each
// failure domain: one script call per cluster slot (one on standalone
// Redis), at Redis's TIME, that records id in that slot (a key
// "<prefix>s:{<tag>}<id>" whose hash tag puts it in the slot, alive for
// store.SettleIDLifetime) in the same atomic step as it applies the
// slot's adjustments. The calls of several slots run in parallel; when one
// fails, the others are applied all the same, and a retry with the same
// id applies only the one that failed. See [store.Settler].
func (s *Store) Settle(ctx context.Context, id string, adjs []store.Adjustment, res *store.SettleResult) error {
	if err := store.ValidateSettle(id, adjs); err != nil {
		return err
	}
	parts := s.settleParts(id, adjs)
	if len(parts) == 1 {
		s.runSettle(ctx, &parts[0])
	} else {
		var wg sync.WaitGroup
		for g := range parts {
			wg.Go(func() { s.runSettle(ctx, &parts[g]) })
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
// encodes each group's keys and arguments.
func (s *Store) settleParts(id string, adjs []store.Adjustment) []settlePart {
	var parts []settlePart
	lifetime := itoa(int64(store.SettleIDLifetime / time.Millisecond))
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
			parts = append(parts, settlePart{slot: sl, keys: []string{s.settleKey(id, sl)}, args: []string{lifetime}})
		}
		p := &parts[g]
		p1, p2, p3 := a.Limit.Params()
		p.idx = append(p.idx, i)
		p.algos |= 1 << a.Limit.Algorithm
		p.keys = append(p.keys, k)
		p.args = append(p.args, algoArgs[a.Limit.Algorithm], itoa(p1), itoa(p2), itoa(p3), itoa(a.Delta), itoa(a.TakenUs()))
	}
	return parts
}

// runSettle runs settle.lua for p and reads its reply.
func (s *Store) runSettle(ctx context.Context, p *settlePart) {
	msgs, err := s.exec(ctx, settleScripts[p.algos], p.keys, p.args)
	if err != nil {
		p.err = fmt.Errorf("%w: settle: %w", store.ErrUnavailable, err)
		return
	}
	p.reply, p.err = integers(p.reply[:0], msgs, settleHead+settlePer*len(p.idx))
	if p.err == nil && p.reply[1] != 0 && p.reply[1] != 1 {
		p.err = fmt.Errorf("%w: settle replied repeated = %d", store.ErrProtocol, p.reply[1])
	}
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
