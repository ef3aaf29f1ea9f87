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
)

// takeJSON is the body of POST /v1/take as encoding/json reads it: the
// slow path, for any body the fast reader (takeRequest.read) leaves, with
// encoding/json's errors. Pointers tell a missing field from a zero one.
type takeJSON struct {
	Key       *string `json:"key"`
	Limit     *int64  `json:"limit"`
	PeriodMs  *int64  `json:"period_ms"`
	Burst     *int64  `json:"burst"`
	Cost      *int64  `json:"cost"`
	Algorithm *string `json:"algorithm"`
	Fail      *string `json:"fail"`
}

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
func parseTake(req *takeRequest) (c store.Check, failOpen bool, detail string) {
	switch {
	case !req.key.ok || req.key.v == "":
		return c, false, "key: required, a non-empty string"
	case len(req.key.v) > policy.MaxTakeKey:
		return c, false, fmt.Sprintf("key: %d bytes, at most %d", len(req.key.v), policy.MaxTakeKey)
	case !req.limit.ok:
		return c, false, "limit: required"
	case req.limit.v < 1 || req.limit.v > algo.MaxCount:
		return c, false, fmt.Sprintf("limit: %d is outside 1..%d", req.limit.v, algo.MaxCount)
	case !req.periodMs.ok:
		return c, false, "period_ms: required"
	case req.periodMs.v < 1 || req.periodMs.v > maxPeriodMs:
		return c, false, fmt.Sprintf("period_ms: %d is outside 1..%d (366 days)", req.periodMs.v, maxPeriodMs)
	case req.periodMs.v*1000 < req.limit.v:
		return c, false, fmt.Sprintf("period_ms: %d ms for limit %d is under 1µs per unit: lengthen the period or lower the limit", req.periodMs.v, req.limit.v)
	}
	c.Key = policy.TakeKey(req.key.v)
	c.Limit = algo.Limit{Limit: req.limit.v, Period: time.Duration(req.periodMs.v) * time.Millisecond}
	if req.algorithm.ok {
		a, err := algo.ParseAlgorithm(req.algorithm.v)
		if err != nil {
			return c, false, fmt.Sprintf("algorithm: unknown %q: want %s", req.algorithm.v, algo.AlgorithmNames())
		}
		c.Limit.Algorithm = a
	}
	if req.burst.ok {
		switch b := req.burst.v; {
		case b < 1 || b > algo.MaxCount:
			return c, false, fmt.Sprintf("burst: %d is outside 1..%d", b, algo.MaxCount)
		case c.Limit.Algorithm.Windowed() && b != req.limit.v:
			return c, false, fmt.Sprintf("burst: %d must equal limit %d for %v, or be omitted", b, req.limit.v, c.Limit.Algorithm)
		}
		c.Limit.Burst = req.burst.v
	}
	if err := c.Limit.Validate(); err != nil {
		return c, false, "limit: " + err.Error()
	}
	c.Cost = 1
	if req.cost.ok {
		c.Cost = req.cost.v
		switch {
		case c.Cost < 0:
			return c, false, fmt.Sprintf("cost: %d is negative: use 0 to peek", c.Cost)
		case c.Cost > c.Limit.Capacity():
			return c, false, fmt.Sprintf("cost: %d exceeds burst %d: such a request could never pass", c.Cost, c.Limit.Capacity())
		}
	}
	if req.fail.ok {
		switch req.fail.v {
		case "open":
			failOpen = true
		case "closed":
		default:
			return c, false, fmt.Sprintf("fail: unknown mode %q: want open or closed", req.fail.v)
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
	var req takeRequest
	if !readFast(w, r, req.read, func(j *takeJSON) { req = j.request() }) {
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
	reason, err := s.lim.TakeChecks(r.Context(), sc.checks[:], fail, res)
	if err != nil {
		problem.BadRequest(w, err.Error())
		return
	}
	if reason == limiter.ReasonUnavailable {
		httplimit.WriteRejection(w, s.form, limiter.Decision{Reason: reason, RetryAfter: limiter.UnavailableRetryAfter, Tightest: -1})
		return
	}
	d := res.Decisions[0]
	resp := takeResponse{
		Allowed:      d.Allowed,
		Limit:        d.Limit,
		Remaining:    d.Remaining,
		RetryAfterMs: algo.CeilMillis(d.RetryAfter),
		ResetAfterMs: algo.CeilMillis(d.ResetAfter),
		Degraded:     reason == limiter.ReasonDegradedOpen,
	}
	out := outPool.Get().(*[]byte)
	*out = resp.appendJSON(*out)
	writeAppended(w, http.StatusOK, out)
}
