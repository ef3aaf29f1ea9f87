package redisstore

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/store"
)

// part is the checks of one batch that one script call decides.
type part struct {
	idx    []int  // indexes into the batch
	slot   uint16 // its cluster slot (0 on standalone Redis)
	algos  uint8  // the algorithms it uses, a bit each
	keys   []string
	checks []wireCheck
	infos  [][2]int64 // a refund's: what each check's take returned
	reply  []int64    // a takeReply, or a refundReply for a refund
	err    error
}

// args encodes the part's ARGV: per check its five values, and a refund's
// two more.
func (p *part) args() []string {
	per := argsPerCheck
	if p.infos != nil {
		per += 2
	}
	args := make([]string, 0, per*len(p.checks))
	for j, w := range p.checks {
		args = w.appendArgs(args)
		if p.infos != nil {
			args = append(args, itoa(p.infos[j][0]), itoa(p.infos[j][1]))
		}
	}
	return args
}

// Take decides checks atomically. See [store.Store] and the package doc.
func (s *Store) Take(ctx context.Context, checks []store.Check, res *store.Result) error {
	if err := store.Validate(checks); err != nil {
		return err
	}
	parts := s.split(checks)
	if len(parts) == 1 {
		p := &parts[0]
		s.decide(ctx, p)
		if p.err != nil {
			return p.err
		}
		r := takeReply(p.reply)
		res.Allowed = r.allowed()
		res.Now = time.UnixMicro(r.now())
		fill(res, checks, p)
		return nil
	}
	return s.takeParts(ctx, checks, parts, res)
}

// split groups the checks by cluster slot (one group on standalone Redis),
// in first-seen order, and encodes each group's keys and arguments.
func (s *Store) split(checks []store.Check) []part {
	if !s.cluster { // one part, each slice allocated once at its size
		p := part{idx: make([]int, len(checks)), keys: make([]string, len(checks)), checks: make([]wireCheck, len(checks))}
		for i := range checks {
			c := &checks[i]
			p.idx[i], p.keys[i], p.checks[i] = i, s.Key(c.Limit.Algorithm, c.Key), newWireCheck(c)
			p.algos |= 1 << c.Limit.Algorithm
		}
		return []part{p}
	}
	var parts []part
	var slots []uint16
	for i := range checks {
		c := &checks[i]
		k := s.Key(c.Limit.Algorithm, c.Key)
		g := 0
		if s.cluster {
			sl := slot(k)
			for g = 0; g < len(slots) && slots[g] != sl; g++ {
			}
			if g == len(slots) {
				slots = append(slots, sl)
			}
		}
		if g == len(parts) {
			parts = append(parts, part{})
			if s.cluster {
				parts[g].slot = slots[g]
			}
		}
		p := &parts[g]
		p.idx = append(p.idx, i)
		p.algos |= 1 << c.Limit.Algorithm
		p.keys = append(p.keys, k)
		p.checks = append(p.checks, newWireCheck(c))
	}
	return parts
}

// run executes script for p and reads its reply into p.reply: a
// takeReply, or a refundReply for a refund part.
func (s *Store) run(ctx context.Context, sc *rueidis.Lua, p *part) {
	head, per := takeHead, takePer
	if p.infos != nil {
		head, per = refundHead, refundPer
	}
	msgs, err := s.exec(ctx, sc, p.keys, p.args())
	if err != nil {
		p.err = fmt.Errorf("%w: %w", store.ErrUnavailable, err)
		return
	}
	p.reply, p.err = integers(p.reply[:0], msgs, head+per*len(p.idx))
}

// integers appends a script's reply, which must be want integers, to dst;
// any other shape is a store.ErrProtocol. Every reply is read here.
func integers(dst []int64, msgs []rueidis.RedisMessage, want int) ([]int64, error) {
	if len(msgs) != want {
		return dst, fmt.Errorf("%w: script replied %d values, want %d", store.ErrProtocol, len(msgs), want)
	}
	for i := range msgs {
		v, err := msgs[i].AsInt64()
		if err != nil {
			return dst, fmt.Errorf("%w: script reply %d: %w", store.ErrProtocol, i, err)
		}
		dst = append(dst, v)
	}
	return dst, nil
}

// fill writes the decisions of part p's reply into res.
func fill(res *store.Result, checks []store.Check, p *part) {
	if len(res.Decisions) != len(checks) {
		res.Decisions = append(res.Decisions[:0], make([]algo.Decision, len(checks))...)
	}
	for j, i := range p.idx {
		c := takeReply(p.reply).check
		if p.infos != nil {
			c = refundReply(p.reply).check
		}
		res.Decisions[i] = c(j).outcome().Decision(checks[i].Limit)
	}
}

// takeParts decides a batch over several cluster slots: reserve every part
// in parallel, then refund the charged parts if any part rejected or failed.
func (s *Store) takeParts(ctx context.Context, checks []store.Check, parts []part, res *store.Result) error {
	var wg sync.WaitGroup
	for g := range parts {
		wg.Go(func() { s.decide(ctx, &parts[g]) })
	}
	wg.Wait()
	allowed, failed := true, error(nil)
	var now int64
	for g := range parts {
		if parts[g].err != nil {
			failed = parts[g].err
			continue
		}
		r := takeReply(parts[g].reply)
		allowed = allowed && r.allowed()
		now = max(now, r.now())
	}
	res.Allowed = allowed && failed == nil
	res.Now = time.UnixMicro(now)
	for g := range parts {
		if parts[g].err == nil {
			fill(res, checks, &parts[g])
		}
	}
	if res.Allowed {
		return nil
	}
	// Refund the parts that were charged, each with the information its
	// reservation returned.
	var refunds []part
	for g := range parts {
		p := &parts[g]
		if p.err != nil || !takeReply(p.reply).allowed() {
			continue
		}
		r := part{idx: p.idx, algos: p.algos, keys: p.keys, checks: p.checks, infos: make([][2]int64, len(p.idx))}
		for j := range p.idx {
			r.infos[j] = takeReply(p.reply).check(j).info()
		}
		refunds = append(refunds, r)
	}
	// A refund must happen even when the caller's deadline has passed.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	s.parallel(rctx, &refundScripts, refunds)
	for g := range refunds {
		if refunds[g].err != nil {
			return fmt.Errorf("redisstore: refund of a rejected cross-slot batch failed, its reservation stays charged: %w", refunds[g].err)
		}
		fill(res, checks, &refunds[g])
	}
	return failed
}

// parallel runs every part at once, each with the script of its algorithms.
func (s *Store) parallel(ctx context.Context, scripts *[allAlgorithms + 1]*rueidis.Lua, parts []part) {
	var wg sync.WaitGroup
	for g := range parts {
		wg.Go(func() { s.run(ctx, scripts[parts[g].algos], &parts[g]) })
	}
	wg.Wait()
}
