package fairshare

import (
	"math"
	"time"
)

// demand is who wanted room lately and how much the requests within their
// tenants' shares need: their arrival rate and latency (Little's law
// gives the room they hold on average).
type demand struct {
	recent  map[string]recentTenant
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
}

const (
	recentFor  = time.Second // how long a tenant counts as wanting room
	maxRecent  = 100_000     // tenants remembered at most
	rateWindow = 250 * time.Millisecond
)

// seen notes that tenant name wants room at now.
func (d *demand) seen(name string, weight float64, now time.Time) {
	if now.Sub(d.pruned) >= recentFor/10 {
		d.prune(now)
	}
	r, ok := d.recent[name]
	if !ok && len(d.recent) >= maxRecent {
		return
	}
	if !ok {
		d.weights += weight
	} else {
		d.weights += weight - r.weight
	}
	d.recent[name] = recentTenant{weight, now}
}

// prune drops the tenants not seen for recentFor.
func (d *demand) prune(now time.Time) {
	d.pruned = now
	d.weights = 0
	for name, r := range d.recent {
		if now.Sub(r.seen) >= recentFor {
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
// the fair requests' average hold m (Little's law) with two of its
// standard deviations as if they came as a Poisson stream (√m), plus one.
func (d *demand) headroom(limit float64) float64 {
	m := d.rate * d.lat
	return math.Min(limit/2, math.Ceil(m+2*math.Sqrt(m))+1)
}
