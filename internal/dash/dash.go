package dash

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/json"
	"maps"
	"math"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/fairgate/fairgate/httplimit/problem"
	"github.com/fairgate/fairgate/internal/auth"
	"github.com/fairgate/fairgate/limiter"
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

// Source gives the dashboard its numbers, read once a second. The daemon
// implements it from the counters its metrics export, read as values.
type Source interface {
	Read() Reading
}

// Reading is what the dashboard shows, read at one moment. Counts are
// since start; the dashboard makes rates of them.
type Reading struct {
	// Limiter is the limiter's decisions, store calls and store breaker
	// (shown as the breaker "store"; none when its Breaker is "").
	Limiter limiter.Stats
	// Breakers are the dependencies' breakers by name: "closed",
	// "half-open" or "open".
	Breakers map[string]string
	// Queues are the job queues' depths by kind; NaN for a kind whose
	// depth cannot be read (its store is out).
	Queues map[string]float64
	// Upstream is the upstream capacity gate (its ShedPerSecond is the
	// dashboard's to fill); nil without one.
	Upstream *Upstream
}

// Dashboard samples a Source and serves the page. It is safe for
// concurrent use.
type Dashboard struct {
	src    Source
	top    *TopK
	tokens [][sha256.Size]byte // the hashes of the tokens the data accepts

	mu       sync.Mutex
	prev     map[limiter.PolicyOutcome]int64 // decisions at the last sample
	prevLat  []float64                       // the store latency histogram's cumulative counts
	prevShed float64                         // the gate's shed count at the last sample
	hist     []Point
	data     Data
	last     time.Time
}

// New returns a dashboard over src (nil: nothing to show but the limited
// tenants). Limited tenants come through Dashboard.Limited (wire it to
// limiter.Config.Limited). The non-empty tokens (the admin and the
// internal token) are the bearer tokens /dashboard/data accepts: with
// any, it answers 401 to a request that carries none of them; with none,
// it answers without tenant IDs (an empty top_limited and
// tenants_hidden), which only a credential shows.
func New(src Source, tokens ...string) *Dashboard {
	d := &Dashboard{src: src, top: NewTopK(64), prev: map[limiter.PolicyOutcome]int64{}}
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

// Run samples the source every second until ctx ends, and lets the
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

// Sample reads the source at now and updates the data: rates are the
// change since the previous sample.
func (d *Dashboard) Sample(now time.Time) {
	var r Reading
	if d.src != nil {
		r = d.src.Read()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	secs := 1.0
	if !d.last.IsZero() {
		secs = max(now.Sub(d.last).Seconds(), 0.001)
	}
	first := d.last.IsZero()
	d.last = now
	next := Data{Time: now, Breakers: map[string]string{}, Queues: map[string]any{},
		FailOpen: float64(r.Limiter.FailOpen), FailClosed: float64(r.Limiter.FailClosed), Upstream: r.Upstream}
	if r.Limiter.Breaker != "" {
		next.Breakers["store"] = r.Limiter.Breaker
	}
	maps.Copy(next.Breakers, r.Breakers)
	for kind, v := range r.Queues {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			next.Queues[kind] = "unavailable"
		} else {
			next.Queues[kind] = v
		}
	}
	p := Point{T: now.Unix()}
	var total, limited float64
	for key, v := range r.Limiter.Decisions {
		delta := float64(v - d.prev[key])
		if first || delta < 0 {
			delta = 0
		}
		rate := delta / secs
		if rate > 0 {
			next.Policies = append(next.Policies, PolicyRate{key.Policy, string(key.Outcome), rate})
		}
		total += rate
		switch key.Outcome {
		case limiter.ReasonLimited:
			p.Limited += rate
			limited += rate
		case limiter.ReasonShadowLimited:
			p.Shadow += rate
		case limiter.ReasonDegradedOpen:
			p.Degraded += rate
		case limiter.ReasonUnavailable:
			p.Unavailable += rate
		default:
			p.Allowed += rate
		}
	}
	d.prev = r.Limiter.Decisions
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
	if lat := r.Limiter.StoreCalls; len(lat.Bounds) > 0 {
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

// quantiles returns the p50 and p99 (ms) of the histogram's observations
// since prev (its cumulative bucket counts and count then), and the counts
// now. With nothing new they are 0. A quantile is the upper bound of the
// bucket it falls in; past the last bucket it is +Inf, shown as the last
// bound.
func quantiles(h limiter.Histogram, prev []float64) (p50, p99 float64, now []float64) {
	bs := h.Bounds
	now = make([]float64, len(bs)+1)
	for i := range bs {
		now[i] = float64(h.Cumulative[i])
	}
	now[len(bs)] = float64(h.Count)
	if len(prev) != len(now) {
		prev = make([]float64, len(now))
	}
	n := now[len(bs)] - prev[len(bs)]
	ms := func(b time.Duration) float64 { return float64(b) / float64(time.Millisecond) }
	q := func(f float64) float64 {
		if n <= 0 || len(bs) == 0 {
			return 0
		}
		for i, b := range bs {
			if now[i]-prev[i] >= f*n {
				return ms(b)
			}
		}
		return ms(bs[len(bs)-1])
	}
	return q(0.5), q(0.99), now
}

// ServeHTTP serves GET /dashboard (the page), GET /dashboard/data and,
// when the Source implements [Budgets], GET /dashboard/tenant?id=<tenant>
// (a tenant's budgets: the limits, remaining and reset of each of its
// layers, in its unit).
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
			d.unauthorized(w)
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
		writeJSON(w, "the dashboard's data", data)
	case "/dashboard/tenant":
		d.serveBudget(w, r)
	default:
		problem.Write(w, problem.Details{Status: http.StatusNotFound, Detail: "no such dashboard page: " + r.URL.Path})
	}
}

// writeJSON answers v, what names, as JSON never cached; never a blank
// 200: an encoding error is a problem saying what went wrong.
func writeJSON(w http.ResponseWriter, what string, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		problem.Write(w, problem.Details{Status: http.StatusInternalServerError, Detail: what + " cannot be encoded: " + err.Error()})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(append(body, '\n'))
}

// unauthorized answers a request for data without a token it accepts.
func (d *Dashboard) unauthorized(w http.ResponseWriter) {
	w.Header().Set("Connection", "close") // no use for it without a token
	w.Header().Set("WWW-Authenticate", `Bearer realm="fairgate-dashboard"`)
	problem.Write(w, problem.Details{Status: http.StatusUnauthorized, Detail: "the dashboard's data needs Authorization: Bearer <admin token or internal token>"})
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
