package fairshare

import (
	"math"
	"slices"
	"time"
)

// gradient is the learned limit, moved by its parties' (tenants') votes
// so that no single party moves it.
//
// Each request's latency is compared with the least latency its own party
// has seen for its kind (a route class), so that an expensive route's
// long service time is not read as queueing, and no party can lower
// another's baseline; the ratio says how much requests queue in the
// upstream. A party votes once per voteSamples of its answers (or with
// fewer, once the oldest is voteFor/2 old): its vote is the median of
// their ratios, or just over the tolerance at least if any failed, and
// counts for voteFor. The limit is decided once per window of max(10,
// limit, voters) answers:
//
//   - If a strict majority of the votes are over the tolerance (the lower
//     median of the votes is), the limit shrinks in proportion to that
//     median, by at most 30%, and those votes are spent: each congested
//     vote shrinks the limit once. With two voters both must see
//     congestion: a party whose own requests are slow or fail is one
//     vote, however many it sends.
//   - Otherwise it grows by one if a party whose vote sees no congestion
//     wanted more room (one of its requests found none at once), or, when
//     no vote sees congestion, if the window's peak in flight reached
//     limit − 1. A party whose requests see no congestion can hold the
//     limit where it is while another's see some, but it grows only for
//     a party that sees none and wants more.
//
// A party alone may shrink the limit, so that an upstream one client
// overloads is protected; but the first window with several voters and no
// congestion puts back the limit that the lone shrinking started from.
// An idle upstream teaches nothing. This is AIMD on queueing, in the
// manner of TCP Vegas and of Netflix's concurrency-limits, chosen against
// BenchmarkFairConcurrency and BenchmarkCapacityAttack (see
// bench/RESULTS.md): a per-request gradient swung the limit from 4 to 35,
// and votes of a window's few answers let the noise of a busy machine
// shrink it.
//
// The least latency only falls: an upstream that becomes slower for good
// (a slower release) is taken for a queueing one, and the limit stays
// lower than it could be, never higher.
type gradient struct {
	limit, floor, ceiling float64
	tolerance             float64
	fixed                 bool
	base                  float64 // ns, the average latency of all answers

	parties  map[string]*party
	overflow party    // the parties past maxParties, as one
	mins     int      // least latencies remembered, all parties
	pending  []*party // parties with answers not yet voted on
	voters   []*party // parties whose vote counts
	wanting  []*party // parties that wanted room in the window
	scores   []float64
	swept    time.Time // when idle parties were last forgotten

	n    int // the window's answers
	peak int // most in flight in the window
	// typ is typical's last answer, made at typAt: it is made again at
	// most every 100 ms, so that a storm of sheds does not sort the
	// parties for each.
	typ   float64
	typAt time.Time
	// lone is the limit a party alone started shrinking from; zero
	// when it has not, or a window of several voters decided since.
	lone float64
}

// party is one party's part in the learned limit.
type party struct {
	base   float64            // its average latency, ns
	mins   map[string]float64 // least latency by kind, ns
	seen   time.Time          // last answered
	ratios [voteSamples]float64
	n      int       // answers in ratios
	first  time.Time // when the first of them came
	failed bool      // one of them failed
	score  float64   // its vote
	scored time.Time // when
	spent  bool      // the vote, congested, has shrunk the limit
	voting bool      // in voters
	wanted bool      // in wanting
}

const (
	// maxParties bounds the parties remembered; past it, new parties
	// share one record (and one vote).
	maxParties = 4096
	// maxMins bounds the least latencies remembered, all parties.
	maxMins = 16384
	// voteFor is how long a party's vote counts after its window.
	voteFor = time.Second
	// forgetAfter is how long an idle party's least latencies are kept.
	forgetAfter = 5 * time.Minute
	// voteSamples is how many answers a party votes on.
	voteSamples = 8
)

// configure takes c's bounds, tolerance and fixedness, and moves the
// limit into the bounds.
func (g *gradient) configure(c Config) {
	if c.Fixed != g.fixed {
		g.lone = 0
	}
	g.floor, g.ceiling, g.tolerance, g.fixed = float64(c.Floor), float64(c.Ceiling), c.Tolerance, c.Fixed
	g.limit = math.Min(g.ceiling, math.Max(g.floor, g.limit))
}

// want notes that a request of party name found no room at once.
func (g *gradient) want(name string) {
	if p := g.parties[name]; p != nil && !p.wanted {
		p.wanted = true
		g.wanting = append(g.wanting, p)
	}
}

// observe learns from a request of party name and kind answered at now
// after rtt ns, with inflight requests in flight; failed reports an
// upstream failure. A negative rtt is a latency not known (an upload
// that failed before it was sent): only the failure counts.
func (g *gradient) observe(name, kind string, rtt float64, inflight int, failed bool, now time.Time) {
	p := g.party(name, now)
	if rtt >= 0 {
		if g.base == 0 {
			g.base = rtt
		}
		g.base += (rtt - g.base) / 100
		if p.base == 0 {
			p.base = rtt
		}
		p.base += (rtt - p.base) / 20
	}
	if g.fixed {
		p.seen = now
		return
	}
	ratio := 1.0
	if rtt >= 0 {
		m, ok := p.mins[kind]
		switch {
		case !ok && g.mins >= maxMins:
			m = math.Max(rtt, 1)
		case !ok || rtt < m:
			if !ok {
				g.mins++
			}
			m = math.Max(rtt, 1)
			p.mins[kind] = m
		}
		ratio = rtt / m
	}
	if p.n == 0 {
		p.first = now
		g.pending = append(g.pending, p)
	}
	p.seen = now
	p.ratios[p.n] = ratio
	p.n++
	p.failed = p.failed || failed
	if p.n == voteSamples {
		g.vote(p, now)
	}
	g.n++
	g.peak = max(g.peak, inflight)
	if g.n >= max(10, int(g.limit), len(g.voters)) {
		g.decide(now)
	}
}

// typical is how long an answer typically takes: the median of the
// average latencies of the parties answered within voteFor×10 of now
// (each party one value, so that one party's slow requests cannot set
// it), or the average of all answers when none was.
func (g *gradient) typical(now time.Time) float64 {
	if now.Sub(g.typAt) < 100*time.Millisecond && g.typ > 0 {
		return g.typ
	}
	g.typ, g.typAt = g.median(now), now
	return g.typ
}

func (g *gradient) median(now time.Time) float64 {
	g.scores = g.scores[:0]
	for _, p := range g.parties {
		if p.base > 0 && now.Sub(p.seen) <= 10*voteFor {
			g.scores = append(g.scores, p.base)
		}
	}
	if len(g.scores) == 0 {
		return g.base
	}
	slices.Sort(g.scores)
	n := len(g.scores)
	return (g.scores[(n-1)/2] + g.scores[n/2]) / 2
}

// vote makes p's vote of its answers so far, at now.
func (g *gradient) vote(p *party, now time.Time) {
	rs := p.ratios[:p.n]
	slices.Sort(rs)
	p.score = (rs[(p.n-1)/2] + rs[p.n/2]) / 2
	if p.failed {
		p.score = math.Max(p.score, g.tolerance/0.95)
	}
	p.scored, p.spent = now, false
	p.n, p.failed = 0, false
	if !p.voting {
		p.voting = true
		g.voters = append(g.voters, p)
	}
}

// party returns name's record, made if new.
func (g *gradient) party(name string, now time.Time) *party {
	if p := g.parties[name]; p != nil {
		return p
	}
	if g.parties == nil {
		g.parties = map[string]*party{}
	}
	if len(g.parties) >= maxParties && now.Sub(g.swept) >= voteFor {
		g.forget(now)
	}
	if len(g.parties) >= maxParties {
		if g.overflow.mins == nil {
			g.overflow.mins = map[string]float64{}
		}
		return &g.overflow
	}
	p := &party{mins: map[string]float64{}}
	g.parties[name] = p
	return p
}

// decide ends the window: it moves the limit by the votes.
func (g *gradient) decide(now time.Time) {
	g.pending = slices.DeleteFunc(g.pending, func(p *party) bool {
		if p.n > 0 && now.Sub(p.first) >= voteFor/2 {
			g.vote(p, now)
		}
		return p.n == 0
	})
	g.voters = slices.DeleteFunc(g.voters, func(p *party) bool {
		p.voting = now.Sub(p.scored) < voteFor
		return !p.voting
	})
	g.scores = g.scores[:0]
	congested, wanted := false, false
	for _, p := range g.voters {
		sees := p.score > g.tolerance
		congested = congested || sees
		wanted = wanted || p.wanted && !sees
		if p.spent {
			g.scores = append(g.scores, g.tolerance) // counts for neither
		} else {
			g.scores = append(g.scores, p.score)
		}
	}
	for _, p := range g.wanting {
		p.wanted = false
	}
	clear(g.wanting)
	g.wanting = g.wanting[:0]
	peak := g.peak
	g.n, g.peak = 0, 0
	if len(g.scores) == 0 { // every party answered is still to vote
		return
	}
	slices.Sort(g.scores)
	// The lower median: with two voters the lesser, so that a shrink
	// needs a strict majority.
	med, alone := g.scores[(len(g.scores)-1)/2], len(g.scores) == 1
	switch {
	case med > g.tolerance:
		if !alone {
			g.lone = 0
		} else if g.lone == 0 {
			g.lone = g.limit
		}
		g.limit = math.Max(g.floor, g.limit*math.Max(0.7, math.Min(0.95, g.tolerance/med)))
		for _, p := range g.voters {
			p.spent = p.spent || p.score > g.tolerance
		}
	case !alone && g.lone > 0:
		g.limit = math.Min(g.ceiling, math.Max(g.limit, g.lone))
		g.lone = 0
	case wanted || !congested && float64(peak) >= g.limit-1:
		g.limit = math.Min(g.ceiling, g.limit+1)
	}
	if now.Sub(g.swept) >= forgetAfter/10 {
		g.forget(now)
	}
}

// forget drops the parties idle for forgetAfter, with their least
// latencies and answers; a party whose vote still counts stays, so that a
// name never has two votes at once.
func (g *gradient) forget(now time.Time) {
	g.swept = now
	for name, p := range g.parties {
		if now.Sub(p.seen) >= forgetAfter && now.Sub(p.scored) >= voteFor && !p.wanted {
			p.n = 0 // answers that old are no vote
			g.mins -= len(p.mins)
			delete(g.parties, name)
		}
	}
	if now.Sub(g.overflow.seen) >= forgetAfter {
		g.mins -= len(g.overflow.mins)
		clear(g.overflow.mins)
	}
}
