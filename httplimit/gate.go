package httplimit

import (
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/fairgate/fairgate/fairshare"
	"github.com/fairgate/fairgate/httplimit/problem"
	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/limitheader"
)

// TypeUpstreamBusy is the type of a 503 from a capacity gate: no room
// within the request's wait.
const TypeUpstreamBusy = "urn:fairgate:problem:upstream_busy"

// AnonymousParty is the one party of a capacity gate that every request
// without a verified tenant belongs to. Tenants are named "t:<id>" there,
// so that none can be it.
const AnonymousParty = "anonymous"

// GateConfig configures [Gated].
type GateConfig struct {
	// Gate returns the gate for r, decided by d, or nil to let r through
	// ungated (so a reload may turn it on and off), and the weight (zero
	// means 1) and criticality r asks it with. The tenant is the verified
	// one and the kind the route class. Required.
	Gate func(r *http.Request, d limiter.Decision) (g *fairshare.Gate, weight float64, critical bool)
	// Observe, if not nil, is told how long each gated request waited and
	// whether it was admitted (err nil), shed (a *fairshare.ShedError) or
	// given up by its client; an admitted request's end is reported by
	// calling the func it returns, if not nil.
	Observe func(r *http.Request, waited time.Duration, err error) (done func())
}

// Gated admits each request [Middleware] let through by a fair share of
// the next handler's concurrency (package fairshare): it waits its turn,
// or is answered 503 with Retry-After and a problem+json body of type
// [TypeUpstreamBusy] when it finds no room within the gate's wait; a
// client that gives up while it waits is left unanswered. The verified
// tenant is its party ([AnonymousParty] for requests without one), its
// route class its kind. The gate learns from the next handler's status,
// when it writes one: a 502, 503 or 504 is a failure, anything under 400
// a success, and other answers (a 404, say, which may come at once) teach
// nothing, nor does a request whose client gave up. Its latency runs
// from admission to that status, or for a request with a body from when
// the next handler (a proxy's transport) has read the body to its end: a
// slow upload is the client's time, not the upstream's, and an answer
// that begins before the body was read whole teaches nothing. A client
// slow to read the answer is not counted either. Put it inside
// Middleware:
//
//	h := httplimit.Middleware(cfg)(httplimit.Gated(gc)(handler))
func Gated(c GateConfig) (func(http.Handler) http.Handler, error) {
	if c.Gate == nil {
		return nil, errors.New("httplimit: GateConfig.Gate is required")
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var d limiter.Decision
			tenant := ""
			if v, ok := r.Context().Value(decidedKey{}).(*decided); ok {
				d, tenant = v.d, v.id.Tenant
			}
			g, weight, critical := c.Gate(r, d)
			if g == nil {
				next.ServeHTTP(w, r)
				return
			}
			upload := r.Body != nil && r.Body != http.NoBody
			req := fairshare.Request{Tenant: AnonymousParty, Kind: d.Resolution.Class, Weight: weight, Critical: critical, Upload: upload}
			if tenant != "" {
				req.Tenant = "t:" + tenant
			}
			start := time.Now()
			tk, err := g.Acquire(r.Context(), req)
			var done func()
			if c.Observe != nil {
				done = c.Observe(r, time.Since(start), err)
			}
			if err != nil {
				WriteShed(w, err)
				return
			}
			defer func() {
				if r.Context().Err() != nil {
					tk.Skip() // its client gave up: the time says nothing of the upstream
				}
				tk.Done(false)
				if done != nil {
					done()
				}
			}()
			if upload {
				r.Body = &sentAtEOF{ReadCloser: r.Body, tk: tk}
			}
			next.ServeHTTP(&answerWriter{ResponseWriter: w, tk: tk}, r)
		})
	}, nil
}

// WriteShed answers a request a capacity gate did not admit: 503 with
// Retry-After for a *fairshare.ShedError; nothing for a client that went
// away while it waited (err is its context's).
func WriteShed(w http.ResponseWriter, err error) {
	var se *fairshare.ShedError
	if !errors.As(err, &se) {
		return
	}
	w.Header().Set("Retry-After", limitheader.RetryAfter(se.RetryAfter))
	problem.Write(w, problem.Details{Type: TypeUpstreamBusy, Title: "Upstream busy", Status: http.StatusServiceUnavailable,
		Detail: "the upstream API is at its capacity and your share of it is in use; retry later",
		Ext:    map[string]any{"code": "upstream_busy", "retry_after_seconds": limitheader.RetrySeconds(se.RetryAfter)}})
}

// answerWriter tells the gate's ticket when the answer begins, with
// whether it is an overloaded upstream's. It unwraps to the writer it
// wraps, so that http.ResponseController (flushes, deadlines, hijacking)
// reaches the connection's.
type answerWriter struct {
	http.ResponseWriter
	tk *fairshare.Ticket
}

func (w *answerWriter) WriteHeader(code int) {
	switch {
	case code == http.StatusBadGateway || code == http.StatusServiceUnavailable || code == http.StatusGatewayTimeout:
		w.tk.Answered(true)
	case code >= 200 && code < 400:
		w.tk.Answered(false)
	case code >= 400:
		w.tk.Skip()
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *answerWriter) Write(b []byte) (int, error) {
	w.tk.Answered(false)
	return w.ResponseWriter.Write(b)
}

// Unwrap returns the writer w wraps.
func (w *answerWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// sentAtEOF tells the gate's ticket when the request's body has been read
// to its end: the upstream's time starts there.
type sentAtEOF struct {
	io.ReadCloser
	tk *fairshare.Ticket
}

func (b *sentAtEOF) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.tk.Sent()
	}
	return n, err
}
