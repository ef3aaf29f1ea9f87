package fairshare

import "math"

// gradient is the learned limit. Each request's latency is compared with
// the least latency seen for its own kind (a route class), so that an
// expensive route's long service time is not read as queueing; the ratio
// says how much requests queue in the upstream. The limit moves once per
// window of max(10, limit) requests, by the window's average ratio: over
// the tolerance (or any failure) it shrinks in proportion, by at most 30%;
// at or under it, and if the window used the limit (a peak of at least
// limit − 1 in flight), it grows by one. An idle upstream teaches nothing.
// This is AIMD on queueing, in the manner of TCP Vegas and of Netflix's
// concurrency-limits, chosen against BenchmarkFairConcurrency (see
// bench/RESULTS.md): a per-request gradient swung the limit from 4 to 35.
//
// The least latency only falls: an upstream that becomes slower for good
// (a slower release) is taken for a queueing one, and the limit stays
// lower than it could be, never higher.
type gradient struct {
	limit, floor, ceiling float64
	tolerance             float64
	fixed                 bool
	mins                  map[string]float64 // least latency by kind, ns
	base                  float64            // ns, the average latency

	n        int     // the window's requests
	sum      float64 // and their ratios
	peak     int     // most in flight in the window
	failures int
}

// configure takes c's bounds, tolerance and fixedness, and moves the
// limit into the bounds.
func (g *gradient) configure(c Config) {
	g.floor, g.ceiling, g.tolerance, g.fixed = float64(c.Floor), float64(c.Ceiling), c.Tolerance, c.Fixed
	g.limit = math.Min(g.ceiling, math.Max(g.floor, g.limit))
}

// maxKinds bounds the kinds remembered.
const maxKinds = 1024

func (g *gradient) observe(kind string, rtt float64, inflight int, failed bool) {
	if g.base == 0 {
		g.base = rtt
	}
	g.base += (rtt - g.base) / 100
	if g.fixed {
		return
	}
	if g.mins == nil {
		g.mins = map[string]float64{}
	}
	m, ok := g.mins[kind]
	switch {
	case !ok && len(g.mins) >= maxKinds:
		m = rtt
	case !ok || rtt < m:
		m = math.Max(rtt, 1)
		g.mins[kind] = m
	}
	g.n++
	g.sum += rtt / m
	g.peak = max(g.peak, inflight)
	if failed {
		g.failures++
	}
	if g.n < max(10, int(g.limit)) {
		return
	}
	avg := g.sum / float64(g.n)
	switch {
	case g.failures > 0 || avg > g.tolerance:
		g.limit = math.Max(g.floor, g.limit*math.Max(0.7, math.Min(0.95, g.tolerance/avg)))
	case float64(g.peak) >= g.limit-1:
		g.limit = math.Min(g.ceiling, g.limit+1)
	}
	g.n, g.sum, g.peak, g.failures = 0, 0, 0, 0
}
