package app

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fairgate/fairgate/fairq"
)

// depthEvery is how often a scrape of fairgate_queue_depth may read a
// queue's depth: a scrape answers the last reading, so scrapes (however
// many, however often) cost the queue's store one call per kind per
// depthEvery at most.
const depthEvery = 5 * time.Second

// queueDepth is one job kind's depth for the metrics, read at most every
// depthEvery, by one scrape at a time, each read bounded to a second.
type queueDepth struct {
	q       fairq.Queue
	kind    string
	now     func() time.Time
	reading sync.Mutex // held by the one scrape reading; the others answer last
	last    atomic.Pointer[depthReading]
}

type depthReading struct {
	v  float64 // NaN: the read failed
	at time.Time
}

// value is the last depth read, read again first when it is older than
// depthEvery and no other scrape is reading it; NaN before the first read
// and after a failed one.
func (d *queueDepth) value() float64 {
	if d.reading.TryLock() {
		if r := d.last.Load(); r == nil || d.now().Sub(r.at) >= depthEvery {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			n, _, err := d.q.Depth(ctx, d.kind, "")
			cancel()
			v := float64(n)
			if err != nil {
				v = math.NaN()
			}
			d.last.Store(&depthReading{v: v, at: d.now()})
		}
		d.reading.Unlock()
	}
	if r := d.last.Load(); r != nil {
		return r.v
	}
	return math.NaN()
}
