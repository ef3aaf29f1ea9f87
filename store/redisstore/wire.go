package redisstore

import (
	"strconv"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/store"
)

// The scripts' wire protocol, in one place; the header of each script in
// lua/ says the same from its side.
//
//	take1.lua, take_multi.lua (one batch):
//	  KEYS   one state key per check
//	  ARGV   per check: algorithm code, p1, p2, p3, cost       wireCheck
//	  reply  now µs, allowed 0|1, then per check:               takeReply
//	         allowed 0|1, remaining, retry µs, reset µs,        checkReply
//	         info1, info2 (what a refund needs)
//	refund.lua:
//	  ARGV   per check: the take's five, then info1, info2     wireCheck, info
//	  reply  now µs, then per check: allowed, remaining,        refundReply
//	         retry µs, reset µs
//	take_multi.lua and take1_multi.lua, merged batches: see mergedArgs.
//	settle.lua:
//	  KEYS   the id record, then one state key per adjustment
//	  ARGV   the record's lifetime ms, then per adjustment:     wireAdj
//	         algorithm code, p1, p2, p3, delta, taken_at µs
//	  reply  now µs, repeated 0|1, then per adjustment:         settleHead,
//	         applied, remaining, reset µs                       settlePer
//	settle_multi.lua and settle_node.lua, merged parts: see settleArgs.
//
// Every reply is read by integers, the one reader: a reply of another
// shape is a store.ErrProtocol, never mistaken for an outage.

// wireCheck is one check as the take scripts read it.
type wireCheck struct{ code, p1, p2, p3, cost int64 }

// newWireCheck encodes c.
func newWireCheck(c *store.Check) wireCheck {
	p1, p2, p3 := c.Limit.Params()
	return wireCheck{int64(c.Limit.Algorithm), p1, p2, p3, c.Cost}
}

// limit is the check's algorithm and parameters: what mergedArgs sends
// once for every check that shares it.
func (w wireCheck) limit() [4]int64 { return [4]int64{w.code, w.p1, w.p2, w.p3} }

// wireAdj is one adjustment as the settle scripts read it.
type wireAdj struct{ code, p1, p2, p3, delta, at int64 }

// newWireAdj encodes a.
func newWireAdj(a *store.Adjustment) wireAdj {
	p1, p2, p3 := a.Limit.Params()
	return wireAdj{int64(a.Limit.Algorithm), p1, p2, p3, a.Delta, a.TakenUs()}
}

// limit is the adjustment's algorithm and parameters (see wireCheck.limit).
func (w wireAdj) limit() [4]int64 { return [4]int64{w.code, w.p1, w.p2, w.p3} }

// appendArgs appends the adjustment's settle.lua ARGV values.
func (w wireAdj) appendArgs(args []string) []string {
	return append(args, algoArgs[w.code], itoa(w.p1), itoa(w.p2), itoa(w.p3), itoa(w.delta), itoa(w.at))
}

// argsPerCheck is how many ARGV values the take scripts read per check.
const argsPerCheck = 5

// appendArgs appends the check's ARGV values.
func (w wireCheck) appendArgs(args []string) []string {
	return append(args, algoArgs[w.code], itoa(w.p1), itoa(w.p2), itoa(w.p3), itoa(w.cost))
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// The lengths of the replies: a head, then so many values per check.
const (
	takeHead, takePer     = 2, 6
	refundHead, refundPer = 1, 4
)

// takeReply is a take script's reply for one batch.
type takeReply []int64

func (r takeReply) now() int64    { return r[0] }
func (r takeReply) allowed() bool { return r[1] == 1 }
func (r takeReply) check(j int) checkReply {
	return checkReply(r[takeHead+takePer*j : takeHead+takePer*(j+1)])
}

// refundReply is refund.lua's reply.
type refundReply []int64

func (r refundReply) check(j int) checkReply {
	return checkReply(r[refundHead+refundPer*j : refundHead+refundPer*(j+1)])
}

// checkReply is one check's values in a reply.
type checkReply []int64

// outcome is the check's decision.
func (c checkReply) outcome() algo.Outcome {
	return algo.Outcome{Allowed: c[0] == 1, Remaining: c[1], RetryUs: c[2], ResetUs: c[3]}
}

// info is what the take returned for a refund of it (take replies only).
func (c checkReply) info() [2]int64 { return [2]int64{c[4], c[5]} }
