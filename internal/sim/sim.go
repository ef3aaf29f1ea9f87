package sim

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fairgate/fairgate/algo"
)

// Policy is a limit with the text it was given as: a rate limit, a
// concurrency limit, or both, layered as fairgate layers them (a request
// needs a slot and a token; refused either, it takes neither).
type Policy struct {
	Text string
	// Limit is the rate limit; zero without one.
	Limit algo.Limit
	// Concurrency is the requests in flight at most; zero without a
	// concurrency layer.
	Concurrency int64
}

// hasRate reports a rate layer.
func (p Policy) hasRate() bool { return p.Limit.Limit > 0 }

// Describe is the policy's layers in words.
func (p Policy) Describe() string {
	switch {
	case !p.hasRate():
		return fmt.Sprintf("%d in flight", p.Concurrency)
	case p.Concurrency > 0:
		return fmt.Sprintf("%v and %d in flight", p.Limit, p.Concurrency)
	}
	return p.Limit.String()
}

// capacity is the chart's full scale: the rate layer's capacity, or the
// concurrency limit.
func (p Policy) capacity() int64 {
	if p.hasRate() {
		return p.Limit.Capacity()
	}
	return p.Concurrency
}

// MaxConcurrency bounds a policy's concurrency layer.
const MaxConcurrency = 1_000_000

// ParsePolicy reads "limit=60,period=1m,burst=60,algorithm=token_bucket"
// (burst and algorithm optional; period a Go duration or 1d), with or
// without "concurrency=N" (requests in flight), or "concurrency=N" alone.
func ParsePolicy(s string) (Policy, error) {
	p := Policy{Text: s}
	seen := map[string]bool{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return p, fmt.Errorf("policy %q: %q is not name=value", s, kv)
		}
		if seen[k] {
			return p, fmt.Errorf("policy %q: %s given twice", s, k)
		}
		seen[k] = true
		var err error
		switch k {
		case "limit", "burst":
			var n int64
			if n, err = strconv.ParseInt(v, 10, 64); err != nil {
				err = errors.New("not a whole number")
			}
			if k == "limit" {
				p.Limit.Limit = n
			} else {
				p.Limit.Burst = n
			}
		case "period":
			p.Limit.Period, err = parseDuration(v)
		case "algorithm":
			p.Limit.Algorithm, err = algo.ParseAlgorithm(v)
		case "concurrency":
			if p.Concurrency, err = strconv.ParseInt(v, 10, 64); err != nil {
				err = errors.New("not a whole number")
			}
			if err == nil && (p.Concurrency < 1 || p.Concurrency > MaxConcurrency) {
				err = fmt.Errorf("want 1 to %d requests in flight", MaxConcurrency)
			}
		default:
			return p, fmt.Errorf("policy %q: unknown field %q: want limit, period, burst, algorithm or concurrency", s, k)
		}
		if err != nil {
			return p, fmt.Errorf("policy %q: %s=%q: %v", s, k, v, err)
		}
	}
	rate := seen["limit"] || seen["period"] || seen["burst"] || seen["algorithm"]
	if rate && (!seen["limit"] || !seen["period"]) || !rate && !seen["concurrency"] {
		return p, fmt.Errorf("policy %q: limit and period are required (or concurrency alone)", s)
	}
	if !rate {
		return p, nil
	}
	if err := p.Limit.Validate(); err != nil {
		return p, fmt.Errorf("policy %q: %w", s, err)
	}
	return p, nil
}

// parseDuration is time.ParseDuration plus whole days ("7d").
func parseDuration(s string) (time.Duration, error) {
	if d, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(d)
		if err != nil || n <= 0 {
			return 0, fmt.Errorf("want a positive duration such as 1s, 1m or 7d")
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("want a duration such as 1s, 1m or 7d")
	}
	return d, nil
}

// MaxRequests bounds the requests a traffic description may make, so that
// a typo cannot ask for a billion.
const MaxRequests = 1_000_000

// Arrival is one request of the traffic: when it comes, and how long it
// holds a concurrency slot once admitted.
type Arrival struct {
	At, Hold time.Duration
}

// ParseTraffic reads a traffic description: clauses separated by ';' or
// new lines, each one of
//
//	burst N at T            N requests at time T
//	steady R/s from T to U  R requests a second, evenly, from T up to U
//	every D from T to U     one request every D from T up to U
//
// each optionally followed by "hold D": how long its requests are in
// flight (for a concurrency layer; zero without). Times are durations
// since the start (1s, 1m30s). Lines starting with '#' are comments. It
// returns the arrivals, sorted by time.
func ParseTraffic(s string) ([]Arrival, error) {
	var out []Arrival
	clauses := strings.FieldsFunc(s, func(r rune) bool { return r == ';' || r == '\n' })
	for i, c := range clauses {
		c = strings.TrimSpace(c)
		if c == "" || strings.HasPrefix(c, "#") {
			continue
		}
		bad := func(format string, args ...any) error {
			return fmt.Errorf("traffic clause %d %q: %s", i+1, c, fmt.Sprintf(format, args...))
		}
		f := strings.Fields(c)
		var hold time.Duration
		if n := len(f); n >= 2 && f[n-2] == "hold" {
			d, err := parseDuration(f[n-1])
			if err != nil || d <= 0 {
				return nil, bad("hold %q: want a positive duration such as 200ms", f[n-1])
			}
			hold, f = d, f[:n-2]
		}
		first := len(out)
		switch {
		case len(f) == 4 && f[0] == "burst" && f[2] == "at":
			n, err := strconv.Atoi(f[1])
			if err != nil || n < 1 {
				return nil, bad("burst size %q: want a positive integer", f[1])
			}
			at, err := parseDuration(f[3])
			if err != nil {
				return nil, bad("time %q: %v", f[3], err)
			}
			if len(out)+n > MaxRequests {
				return nil, bad("more than %d requests in all", MaxRequests)
			}
			for range n {
				out = append(out, Arrival{At: at})
			}
		case len(f) == 6 && (f[0] == "steady" || f[0] == "every") && f[2] == "from" && f[4] == "to":
			from, err1 := parseDuration(f[3])
			to, err2 := parseDuration(f[5])
			if err1 != nil || err2 != nil || to <= from {
				return nil, bad("want from T to U with U after T, such as from 40s to 90s")
			}
			var step time.Duration
			if f[0] == "steady" {
				r, err := strconv.ParseFloat(strings.TrimSuffix(f[1], "/s"), 64)
				if err != nil || !strings.HasSuffix(f[1], "/s") || !(r > 0) || math.IsInf(r, 0) {
					return nil, bad("rate %q: want requests per second such as 0.5/s", f[1])
				}
				step = time.Duration(float64(time.Second) / r)
			} else {
				d, err := parseDuration(f[1])
				if err != nil || d <= 0 {
					return nil, bad("interval %q: want a positive duration", f[1])
				}
				step = d
			}
			if step <= 0 || int64((to-from)/step) > MaxRequests-int64(len(out)) {
				return nil, bad("more than %d requests in all", MaxRequests)
			}
			for t := from; t < to; t += step {
				out = append(out, Arrival{At: t})
			}
		default:
			return nil, bad("want burst N at T, steady R/s from T to U, or every D from T to U, each optionally with hold D")
		}
		for i := first; i < len(out); i++ {
			out[i].Hold = hold
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("traffic %q describes no request", s)
	}
	slices.SortStableFunc(out, func(a, b Arrival) int { return cmp.Compare(a.At, b.At) })
	return out, nil
}

// Request is one simulated request's decision.
type Request struct {
	At      time.Duration
	Allowed bool
	// Remaining is the capacity left after the decision: the rate
	// layer's, or free slots without one.
	Remaining int64
	Retry     time.Duration
	// InFlight is the requests in flight after the decision; NoSlot
	// reports a request refused by the concurrency layer.
	InFlight int64
	NoSlot   bool
}

// Sample is the capacity left at a time (a peek, which changes nothing),
// and the requests in flight then.
type Sample struct {
	At        time.Duration
	Remaining int64
	InFlight  int64
}

// Run is one policy's run.
type Run struct {
	Policy   Policy
	Requests []Request
	Samples  []Sample
	Admitted int
	Rejected int
}

// epoch is the virtual clock's start, in µs: a fixed, window-aligned
// instant, so fixed windows start at 0 of the run.
const epoch = int64(1_800_000_000) * 1_000_000 / 86_400_000_000 * 86_400_000_000

// Simulate runs p over the arrivals (each of cost 1) until end,
// sampling the remaining capacity and the requests in flight every step
// and just before and after each request. A request needs a slot (when p
// has a concurrency layer), held for its Hold, and a token (when p has a
// rate layer); refused a slot it takes no token, refused a token it gives
// its slot back.
func Simulate(p Policy, arrivals []Arrival, end, step time.Duration) Run {
	r := Run{Policy: p}
	var st algo.State
	var ends []time.Duration // admitted requests' ends, sorted
	us := func(d time.Duration) int64 { return epoch + int64(d/time.Microsecond) }
	release := func(at time.Duration) {
		n, _ := slices.BinarySearch(ends, at+1)
		ends = ends[n:]
	}
	remaining := func(at time.Duration) int64 {
		if !p.hasRate() {
			return p.Concurrency - int64(len(ends))
		}
		o, _ := p.Limit.Eval(st, us(at), 0)
		return o.Remaining
	}
	peek := func(at time.Duration) {
		release(at)
		r.Samples = append(r.Samples, Sample{at, remaining(at), int64(len(ends))})
	}
	next := time.Duration(0)
	for _, a := range arrivals {
		for ; next < a.At; next += step {
			peek(next)
		}
		peek(a.At)
		q := Request{At: a.At, Allowed: true}
		if p.Concurrency > 0 && int64(len(ends)) >= p.Concurrency {
			q.Allowed, q.NoSlot, q.Retry = false, true, ends[0]-a.At
		}
		if q.Allowed && p.hasRate() {
			o, ns := p.Limit.Eval(st, us(a.At), 1)
			st = ns
			q.Allowed, q.Retry = o.Allowed, time.Duration(o.RetryUs)*time.Microsecond
		}
		if q.Allowed && p.Concurrency > 0 {
			i, _ := slices.BinarySearch(ends, a.At+a.Hold)
			ends = slices.Insert(ends, i, a.At+a.Hold)
			release(a.At) // a request that holds for no time ends at once
		}
		q.Remaining, q.InFlight = remaining(a.At), int64(len(ends))
		r.Requests = append(r.Requests, q)
		if q.Allowed {
			r.Admitted++
		} else {
			r.Rejected++
		}
		peek(a.At)
	}
	for ; next <= end; next += step {
		peek(next)
	}
	return r
}

// RemainingAt is the capacity left at t (the last sample at or before t).
func (r *Run) RemainingAt(t time.Duration) int64 {
	i, _ := slices.BinarySearchFunc(r.Samples, t, func(s Sample, t time.Duration) int {
		if s.At <= t {
			return -1
		}
		return 1
	})
	if i == 0 {
		return r.Policy.capacity()
	}
	return r.Samples[i-1].Remaining
}
