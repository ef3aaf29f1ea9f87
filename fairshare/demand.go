package fairshare

import (
	"math"
	"time"
)

// demand is who wanted room lately and how much the requests within their
// tenants' shares need: their arrival rate and latency (Little's law
// gives the room they hold on average).
type demand struct {
	recent  map[string]*recentTenant
	weights float64   // of the recent tenants
	pruned  time.Time // when recent was last pruned

	bucket   time.Time // start of the arrival count
	arrivals int
	rate     float64 // fair arrivals a second, averaged
	lat      float64 // fair requests' latency, s, averaged
}

type recentTenant struct {
	weight float64
	seen   time.Time
	load   load
}

// load is a tenant's requests in flight over time: their integral over
// each window of loadWindow, and the average of the windows (EWMA).
type load struct {
	since, last time.Time // the window's start; the last change
	area        float64   // requests in flight × seconds, this window
	avg         float64   // requests in flight on average, lately
	held        int       // requests in flight now
	windows     int       // windows averaged
}

// loadWindow is how often a tenant's average load is updated.
const loadWindow = 250 * time.Millisecond

// change notes that the tenant's requests in flight change at now, from
// before to after.
func (l *load) change(before, after int, now time.Time) {
	l.held = after
	if l.since.IsZero() {
		l.since, l.last = now, now
	}
	l.area += float64(before) * now.Sub(l.last).Seconds()
	l.last = now
	if el := now.Sub(l.since); el >= loadWindow {
		if a := l.area / el.Seconds(); l.windows == 0 {
			l.avg = a
		} else {
			l.avg += (a - l.avg) / 2
		}
		l.windows++
		l.since, l.area = now, 0
	}
}

const (
	recentFor  = time.Second // how long a tenant counts as wanting room
	maxRecent  = 100_000     // tenants remembered at most
	rateWindow = 250 * time.Millisecond
)

// seen notes that tenant name wants room at now, and returns its record.
// Past maxRecent tenants, a new one gets a record of its own that is not
// kept (nor counted in the weights).
func (d *demand) seen(name string, weight float64, now time.Time) *recentTenant {
	d.maybePrune(now)
	r, ok := d.recent[name]
	switch {
	case !ok && len(d.recent) >= maxRecent:
		return &recentTenant{weight: weight, seen: now}
	case !ok:
		r = &recentTenant{}
		d.recent[name] = r
	}
	d.weights += weight - r.weight
	r.weight, r.seen = weight, now
	return r
}

// maybePrune prunes when the last prune is recentFor/10 old.
func (d *demand) maybePrune(now time.Time) {
	if now.Sub(d.pruned) >= recentFor/10 {
		d.prune(now)
	}
}

// prune drops the tenants not seen for recentFor.
func (d *demand) prune(now time.Time) {
	d.pruned = now
	d.weights = 0
	for name, r := range d.recent {
		if now.Sub(r.seen) >= recentFor && r.load.held == 0 {
			delete(d.recent, name)
			continue
		}
		d.weights += r.weight
	}
}

// arrive counts one fair request admitted at now.
func (d *demand) arrive(now time.Time) {
	if d.bucket.IsZero() {
		d.bucket = now
	}
	d.arrivals++
	if el := now.Sub(d.bucket); el >= rateWindow {
		d.rate += (float64(d.arrivals)/el.Seconds() - d.rate) * 0.3
		d.bucket, d.arrivals = now, 0
	}
}

// took notes a fair request's latency.
func (d *demand) took(rtt time.Duration) {
	if d.lat == 0 {
		d.lat = rtt.Seconds()
	}
	d.lat += (rtt.Seconds() - d.lat) * 0.05
}

// headroom is the room a borrower leaves free, at most half the limit:
// the fair requests' average hold m (Little's law) with margin of its
// standard deviations as if they came as a Poisson stream (√m), plus one.
func (d *demand) headroom(limit, margin float64) float64 {
	m := d.rate * d.lat
	return math.Min(limit/2, math.Ceil(m+margin*math.Sqrt(m))+1)
}
