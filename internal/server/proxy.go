package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"

	"github.com/fairgate/fairgate/breaker"
	"github.com/fairgate/fairgate/httplimit"
	"github.com/fairgate/fairgate/httplimit/problem"
	"github.com/fairgate/fairgate/internal/auth"
	"github.com/fairgate/fairgate/limitheader"
	"github.com/fairgate/fairgate/policy"
)

// UpstreamDependency is the name of the proxied upstream's circuit breaker
// in the config's dependencies.
const UpstreamDependency = "upstream"

// newProxy returns the reverse proxy to upstream behind the limiter's
// middleware: the tenant from the verified credential, the client address
// from the peer or trusted proxies, the route classified and decided, then
// the request forwarded (httputil.ReverseProxy: streaming, hop-by-hop
// headers removed, X-Forwarded-For appended) or answered 429/503/401. A
// request of a measured-cost class is charged its estimate and settled
// at the cost its answer says as the answer ends, the answer metered as
// it streams (the middleware's; docs/cost.md).
func (s *Server) newProxy(upstream *url.URL, timeout time.Duration) (http.Handler, error) {
	if upstream.Scheme != "http" && upstream.Scheme != "https" || upstream.Host == "" {
		return nil, errors.New("server: upstream must be an http:// or https:// URL with a host")
	}
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	tr := &http.Transport{
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   5 * time.Second,
		ResponseHeaderTimeout: timeout,
		ExpectContinueTimeout: time.Second,
		ForceAttemptHTTP2:     true,
	}
	var rt http.RoundTripper = upstreamTimed{base: tr, m: s.metrics}
	if s.breakers != nil && s.breakers.Has(UpstreamDependency) {
		rt = &breaker.Transport{Set: s.breakers, Name: UpstreamDependency, Base: rt}
	}
	rp := &httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { s.rewrite(pr, upstream) },
		Transport: rt,
		// FlushInterval 0: a response of unknown length (a stream, SSE) is
		// flushed as the upstream writes; one of known length goes out in
		// full buffers, a write per buffer instead of a flush per read.
		BufferPool: copyBuffers,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			var oe *breaker.OpenError
			var ce *breaker.CallerError
			if errors.As(err, &ce) {
				// The client's own body failed (a malformed chunk, a slow or
				// aborted upload): its fault, answered to it alone.
				problem.BadRequest(w, "reading the request body: "+ce.Err.Error())
				return
			}
			if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
				return // the client went away: nobody to answer
			}
			if errors.As(err, &oe) {
				detail, scope := "the upstream API is failing and its circuit breaker is open; retry later", "all"
				if oe.Caller {
					detail, scope = "the upstream API failed your recent requests, and its circuit breaker is open for you alone; retry later", "caller"
				}
				w.Header().Set("Retry-After", limitheader.RetryAfter(oe.RetryAfter))
				problem.Write(w, problem.Details{Status: http.StatusServiceUnavailable, Detail: detail,
					Ext: map[string]any{"code": "dependency_unavailable", "dependency": oe.Dependency, "scope": scope, "retry_after_seconds": limitheader.RetrySeconds(oe.RetryAfter)}})
				return
			}
			s.log.Warn("upstream failed", slog.String("path", r.URL.Path), slog.String("error", err.Error()))
			if timedOut(err) {
				// The upstream had the request and may have done its work
				// (a generation longer than the timeout): a measured cost
				// not known is the cap, never the error's 1, or a tenant
				// could make its long generations free.
				if d, ok := httplimit.DecisionFrom(r.Context()); ok && d.Resolution.Measured != nil {
					httplimit.SetCost(r.Context(), max(d.Resolution.Cost, d.Resolution.Measured.Estimate.Cap))
				}
			}
			problem.Write(w, problem.Details{Status: http.StatusBadGateway, Detail: "the upstream API did not answer"})
		},
	}
	mw, err := httplimit.Middleware(httplimit.Config{
		Limiter:    s.lim,
		IdentifyIn: s.pinned,
		ClientIP:   s.clientIP,
		Headers:    s.form,
		Logger:     s.log,
		SlowDown:   true, // the connection is the client's own: pace a client that does not wait
		Observe:    observeClass,
		Settled:    s.metrics.observeSettled, // measured costs are settled as the answer ends
	})
	if err != nil {
		return nil, err
	}
	gated, err := s.gate()
	if err != nil {
		return nil, err
	}
	direct := liftDeadlines(rp)
	limited := mw(gated(s.withParty(direct)))
	// CORS preflights are requests too: the middleware decides them per
	// client address under the policy's preflight limits (they carry no
	// credential), and they pass the capacity gate as the anonymous party.
	return s.metrics.timed(limited), nil
}

// withParty tells the upstream's breaker whom each request is made for:
// its verified tenant, or its client address (IPv6 per /64), so that a
// party's failures open its own breaker and move the shared one only
// with a quorum of tenants (package breaker). A CORS preflight counts for
// nothing: an upstream may answer it 501 without failing.
func (s *Server) withParty(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		if who, ok := httplimit.IdentityFrom(ctx); ok {
			ctx = breaker.WithParty(ctx, breaker.Party{ID: who.Tenant})
		} else if ip := s.clientIP(r); ip.IsValid() {
			ctx = breaker.WithParty(ctx, breaker.Party{ID: policy.ClientPrefix(ip), Anonymous: true})
		} else {
			ctx = breaker.WithParty(ctx, breaker.Party{ID: "unknown", Anonymous: true})
		}
		if httplimit.IsPreflight(r) {
			ctx = breaker.Uncounted(ctx)
		}
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

// copyBuffers are the proxy's copy buffers: without them ReverseProxy
// allocates 32 KiB per response, which set the pace of garbage collection
// for the whole process.
var copyBuffers = &bufferPool{free: make(chan []byte, 1024)}

// bufferPool is an httputil.BufferPool that keeps at most cap(free) idle
// buffers (32 MiB), so that a burst's buffers do not stay forever.
type bufferPool struct{ free chan []byte }

// Get returns a 32 KiB buffer.
func (p *bufferPool) Get() []byte {
	select {
	case b := <-p.free:
		return b
	default:
		return make([]byte, 32<<10)
	}
}

// Put gives b back, or drops it when enough are idle.
func (p *bufferPool) Put(b []byte) {
	if cap(b) != 32<<10 {
		return
	}
	select {
	case p.free <- b[:cap(b)]:
	default:
	}
}

// rewrite makes the upstream's request from the client's: its URL, the
// forwarding headers (a chain only from a trusted proxy) and the verified
// identity headers (client-sent copies removed).
func (s *Server) rewrite(pr *httputil.ProxyRequest, upstream *url.URL) {
	pr.SetURL(upstream)
	pr.Out.Host = pr.In.Host
	id := s.id.Load()
	// ReverseProxy drops the inbound X-Forwarded-* before Rewrite. A
	// forwarding chain is passed on only from a trusted proxy;
	// SetXForwarded then appends the peer.
	if id.ip.Trusts(auth.PeerIP(pr.In)) {
		if xff := pr.In.Header.Values("X-Forwarded-For"); len(xff) > 0 {
			pr.Out.Header["X-Forwarded-For"] = xff
		}
	} else {
		pr.Out.Header.Del("Forwarded")
		pr.Out.Header.Del("X-Real-IP")
	}
	pr.SetXForwarded()
	s.injectTrace(pr.Out)
	// The upstream learns who the caller is from fairgate alone:
	// client-sent copies of the identity headers are removed, and so are
	// their look-alikes (X_Fairgate_Tenant, X.Fairgate.Tenant), which CGI,
	// WSGI, Rack and PHP servers read as the same HTTP_X_FAIRGATE_TENANT.
	// So is a settlement handle: the proxy settles itself, and an
	// upstream written for a gateway must not take a client's.
	dropLookalikes(pr.Out.Header, id.tenantHdr, id.planHdr, SettlementHeader)
	if who, ok := httplimit.IdentityFrom(pr.In.Context()); ok {
		d, _ := httplimit.DecisionFrom(pr.In.Context())
		pr.Out.Header.Set(id.tenantHdr, who.Tenant)
		pr.Out.Header.Set(id.planHdr, d.Resolution.Plan)
	}
}

// timedOut reports an upstream call that timed out waiting for the
// answer (the --upstream-timeout), as against one refused or broken
// before the upstream had the request.
func timedOut(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// dropLookalikes removes from h the headers named names, and any that
// reads as one of them where '_', '.' or other punctuation stand for '-'
// (X_Fairgate_Tenant, X.Fairgate.Tenant: CGI, WSGI, Rack and PHP read
// them as X-Fairgate-Tenant).
func dropLookalikes(h http.Header, names ...string) {
	for _, n := range names {
		h.Del(n)
	}
	for k := range h {
		for _, n := range names {
			if policy.LookAlike(k, n) {
				delete(h, k)
			}
		}
	}
}

// liftDeadlines lets a proxied response stream for as long as the upstream
// sends: it clears the connection's write deadline, and its read deadline
// once the request's body has been read to its end (at once for a request
// without one). Until then the server's read deadline bounds a slow body.
func liftDeadlines(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		rc.SetWriteDeadline(time.Time{})
		if r.Body == nil || r.Body == http.NoBody {
			rc.SetReadDeadline(time.Time{})
		} else {
			r.Body = &liftOnEOF{ReadCloser: r.Body, rc: rc}
		}
		h.ServeHTTP(w, r)
	})
}

// liftOnEOF clears the read deadline when the body has been read whole.
type liftOnEOF struct {
	io.ReadCloser
	rc   *http.ResponseController
	done bool
}

func (b *liftOnEOF) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.done {
		b.done = true
		b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}
