package sim

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fairgate/fairgate/algo"
)

// Policy is a limit with the text it was given as.
type Policy struct {
	Text  string
	Limit algo.Limit
}

// ParsePolicy reads "limit=60,period=1m,burst=60,algorithm=token_bucket"
// (burst and algorithm optional; period a Go duration or 1d).
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
			n, err = strconv.ParseInt(v, 10, 64)
			if k == "limit" {
				p.Limit.Limit = n
			} else {
				p.Limit.Burst = n
			}
		case "period":
			p.Limit.Period, err = parseDuration(v)
		case "algorithm":
			p.Limit.Algorithm, err = algo.ParseAlgorithm(v)
		default:
			return p, fmt.Errorf("policy %q: unknown field %q: want limit, period, burst or algorithm", s, k)
		}
		if err != nil {
			return p, fmt.Errorf("policy %q: %s=%q: %v", s, k, v, err)
		}
	}
	if !seen["limit"] || !seen["period"] {
		return p, fmt.Errorf("policy %q: limit and period are required", s)
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

// ParseTraffic reads a traffic description: clauses separated by ';' or
// new lines, each one of
//
//	burst N at T            N requests at time T
//	steady R/s from T to U  R requests a second, evenly, from T up to U
//	every D from T to U     one request every D from T up to U
//
// with times as durations since the start (1s, 1m30s). Lines starting with
// '#' are comments. It returns the request times, sorted.
func ParseTraffic(s string) ([]time.Duration, error) {
	var out []time.Duration
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
				out = append(out, at)
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
				out = append(out, t)
			}
		default:
			return nil, bad("want burst N at T, steady R/s from T to U, or every D from T to U")
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("traffic %q describes no request", s)
	}
	slices.Sort(out)
	return out, nil
}

// Request is one simulated request's decision.
type Request struct {
	At        time.Duration
	Allowed   bool
	Remaining int64 // after the decision
	Retry     time.Duration
}

// Sample is the capacity left at a time (a peek, which changes nothing).
type Sample struct {
	At        time.Duration
	Remaining int64
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

// Simulate runs p over requests (each of cost 1) until end, sampling the
// remaining capacity every step and just before and after each request.
func Simulate(p Policy, requests []time.Duration, end, step time.Duration) Run {
	r := Run{Policy: p}
	var st algo.State
	us := func(d time.Duration) int64 { return epoch + int64(d/time.Microsecond) }
	peek := func(at time.Duration) {
		o, _ := p.Limit.Eval(st, us(at), 0)
		r.Samples = append(r.Samples, Sample{at, o.Remaining})
	}
	next := time.Duration(0)
	for _, at := range requests {
		for ; next < at; next += step {
			peek(next)
		}
		peek(at)
		o, ns := p.Limit.Eval(st, us(at), 1)
		st = ns
		r.Requests = append(r.Requests, Request{At: at, Allowed: o.Allowed, Remaining: o.Remaining, Retry: time.Duration(o.RetryUs) * time.Microsecond})
		if o.Allowed {
			r.Admitted++
		} else {
			r.Rejected++
		}
		peek(at)
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
		return r.Policy.Limit.Capacity()
	}
	return r.Samples[i-1].Remaining
}
