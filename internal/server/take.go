package server

import (
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/httplimit"
	"github.com/fairgate/fairgate/httplimit/problem"
	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/store"
	"github.com/fairgate/fairgate/store/guard"
)

// takeBody is the body of POST /v1/take.
type takeBody struct {
	Key       opt[string] `json:"key"`
	Limit     opt[int64]  `json:"limit"`
	PeriodMs  opt[int64]  `json:"period_ms"`
	Burst     opt[int64]  `json:"burst"`
	Cost      opt[int64]  `json:"cost"`
	Algorithm opt[string] `json:"algorithm"`
	Fail      opt[string] `json:"fail"`
}

// takeFast reads the simple /v1/take bodies, every client's in practice.
var takeFast = newFastReader[takeBody]()

// takeResponse is the answer of POST /v1/take, allowed or not.
type takeResponse struct {
	Allowed      bool  `json:"allowed"`
	Limit        int64 `json:"limit"`
	Remaining    int64 `json:"remaining"`
	RetryAfterMs int64 `json:"retry_after_ms"`
	ResetAfterMs int64 `json:"reset_after_ms"`
	Degraded     bool  `json:"degraded,omitempty"`
}

// maxPeriodMs is algo.MaxPeriod in milliseconds.
const maxPeriodMs = int64(algo.MaxPeriod / time.Millisecond)

// parseTake validates a request and returns the check and fail mode, or a
// detail naming the field at fault.
func parseTake(req *takeBody) (c store.Check, failOpen bool, detail string) {
	switch {
	case !req.Key.ok || req.Key.v == "":
		return c, false, "key: required, a non-empty string"
	case len(req.Key.v) > policy.MaxTakeKey:
		return c, false, fmt.Sprintf("key: %d bytes, at most %d", len(req.Key.v), policy.MaxTakeKey)
	case !req.Limit.ok:
		return c, false, "limit: required"
	case req.Limit.v < 1 || req.Limit.v > algo.MaxCount:
		return c, false, fmt.Sprintf("limit: %d is outside 1..%d", req.Limit.v, algo.MaxCount)
	case !req.PeriodMs.ok:
		return c, false, "period_ms: required"
	case req.PeriodMs.v < 1 || req.PeriodMs.v > maxPeriodMs:
		return c, false, fmt.Sprintf("period_ms: %d is outside 1..%d (366 days)", req.PeriodMs.v, maxPeriodMs)
	case req.PeriodMs.v*1000 < req.Limit.v:
		return c, false, fmt.Sprintf("period_ms: %d ms for limit %d is under 1µs per unit: lengthen the period or lower the limit", req.PeriodMs.v, req.Limit.v)
	}
	c.Key = policy.TakeKey(req.Key.v)
	c.Limit = algo.Limit{Limit: req.Limit.v, Period: time.Duration(req.PeriodMs.v) * time.Millisecond}
	if req.Algorithm.ok {
		a, err := algo.ParseAlgorithm(req.Algorithm.v)
		if err != nil {
			return c, false, fmt.Sprintf("algorithm: unknown %q: want %s", req.Algorithm.v, algo.AlgorithmNames())
		}
		c.Limit.Algorithm = a
	}
	if req.Burst.ok {
		switch b := req.Burst.v; {
		case b < 1 || b > algo.MaxCount:
			return c, false, fmt.Sprintf("burst: %d is outside 1..%d", b, algo.MaxCount)
		case c.Limit.Algorithm.Windowed() && b != req.Limit.v:
			return c, false, fmt.Sprintf("burst: %d must equal limit %d for %v, or be omitted", b, req.Limit.v, c.Limit.Algorithm)
		}
		c.Limit.Burst = req.Burst.v
	}
	if err := c.Limit.Validate(); err != nil {
		return c, false, "limit: " + err.Error()
	}
	c.Cost = 1
	if req.Cost.ok {
		c.Cost = req.Cost.v
		switch {
		case c.Cost < 0:
			return c, false, fmt.Sprintf("cost: %d is negative: use 0 to peek", c.Cost)
		case c.Cost > c.Limit.Capacity():
			return c, false, fmt.Sprintf("cost: %d exceeds burst %d: such a request could never pass", c.Cost, c.Limit.Capacity())
		}
	}
	if req.Fail.ok {
		switch req.Fail.v {
		case "open":
			failOpen = true
		case "closed":
		default:
			return c, false, fmt.Sprintf("fail: unknown mode %q: want open or closed", req.Fail.v)
		}
	}
	return c, failOpen, ""
}

// takeScratch is what one /v1/take decision needs beyond its request,
// pooled: the store reads the check and writes the result in place.
type takeScratch struct {
	checks    [1]store.Check
	res       store.Result
	decisions [1]algo.Decision
}

var takePool = sync.Pool{New: func() any { return new(takeScratch) }}

func (s *Server) handleTake(w http.ResponseWriter, r *http.Request) {
	var req takeBody
	if !readJSON(w, r, &req, takeFast) {
		return
	}
	c, failOpen, detail := parseTake(&req)
	if detail != "" {
		problem.BadRequest(w, detail)
		return
	}
	sc := takePool.Get().(*takeScratch)
	defer takePool.Put(sc)
	sc.checks[0] = c
	res := &sc.res
	*res = store.Result{Decisions: sc.decisions[:0]}
	fail := policy.FailClosed
	if failOpen {
		fail = policy.FailOpen
	}
	outcome, err := s.lim.Guard().Take(r.Context(), sc.checks[:], fail, res)
	if err != nil {
		problem.BadRequest(w, err.Error())
		return
	}
	if outcome == guard.Unavailable {
		httplimit.WriteRejection(w, s.form, limiter.Decision{Reason: limiter.ReasonUnavailable, RetryAfter: guard.UnavailableRetryAfter, Tightest: -1})
		return
	}
	d := res.Decisions[0]
	resp := takeResponse{
		Allowed:      d.Allowed,
		Limit:        d.Limit,
		Remaining:    d.Remaining,
		RetryAfterMs: algo.CeilMillis(d.RetryAfter),
		ResetAfterMs: algo.CeilMillis(d.ResetAfter),
		Degraded:     outcome == guard.Degraded,
	}
	out := outPool.Get().(*[]byte)
	*out = resp.appendJSON(*out)
	writeAppended(w, http.StatusOK, out)
}
