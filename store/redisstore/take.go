package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/store"
)

// part is the checks of one batch that one script call decides.
type part struct {
	idx   []int  // indexes into the batch
	slot  uint16 // its cluster slot (0 on standalone Redis)
	algos uint8  // the algorithms it uses, a bit each
	keys  []string
	args  []string
	reply []int64
	err   error
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
		res.Allowed = p.reply[1] == 1
		res.Now = time.UnixMicro(p.reply[0])
		fill(res, checks, p, 2, 6)
		return nil
	}
	return s.takeParts(ctx, checks, parts, res)
}

// argsPerCheck is how many ARGV values the take scripts read per check:
// algorithm code, p1, p2, p3, cost.
const argsPerCheck = 5

// split groups the checks by cluster slot (one group on standalone Redis),
// in first-seen order, and encodes each group's keys and arguments.
func (s *Store) split(checks []store.Check) []part {
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
		p1, p2, p3 := c.Limit.Params()
		p.idx = append(p.idx, i)
		p.algos |= 1 << c.Limit.Algorithm
		p.keys = append(p.keys, k)
		p.args = append(p.args, algoArgs[c.Limit.Algorithm], strconv.FormatInt(p1, 10), strconv.FormatInt(p2, 10), strconv.FormatInt(p3, 10), strconv.FormatInt(c.Cost, 10))
	}
	return parts
}

// run executes script for p and parses a reply of 2 + per×len(p.idx)
// integers (take, per 6) or 1 + per×len(p.idx) (refund, per 4) into p.reply.
func (s *Store) run(ctx context.Context, sc *rueidis.Lua, p *part, per int) {
	head := 2
	if per == 4 {
		head = 1
	}
	msgs, err := sc.Exec(ctx, s.c, p.keys, p.args).ToArray()
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

// fill writes the decisions of part p (per values per check, from offset
// off in p.reply) into res.
func fill(res *store.Result, checks []store.Check, p *part, off, per int) {
	if len(res.Decisions) != len(checks) {
		res.Decisions = append(res.Decisions[:0], make([]algo.Decision, len(checks))...)
	}
	for j, i := range p.idx {
		r := p.reply[off+per*j:]
		res.Decisions[i] = algo.Outcome{Allowed: r[0] == 1, Remaining: r[1], RetryUs: r[2], ResetUs: r[3]}.Decision(checks[i].Limit)
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
		allowed = allowed && parts[g].reply[1] == 1
		now = max(now, parts[g].reply[0])
	}
	res.Allowed = allowed && failed == nil
	res.Now = time.UnixMicro(now)
	for g := range parts {
		if parts[g].err == nil {
			fill(res, checks, &parts[g], 2, 6)
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
		if p.err != nil || p.reply[1] != 1 {
			continue
		}
		r := part{idx: p.idx, algos: p.algos, keys: p.keys}
		for j := range p.idx {
			a := p.args[argsPerCheck*j : argsPerCheck*(j+1)]
			info := p.reply[2+6*j+4 : 2+6*j+6]
			r.args = append(r.args, a...)
			r.args = append(r.args, strconv.FormatInt(info[0], 10), strconv.FormatInt(info[1], 10))
		}
		refunds = append(refunds, r)
	}
	// A refund must happen even when the caller's deadline has passed.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	s.parallel(rctx, &refundScripts, refunds, 4)
	for g := range refunds {
		if refunds[g].err != nil {
			return fmt.Errorf("redisstore: refund of a rejected cross-slot batch failed, its reservation stays charged: %w", refunds[g].err)
		}
		fill(res, checks, &refunds[g], 1, 4)
	}
	return failed
}

// parallel runs every part at once, each with the script of its algorithms.
func (s *Store) parallel(ctx context.Context, scripts *[allAlgorithms + 1]*rueidis.Lua, parts []part, per int) {
	var wg sync.WaitGroup
	for g := range parts {
		wg.Go(func() { s.run(ctx, scripts[parts[g].algos], &parts[g], per) })
	}
	wg.Wait()
}
