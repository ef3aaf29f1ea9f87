package server

import (
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/fairgate/fairgate/fairshare"
	"github.com/fairgate/fairgate/httplimit"
	"github.com/fairgate/fairgate/internal/config"
	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/promshare"
)

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
func (s *Server) SetCapacity(c *config.UpstreamCapacity) {
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

// gate is the proxy's capacity gate, from the section in force: its
// requests' weights by plan and critical classes, and the gate's metrics.
func (s *Server) gate() (func(http.Handler) http.Handler, error) {
	return httplimit.Gated(httplimit.GateConfig{
		Gate: func(_ *http.Request, d limiter.Decision) (*fairshare.Gate, float64, bool) {
			cs := s.capacity.cur.Load()
			if cs == nil {
				return nil, 0, false
			}
			// Anonymous requests have no plan, so weigh 1.
			return cs.gate, cs.weights[d.Resolution.Plan], cs.critical[d.Resolution.Class]
		},
		Observe: func(r *http.Request, waited time.Duration, err error) func() {
			class := classOf(r)
			s.metrics.capWait.WithLabelValues(class).Observe(waited.Seconds())
			var se *fairshare.ShedError
			switch {
			case errors.As(err, &se) && se.QueueFull:
				s.metrics.capShed.WithLabelValues(class, "queue_full").Inc()
			case se != nil:
				s.metrics.capShed.WithLabelValues(class, "wait").Inc()
			case err == nil:
				in := s.metrics.capInFlight.WithLabelValues(class)
				in.Inc()
				return in.Dec
			}
			return nil
		},
	})
}

// UpstreamStats are the upstream capacity gate's numbers, as its metrics
// export them.
type UpstreamStats struct {
	// Limit is the limit in force (learned or fixed); Waiting the
	// requests waiting for room.
	Limit, Waiting int
	// InFlight are the admitted requests not yet done, by route class.
	InFlight map[string]int64
	// Shed counts the requests answered 503 since start.
	Shed int64
}

// Upstream returns the upstream capacity gate's numbers; false without a
// gate in force.
func (s *Server) Upstream() (UpstreamStats, bool) {
	cs := s.capacity.cur.Load()
	if cs == nil {
		return UpstreamStats{}, false
	}
	g := cs.gate.Stats()
	u := UpstreamStats{Limit: g.Limit, Waiting: g.Waiting, InFlight: map[string]int64{}}
	promshare.Collect(s.metrics.capInFlight, func(m *dto.Metric) {
		u.InFlight[promshare.Label(m, "class")] = int64(m.GetGauge().GetValue())
	})
	promshare.Collect(s.metrics.capShed, func(m *dto.Metric) { u.Shed += int64(m.GetCounter().GetValue()) })
	return u, true
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
