package server

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairgate/fairgate/fairshare"
	"github.com/fairgate/fairgate/httplimit"
	"github.com/fairgate/fairgate/httplimit/problem"
)

// Capacity shares the proxied upstream's concurrency between tenants
// (the config's upstream_capacity section).
type Capacity struct {
	// Gate configures the gate: the learned limit's bounds or a fixed
	// limit, the wait, the queue, the tolerance and the reserve.
	Gate fairshare.Config
	// Critical are the route classes that may use the reserve.
	Critical []string
	// Weights are the tenants' weights by plan; unlisted plans weigh 1.
	Weights map[string]float64
}

// capacity is the gate in force and how requests map onto it; swapped
// whole on a reload, the gate itself kept.
type capacity struct {
	gate     *fairshare.Gate
	critical map[string]bool
	weights  map[string]float64
}

// gateHolder holds the gate across reloads: a config that removes the
// section and one that brings it back keep the learned limit.
type gateHolder struct {
	mu   sync.Mutex
	gate *fairshare.Gate
	cur  atomic.Pointer[capacity]
}

// SetCapacity puts c in force for the proxy; nil turns the gate off.
// The gate keeps what it holds and its learned limit (moved into the new
// bounds): a reload never lets through requests over the limit that the
// old gate queued, and never forgets what it learned.
func (s *Server) SetCapacity(c *Capacity) {
	h := &s.capacity
	h.mu.Lock()
	defer h.mu.Unlock()
	if c == nil {
		h.cur.Store(nil)
		return
	}
	if h.gate == nil {
		h.gate = fairshare.New(c.Gate)
	} else {
		h.gate.SetConfig(c.Gate)
	}
	cs := &capacity{gate: h.gate, critical: map[string]bool{}, weights: c.Weights}
	for _, class := range c.Critical {
		cs.critical[class] = true
	}
	h.cur.Store(cs)
}

// anonymousTenant is the one party of the gate that every request without
// a verified tenant belongs to; tenants' names are prefixed so that none
// can be it.
const anonymousTenant = "anonymous"

// gated admits each decided request through the capacity gate, if one is
// in force: it waits its turn, or is answered 503 with Retry-After when
// it finds no room within the wait. The ticket is done when the handler
// returns; the upstream's answer teaches the limit (see upstreamTimed).
func (s *Server) gated(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cs := s.capacity.cur.Load()
		if cs == nil {
			next.ServeHTTP(w, r)
			return
		}
		class := classOf(r)
		req := fairshare.Request{Tenant: anonymousTenant, Kind: class, Critical: cs.critical[class], Weight: 1}
		if who, ok := httplimit.IdentityFrom(r.Context()); ok && who.Tenant != "" {
			req.Tenant = "t:" + who.Tenant
			if d, ok := httplimit.DecisionFrom(r.Context()); ok {
				if wt, ok := cs.weights[d.Resolution.Plan]; ok {
					req.Weight = wt
				}
			}
		}
		start := time.Now()
		tk, err := cs.gate.Acquire(r.Context(), req)
		s.metrics.capWait.WithLabelValues(class).Observe(time.Since(start).Seconds())
		if err != nil {
			s.shed(w, class, err)
			return
		}
		in := s.metrics.capInFlight.WithLabelValues(class)
		in.Inc()
		defer func() {
			in.Dec()
			tk.Done(false)
		}()
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ticketKey{}, tk)))
	})
}

type ticketKey struct{}

// answered teaches r's gate ticket, if it has one, the upstream's answer:
// failed for no answer (the client's own cancel aside) or a 502, 503 or
// 504 from an overloaded upstream.
func answered(r *http.Request, resp *http.Response, err error) {
	tk, ok := r.Context().Value(ticketKey{}).(*fairshare.Ticket)
	if !ok || err != nil && r.Context().Err() != nil {
		return
	}
	failed := err != nil
	if resp != nil {
		switch resp.StatusCode {
		case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			failed = true
		}
	}
	tk.Answered(failed)
}

// shed answers a request the gate did not admit: 503 with Retry-After,
// or nothing for a client that went away.
func (s *Server) shed(w http.ResponseWriter, class string, err error) {
	var se *fairshare.ShedError
	if !errors.As(err, &se) {
		return // the client went away while it waited
	}
	reason := "wait"
	if se.QueueFull {
		reason = "queue_full"
	}
	s.metrics.capShed.WithLabelValues(class, reason).Inc()
	w.Header().Set("Retry-After", problem.RetryAfterSeconds(se.RetryAfter))
	problem.Write(w, problem.Details{Status: http.StatusServiceUnavailable,
		Detail: "the upstream API is at its capacity and your share of it is in use; retry later",
		Ext:    map[string]any{"code": "upstream_busy", "retry_after_seconds": problem.RetrySeconds(se.RetryAfter)}})
}

// capacityCollector reports the gate's learned limit and waiting
// requests, read when scraped.
type capacityCollector struct {
	h              *gateHolder
	limit, waiting *prometheus.Desc
}

func newCapacityCollector(h *gateHolder) *capacityCollector {
	return &capacityCollector{h: h,
		limit:   prometheus.NewDesc("fairgate_upstream_capacity_limit", "The upstream capacity gate's limit in force (learned or fixed): proxied requests in flight at most, on this instance.", nil, nil),
		waiting: prometheus.NewDesc("fairgate_upstream_capacity_waiting", "Proxied requests waiting for room in the upstream capacity gate, on this instance.", nil, nil)}
}

// Describe sends the two descriptions.
func (c *capacityCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.limit; ch <- c.waiting }

// Collect sends the numbers of the gate in force; none without one.
func (c *capacityCollector) Collect(ch chan<- prometheus.Metric) {
	cs := c.h.cur.Load()
	if cs == nil {
		return
	}
	st := cs.gate.Stats()
	ch <- prometheus.MustNewConstMetric(c.limit, prometheus.GaugeValue, float64(st.Limit))
	ch <- prometheus.MustNewConstMetric(c.waiting, prometheus.GaugeValue, float64(st.Waiting))
}
