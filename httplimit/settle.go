package httplimit

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync/atomic"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/httplimit/costmeter"
	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/policy"
)

// MaxEstimateBody is how much of a request's body the middleware reads to
// find the estimate of a measured-cost request in it (the class's
// estimate.json): 1 MiB. The bytes read are given back to the handler
// before the rest, so it reads the whole body as sent; a body longer
// than this, or not a JSON object, gives no estimate (the request header,
// else the class's default, applies).
const MaxEstimateBody = 1 << 20

// MaxEstimateBytes bounds the bytes of request bodies being read for
// estimates at once, over every request of the process: 64 MiB. A request
// that would go past it is not read for its estimate (its header, else
// the default, is charged; the settlement charges its true cost all the
// same), so that clients stalling bodies of 1 MiB each cannot hold the
// process's memory (the attacker review held 2.1 GB with 2,000).
const MaxEstimateBytes = 64 << 20

// estimateBytes is the bytes reserved by the reads in progress.
var estimateBytes atomic.Int64

// SettleRule names the rule that gave the cost a measured-cost request
// was settled at (see docs/cost.md, "Settling").
type SettleRule string

// The rules, in the order they are tried.
const (
	// RuleHandler: the handler said the cost ([SetCost]).
	RuleHandler SettleRule = "handler"
	// RuleMeasured: the answer said the cost (the class's measure: a
	// header, a trailer, the JSON body, the last server-sent event), on
	// any status.
	RuleMeasured SettleRule = "measured"
	// RuleError: the answer is an error (status 500 or over) without its
	// cost, or the handler failed before answering: settled at 1, the rest
	// of the estimate refunded (a request is never free: at 0, failing
	// requests on purpose would cost nothing, however many).
	RuleError SettleRule = "error"
	// RuleRefused: the answer is a client error (4xx: a bad request, an
	// unknown model, the upstream's own 429) without its cost: settled at
	// 1, as an error.
	RuleRefused SettleRule = "refused"
	// RuleClientGone: the client went away before the answer said its
	// cost (its request's context ended, or sending failed): settled at
	// the class's cap. The estimate is the client's own number, and the
	// answer's end (a stream's usage event) is what it would skip by
	// hanging up: charged its estimate, a client could declare 1, read
	// all but the last event and leave.
	RuleClientGone SettleRule = "client_gone"
	// RuleCut: the handler stopped mid-answer (it panicked, or
	// httputil.ReverseProxy aborted a body the upstream broke off), the
	// client still there: settled at the class's cap, as the cost is not
	// known. Not the estimate: a client can cut an answer itself, by
	// reading slowly until the upstream's write timeout breaks it off.
	RuleCut SettleRule = "cut"
	// RuleUnmeasured: a complete answer below 400 without its cost:
	// settled at the class's cap, as a front that does not settle charges
	// (an upstream that leaves its usage out at the client's asking, as
	// OpenAI's streams do without stream_options.include_usage, must not
	// let the client pay its own estimate). Counted, as the upstream or
	// handler did not say what the class's measure looks for.
	RuleUnmeasured SettleRule = "unmeasured"
)

// Settled is how the middleware settled one request of a measured-cost
// class, for [Config].Settled.
type Settled struct {
	// Rule says where Cost came from.
	Rule SettleRule
	// Estimate is what the request was charged at admission.
	Estimate int64
	// Cost is the true cost it was settled at.
	Cost int64
	// Status is the answer's status; 0 when none was sent.
	Status int
	// Outcome is the limiter's answer ([limiter.Limiter.Settle]).
	Outcome limiter.SettleOutcome
	// Err is the settlement's error: it was not applied, and the
	// estimate stands (the limiter's guard has counted and logged it).
	Err error
}

// answer is how a measured-cost request's answer went, for settleCost.
type answer struct {
	// handler and measured are the cost the handler set and the one the
	// answer held, with whether there was one.
	handler, measured       int64
	hasHandler, hasMeasured bool
	// status is the answer's status; 0 when none was sent.
	status int
	// gone: the client went away (its context ended, or sending
	// failed); aborted: the handler did not return (it panicked).
	gone, aborted bool
}

// settleCost returns what a request of a class whose estimates are at
// most cap is settled at, and the rule that says so:
// the handler's cost, else the measured one, else 1 for an error or a
// refused request (never free), else the cap: the cost is not known (the client went
// away, the answer was cut, or it did not hold its cost).
func settleCost(a answer, cap int64) (int64, SettleRule) {
	switch {
	case a.hasHandler:
		return a.handler, RuleHandler
	case a.hasMeasured:
		return a.measured, RuleMeasured
	case a.status >= 500:
		return 1, RuleError
	case a.status >= 400:
		return 1, RuleRefused
	case a.gone:
		return cap, RuleClientGone
	case a.aborted && a.status == 0:
		return 1, RuleError
	case a.aborted:
		return cap, RuleCut
	}
	return cap, RuleUnmeasured
}

// SetCost sets the true cost of the request whose context is ctx, as a
// handler behind the middleware knows it (work that is not in the answer,
// or an answer the class's measure cannot read): the request is settled
// at n when the handler returns, whatever the answer holds or its status.
// It reports false, changing nothing, when ctx is not that of a request
// the middleware admitted in a measured-cost class (or one decided on
// the store's fallback, which has nothing to settle), or n is outside
// 0..algo.MaxCount. The last call wins; it is safe to call from any
// goroutine until the handler returns.
func SetCost(ctx context.Context, n int64) bool {
	v, ok := ctx.Value(decidedKey{}).(*decided)
	if !ok || v.d.Settlement == nil || n < 0 || n > algo.MaxCount {
		return false
	}
	v.cost.Store(n + 1)
	return true
}

// estimate returns the estimate of r, a request of a class with measured
// cost m: from its header, else from the JSON of the first
// MaxEstimateBody bytes of its body, which r.Body then gives back before
// the rest ([policy.Estimate.From]); not from the body when the reads in
// progress hold MaxEstimateBytes.
func estimate(r *http.Request, m *policy.MeasuredCost) int64 {
	e := &m.Estimate
	var body any
	if e.JSON != "" && r.Body != nil && r.Body != http.NoBody && r.ContentLength <= MaxEstimateBody {
		need := int64(MaxEstimateBody + 1)
		if r.ContentLength >= 0 {
			need = r.ContentLength + 1
		}
		if estimateBytes.Add(need) > MaxEstimateBytes {
			estimateBytes.Add(-need)
			return e.From(r.Header, nil)
		}
		prefix, err := readPrefix(r.Body, r.ContentLength)
		estimateBytes.Add(-need)
		if err == nil && len(prefix) <= MaxEstimateBody {
			body = costmeter.DecodePath(prefix, e.JSON)
			// The body is read whole: the replay ends it without reading
			// on, for net/http may close it once the answer's header is
			// out, while a transport still reads to see its end.
			err = io.EOF
		}
		r.Body = &replayBody{prefix: prefix, err: err, body: r.Body}
	}
	return e.From(r.Header, body)
}

// readPrefix reads body to its end or to one byte past
// MaxEstimateBody, whichever comes first; size is its declared length
// (-1: not known), to read it into a buffer of that size. The error is
// the body's, nil at its end.
func readPrefix(body io.Reader, size int64) ([]byte, error) {
	if size < 0 {
		size = 512
	}
	buf := make([]byte, 0, size+1) // and room to see the end
	lr := io.LimitReader(body, MaxEstimateBody+1)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := lr.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// replayBody is a request body whose first bytes were read already: it
// gives them back, then err (io.EOF when they were the whole body, or the
// error reading them stopped at), else the rest.
type replayBody struct {
	prefix []byte
	err    error
	body   io.ReadCloser
}

func (b *replayBody) Read(p []byte) (int, error) {
	if len(b.prefix) > 0 {
		n := copy(p, b.prefix)
		b.prefix = b.prefix[n:]
		return n, nil
	}
	if b.err != nil {
		return 0, b.err
	}
	return b.body.Read(p)
}

func (b *replayBody) Close() error { return b.body.Close() }

// settle settles d, the admitted decision of a measured-cost request r
// whose answer went through w, once the handler has returned (aborted:
// it panicked), and tells c.Settled.
func (c *Config) settle(r *http.Request, w *costmeter.Writer, v *decided, aborted bool) {
	a := answer{status: w.Status(), aborted: aborted}
	if n := v.cost.Load(); n > 0 {
		a.handler, a.hasHandler = n-1, true
	}
	a.measured, a.hasMeasured = w.Cost()
	a.gone = w.Err() != nil || errors.Is(r.Context().Err(), context.Canceled)
	if !aborted && a.status != 0 && w.Err() == nil {
		// Everything the handler wrote goes out before the store is
		// asked: the settlement delays only the answer's last chunk.
		_ = w.FlushError()
	}
	s := Settled{Estimate: v.d.Settlement.Cost, Status: a.status}
	s.Cost, s.Rule = settleCost(a, max(s.Estimate, v.d.Resolution.Measured.Estimate.Cap))
	s.Outcome, s.Err = c.Limiter.Settle(r.Context(), &v.d, s.Cost)
	if c.Settled != nil {
		c.Settled(r, s)
	}
}
