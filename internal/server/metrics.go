package server

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairgate/fairgate/httplimit"
	"github.com/fairgate/fairgate/limiter"
)

// serverMetrics are the proxy's and the forward-auth endpoint's metrics.
// Labels are bounded: the route class (from the config, "none" when the
// request matched no class), the status class (2xx … 5xx) and outcomes.
type serverMetrics struct {
	proxy    *prometheus.HistogramVec
	upstream *prometheus.HistogramVec
	authz    *prometheus.CounterVec
	// settleRefused counts /v1/settle handles refused, by reason.
	settleRefused *prometheus.CounterVec
	// settled counts proxied measured-cost requests settled, by class
	// and rule.
	settled *prometheus.CounterVec

	// The upstream capacity gate's.
	capWait     *prometheus.HistogramVec
	capInFlight *prometheus.GaugeVec
	capShed     *prometheus.CounterVec
}

// latencyBuckets span a fast API call to the upstream timeout, in seconds.
var latencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

func newServerMetrics(reg prometheus.Registerer, gate *gateHolder) (*serverMetrics, error) {
	m := &serverMetrics{
		proxy: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fairgate_proxy_request_duration_seconds",
			Help:    "Proxied requests, from arrival to the end of the response (limited ones included), by route class and status class.",
			Buckets: latencyBuckets,
		}, []string{"class", "status"}),
		upstream: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fairgate_proxy_upstream_duration_seconds",
			Help:    "The upstream's part of proxied requests, from sending the request to its response headers, by route class and status class (error: no response).",
			Buckets: latencyBuckets,
		}, []string{"class", "status"}),
		authz: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fairgate_forward_auth_decisions_total",
			Help: "/v1/authz answers by outcome: allowed, limited, unauthorized, bad_request.",
		}, []string{"outcome"}),
		settleRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fairgate_settle_handles_refused_total",
			Help: "POST /v1/settle handles refused, by reason: invalid (malformed, changed, or signed with another key) or expired (past its 100 s); nothing was settled.",
		}, []string{"reason"}),
		settled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fairgate_proxy_settlements_total",
			Help: "Proxied requests of measured-cost classes settled, by route class and by the rule that gave the true cost: measured (the answer said it), error (5xx or no answer: settled at 1), refused (4xx: settled at 1), cut (the answer broke off: the cap), client_gone (the client left before the cost was said: the cap) and unmeasured (a complete answer that did not say its cost: the cap).",
		}, []string{"class", "rule"}),
		capWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fairgate_upstream_capacity_wait_seconds",
			Help:    "How long proxied requests waited for room in the upstream capacity gate (shed ones included), by route class.",
			Buckets: []float64{.0001, .001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"class"}),
		capInFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fairgate_upstream_capacity_in_flight",
			Help: "Proxied requests admitted by the upstream capacity gate and not yet done, by route class, on this instance.",
		}, []string{"class"}),
		capShed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fairgate_upstream_capacity_shed_total",
			Help: "Proxied requests the upstream capacity gate answered 503, by route class and reason: wait (no room within max_wait) or queue_full.",
		}, []string{"class", "reason"}),
	}
	if reg == nil {
		return m, nil
	}
	cs := []prometheus.Collector{m.proxy, m.upstream, m.authz, m.settleRefused, m.settled, m.capWait, m.capInFlight, m.capShed}
	if gate != nil {
		cs = append(cs, newCapacityCollector(gate))
	}
	return m, register(reg, cs...)
}

// register registers each of cs with reg. A server is built once per
// registry, so a collector already there is an error.
func register(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("server: metrics: %w", err)
		}
	}
	return nil
}

// registerHealth registers, with reg (nil: none), the gauges of what
// /readyz reports: fairgate_ready (1 while /readyz answers 200) and
// fairgate_store_up (1 while the store answers, whether or not readiness
// requires it).
func registerHealth(reg prometheus.Registerer, s *Server) error {
	if reg == nil {
		return nil
	}
	b := func(on bool) float64 {
		if on {
			return 1
		}
		return 0
	}
	ready := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "fairgate_ready",
		Help: "1 while /readyz answers 200: the instance serves and is not draining (and, with --ready-requires-store, the store answers); else 0.",
	}, func() float64 { return b(s.Ready()) })
	up := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "fairgate_store_up",
		Help: "1 while the store answers (reached, and its breakers closed); else 0. Readiness ignores it unless --ready-requires-store.",
	}, func() float64 { return b(s.StoreUp()) })
	return register(reg, ready, up)
}

// statusClass is "2xx" for 204, and so on.
func statusClass(code int) string {
	if code < 100 || code > 599 {
		return "other"
	}
	return strconv.Itoa(code/100) + "xx"
}

// classOf is the route class of a request the middleware decided, or
// "none".
func classOf(r *http.Request) string {
	if d, ok := httplimit.DecisionFrom(r.Context()); ok && d.Resolution.Class != "" {
		return d.Resolution.Class
	}
	return "none"
}

// statusRecorder remembers a response's status. It unwraps to the
// writer it wraps, so that http.ResponseController (flushes, deadlines,
// hijacking) reaches the connection's.
type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (w *statusRecorder) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusRecorder) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusRecorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// timed observes each proxied request's duration by class and status.
func (m *serverMetrics) timed(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w}
		var class string
		// The class is known once the middleware has decided: its Observe
		// hook writes it here, through the request's context.
		h.ServeHTTP(rec, r.WithContext(context.WithValue(r.Context(), classSinkKey{}, &class)))
		if class == "" {
			class = "none"
		}
		m.proxy.WithLabelValues(class, statusClass(rec.code)).Observe(time.Since(start).Seconds())
	})
}

type classSinkKey struct{}

// observeClass is the middleware's Observe hook: it gives timed the
// request's route class.
func observeClass(r *http.Request, d limiter.Decision) {
	if p, ok := r.Context().Value(classSinkKey{}).(*string); ok && d.Resolution.Class != "" {
		*p = d.Resolution.Class
	}
}

// observeSettled is the middleware's Settled hook: it counts each
// proxied measured-cost request by class and rule.
func (m *serverMetrics) observeSettled(r *http.Request, s httplimit.Settled) {
	m.settled.WithLabelValues(classOf(r), string(s.Rule)).Inc()
}

// upstreamTimed is a RoundTripper that observes the upstream's part.
type upstreamTimed struct {
	base http.RoundTripper
	m    *serverMetrics
}

func (t upstreamTimed) RoundTrip(r *http.Request) (*http.Response, error) {
	start := time.Now()
	resp, err := t.base.RoundTrip(r)
	status := "error"
	if err == nil {
		status = statusClass(resp.StatusCode)
	}
	t.m.upstream.WithLabelValues(classOf(r), status).Observe(time.Since(start).Seconds())
	return resp, err
}
