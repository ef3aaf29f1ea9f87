package dash

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/json"
	"math"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/fairgate/fairgate/httplimit/problem"
	"github.com/fairgate/fairgate/internal/auth"
)

//go:embed index.html
var indexHTML []byte

// History is how many one-second points the charts show.
const History = 120

// Point is one second of decisions, by outcome.
type Point struct {
	T           int64   `json:"t"` // Unix seconds
	Allowed     float64 `json:"allowed"`
	Limited     float64 `json:"limited"`
	Shadow      float64 `json:"shadow"`
	Degraded    float64 `json:"degraded"`
	Unavailable float64 `json:"unavailable"`
}

// PolicyRate is one policy's decisions per second by outcome.
type PolicyRate struct {
	Policy    string  `json:"policy"`
	Outcome   string  `json:"outcome"`
	PerSecond float64 `json:"per_second"`
}

// Data is what /dashboard/data answers.
type Data struct {
	Time         time.Time         `json:"time"`
	Rate         float64           `json:"decisions_per_second"`
	ShareLimited float64           `json:"share_limited"`
	History      []Point           `json:"history"`
	Policies     []PolicyRate      `json:"policies"`
	StoreP50ms   float64           `json:"store_p50_ms"`
	StoreP99ms   float64           `json:"store_p99_ms"`
	FailOpen     float64           `json:"fail_open_total"`
	FailClosed   float64           `json:"fail_closed_total"`
	Breakers     map[string]string `json:"breakers"`
	// Queues are the depths by kind; a kind whose depth cannot be read
	// (its store is out) is "unavailable" there, never left out.
	Queues     map[string]any `json:"queues"`
	TopLimited []Entry        `json:"top_limited"`
	// TenantsHidden says TopLimited is left empty because the dashboard
	// has no token to ask for: tenant IDs are shown only to a caller
	// with a credential.
	TenantsHidden bool `json:"tenants_hidden,omitempty"`
	// Upstream is the proxy's upstream capacity gate; nil without one.
	Upstream *Upstream `json:"upstream,omitempty"`
}

// Upstream is the upstream capacity gate of the moment.
type Upstream struct {
	// Limit is the limit in force (learned or fixed); Waiting the
	// requests waiting for room.
	Limit   float64 `json:"limit"`
	Waiting float64 `json:"waiting"`
	// InFlight are the admitted requests by route class.
	InFlight map[string]float64 `json:"in_flight"`
	// ShedTotal counts the requests answered 503 since start;
	// ShedPerSecond is its rate since the previous sample.
	ShedTotal     float64 `json:"shed_total"`
	ShedPerSecond float64 `json:"shed_per_second"`
}

// Dashboard samples a registry and serves the page. It is safe for
// concurrent use.
type Dashboard struct {
	g      prometheus.Gatherer
	top    *TopK
	tokens [][sha256.Size]byte // the hashes of the tokens the data accepts

	mu       sync.Mutex
	prev     map[string]float64 // counter values at the last sample
	prevLat  []float64          // the store latency histogram's cumulative counts
	prevShed float64            // the gate's shed count at the last sample
	hist     []Point
	data     Data
	last     time.Time
}

// New returns a dashboard over g. Limited tenants come through
// Dashboard.Limited (wire it to limiter.Config.Limited). The non-empty
// tokens (the admin and the internal token) are the bearer tokens
// /dashboard/data accepts: with any, it answers 401 to a request that
// carries none of them; with none, it answers without tenant IDs (an
// empty top_limited and tenants_hidden), which only a credential shows.
func New(g prometheus.Gatherer, tokens ...string) *Dashboard {
	d := &Dashboard{g: g, top: NewTopK(64), prev: map[string]float64{}}
	for _, t := range tokens {
		if t != "" {
			d.tokens = append(d.tokens, sha256.Sum256([]byte(t)))
		}
	}
	return d
}

// Limited counts a limited request of tenant in the heavy-hitters sketch.
func (d *Dashboard) Limited(tenant string) {
	if tenant == "" {
		tenant = "(anonymous)"
	}
	d.top.Add(tenant)
}

// Run samples the registry every second until ctx ends, and lets the
// limited-tenants sketch forget half of its counts every minute.
func (d *Dashboard) Run(ctx context.Context) error {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	n := 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-t.C:
			d.Sample(now)
			if n++; n%60 == 0 {
				d.top.Decay(0.5)
			}
		}
	}
}

// Sample reads the registry at now and updates the data: rates are the
// change since the previous sample.
func (d *Dashboard) Sample(now time.Time) {
	mfs, err := d.g.Gather()
	if err != nil && len(mfs) == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	secs := 1.0
	if !d.last.IsZero() {
		secs = max(now.Sub(d.last).Seconds(), 0.001)
	}
	first := d.last.IsZero()
	d.last = now
	next := Data{Time: now, Breakers: map[string]string{}, Queues: map[string]any{}}
	p := Point{T: now.Unix()}
	cur, lat := read(mfs, &next)
	var total, limited float64
	for key, v := range cur {
		delta := v - d.prev[key]
		if first || delta < 0 {
			delta = 0
		}
		rate := delta / secs
		policy, outcome, _ := strings.Cut(key, "\x00")
		if rate > 0 {
			next.Policies = append(next.Policies, PolicyRate{policy, outcome, rate})
		}
		total += rate
		switch outcome {
		case "limited":
			p.Limited += rate
			limited += rate
		case "shadow_limited":
			p.Shadow += rate
		case "degraded_open":
			p.Degraded += rate
		case "unavailable_closed":
			p.Unavailable += rate
		default:
			p.Allowed += rate
		}
	}
	d.prev = cur
	if u := next.Upstream; u != nil {
		if !first && u.ShedTotal >= d.prevShed {
			u.ShedPerSecond = (u.ShedTotal - d.prevShed) / secs
		}
		d.prevShed = u.ShedTotal
	}
	sort.Slice(next.Policies, func(i, j int) bool { return next.Policies[i].PerSecond > next.Policies[j].PerSecond })
	next.Policies = next.Policies[:min(len(next.Policies), 20)]
	next.Rate = total
	if total > 0 {
		next.ShareLimited = limited / total
	}
	if lat != nil {
		next.StoreP50ms, next.StoreP99ms, d.prevLat = quantiles(lat, d.prevLat)
	}
	d.hist = append(d.hist, p)
	if len(d.hist) > History {
		d.hist = slices.Delete(d.hist, 0, len(d.hist)-History)
	}
	next.History = slices.Clone(d.hist)
	next.TopLimited = d.top.Top(10)
	d.data = next
}

// read takes from the gathered metrics the decisions counted by policy
// and outcome (cumulative), the store latency histogram, and into next the
// fail-mode counts, breaker states and queue depths.
func read(mfs []*dto.MetricFamily, next *Data) (map[string]float64, *dto.Histogram) {
	cur := map[string]float64{}
	var lat *dto.Histogram
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			l := labels(m)
			switch mf.GetName() {
			case "fairgate_decisions_total":
				key := l["policy"] + "\x00" + l["outcome"]
				v := m.GetCounter().GetValue()
				cur[key] += v
			case "fairgate_store_failure_decisions_total":
				if l["fail_mode"] == "open" {
					next.FailOpen += m.GetCounter().GetValue()
				} else {
					next.FailClosed += m.GetCounter().GetValue()
				}
			case "fairgate_store_call_seconds":
				lat = m.GetHistogram()
			case "fairgate_store_breaker_state":
				next.Breakers["store"] = breakerState(m.GetGauge().GetValue())
			case "fairgate_dependency_breaker_state":
				next.Breakers[l["dependency"]] = breakerState(m.GetGauge().GetValue())
			case "fairgate_upstream_capacity_limit":
				upstream(next).Limit = m.GetGauge().GetValue()
			case "fairgate_upstream_capacity_waiting":
				upstream(next).Waiting = m.GetGauge().GetValue()
			case "fairgate_upstream_capacity_in_flight":
				upstream(next).InFlight[l["class"]] = m.GetGauge().GetValue()
			case "fairgate_upstream_capacity_shed_total":
				upstream(next).ShedTotal += m.GetCounter().GetValue()
			case "fairgate_queue_depth":
				if v := m.GetGauge().GetValue(); math.IsNaN(v) || math.IsInf(v, 0) {
					next.Queues[l["kind"]] = "unavailable"
				} else {
					next.Queues[l["kind"]] = v
				}
			}
		}
	}
	return cur, lat
}

// upstream is next's gate, made on first use.
func upstream(next *Data) *Upstream {
	if next.Upstream == nil {
		next.Upstream = &Upstream{InFlight: map[string]float64{}}
	}
	return next.Upstream
}

// quantiles returns the p50 and p99 (ms) of the histogram's observations
// since prev (its cumulative bucket counts and sample count then), and the
// counts now. With nothing new they are 0. A quantile is the upper bound
// of the bucket it falls in; past the last bucket it is +Inf, shown as the
// last bound.
func quantiles(h *dto.Histogram, prev []float64) (p50, p99 float64, now []float64) {
	bs := h.GetBucket()
	now = make([]float64, len(bs)+1)
	for i, b := range bs {
		now[i] = float64(b.GetCumulativeCount())
	}
	now[len(bs)] = float64(h.GetSampleCount())
	if len(prev) != len(now) {
		prev = make([]float64, len(now))
	}
	n := now[len(bs)] - prev[len(bs)]
	q := func(f float64) float64 {
		if n <= 0 || len(bs) == 0 {
			return 0
		}
		for i, b := range bs {
			if now[i]-prev[i] >= f*n {
				return b.GetUpperBound() * 1000
			}
		}
		return bs[len(bs)-1].GetUpperBound() * 1000
	}
	return q(0.5), q(0.99), now
}

func breakerState(v float64) string {
	switch v {
	case 0:
		return "closed"
	case 1:
		return "half-open"
	}
	return "open"
}

func labels(m *dto.Metric) map[string]string {
	out := make(map[string]string, len(m.GetLabel()))
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// ServeHTTP serves GET /dashboard (the page) and GET /dashboard/data.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET")
		problem.Write(w, problem.Details{Status: http.StatusMethodNotAllowed, Detail: "the dashboard takes GET"})
		return
	}
	switch strings.TrimSuffix(r.URL.Path, "/") {
	case "/dashboard":
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'")
		w.Header().Set("Cache-Control", "no-store")
		w.Write(indexHTML)
	case "/dashboard/data":
		if d.AuthRequired() && !d.authorized(r) {
			w.Header().Set("Connection", "close") // no use for it without a token
			w.Header().Set("WWW-Authenticate", `Bearer realm="fairgate-dashboard"`)
			problem.Write(w, problem.Details{Status: http.StatusUnauthorized, Detail: "the dashboard's data needs Authorization: Bearer <admin token or internal token>"})
			return
		}
		d.mu.Lock()
		data := d.data
		d.mu.Unlock()
		if !d.AuthRequired() {
			data.TopLimited, data.TenantsHidden = nil, true
		}
		if data.History == nil { // arrays, never null (docs/openapi.json)
			data.History = []Point{}
		}
		if data.Policies == nil {
			data.Policies = []PolicyRate{}
		}
		if data.TopLimited == nil {
			data.TopLimited = []Entry{}
		}
		body, err := json.Marshal(data)
		if err != nil {
			// Never a blank 200: say what went wrong.
			problem.Write(w, problem.Details{Status: http.StatusInternalServerError, Detail: "the dashboard's data cannot be encoded: " + err.Error()})
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.Write(append(body, '\n'))
	default:
		problem.Write(w, problem.Details{Status: http.StatusNotFound, Detail: "no such dashboard page: " + r.URL.Path})
	}
}

// authorized reports whether r carries one of the tokens.
func (d *Dashboard) authorized(r *http.Request) bool {
	ok := false
	for _, sum := range d.tokens {
		ok = auth.BearerMatches(r, sum) || ok // every one compared: no early answer
	}
	return ok
}

// AuthRequired reports whether the data needs a token; without one it is
// served without tenant IDs.
func (d *Dashboard) AuthRequired() bool { return len(d.tokens) > 0 }
