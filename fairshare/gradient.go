package fairshare

import "math"

// gradient is the learned limit, in the manner of Netflix's
// concurrency-limits Gradient2, with one change: a request's latency is
// compared with the least latency seen for its own kind (a route class),
// not with one average over all, so that an expensive route's long
// service time is not read as queueing. The ratio of the two, averaged
// over the last ten or so requests, says how much requests queue in the
// upstream; the limit follows limit × min(1, tolerance ÷ ratio) plus a
// queue allowance of √limit, smoothed, between floor and ceiling. It moves
// only while it is used (at least half in flight): an idle upstream
// teaches nothing. A failure shrinks it by a tenth.
//
// The least latency only falls: an upstream that becomes slower for good
// (a slower release) is taken for a queueing one, and the limit stays
// lower than it could be, never higher.
type gradient struct {
	limit, floor, ceiling float64
	tolerance             float64
	fixed                 bool
	mins                  map[string]float64 // least latency by kind, ns
	ratio                 float64            // latency ÷ least, averaged
	base                  float64            // ns, the average latency
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
	if failed {
		g.limit = math.Max(g.floor, g.limit*0.9)
		return
	}
	if g.mins == nil {
		g.mins = map[string]float64{}
	}
	m, ok := g.mins[kind]
	if !ok && len(g.mins) >= maxKinds {
		return
	}
	if !ok || rtt < m {
		m = math.Max(rtt, 1)
		g.mins[kind] = m
	}
	if g.ratio == 0 {
		g.ratio = 1
	}
	g.ratio += (rtt/m - g.ratio) / 50
	if float64(inflight) < g.limit/2 {
		return
	}
	grad := math.Max(0.5, math.Min(1, g.tolerance/g.ratio))
	next := g.limit*grad + math.Sqrt(g.limit)
	g.limit = math.Min(g.ceiling, math.Max(g.floor, 0.9*g.limit+0.1*next))
}
