package app

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairgate/fairgate/fairq"
)

// depthQueue is a queue whose Depth counts its calls and answers depth
// (or fails when fail is set).
type depthQueue struct {
	fairq.Queue
	calls atomic.Int64
	depth atomic.Int64
	fail  atomic.Bool
}

func (q *depthQueue) Depth(context.Context, string, string) (int64, int64, error) {
	q.calls.Add(1)
	if q.fail.Load() {
		return 0, 0, errors.New("down")
	}
	return q.depth.Load(), 0, nil
}

// TestQueueDepthScrapes: scrapes of fairgate_queue_depth read the queue
// at most once per depthEvery, however many come at once or in a row;
// a failed read is NaN, and the next read after depthEvery recovers.
func TestQueueDepthScrapes(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	q := &depthQueue{}
	q.depth.Store(7)
	d := &queueDepth{q: q, kind: "email", now: clock}
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() { d.value() })
	}
	wg.Wait()
	if v := d.value(); v != 7 || q.calls.Load() != 1 {
		t.Fatalf("51 scrapes: %v after %d reads; want 7 after 1", v, q.calls.Load())
	}
	q.depth.Store(9)
	advance(depthEvery - time.Millisecond)
	if v := d.value(); v != 7 || q.calls.Load() != 1 {
		t.Fatalf("a scrape within %v: %v after %d reads; want the last reading, 7, after 1", depthEvery, v, q.calls.Load())
	}
	advance(time.Millisecond)
	if v := d.value(); v != 9 || q.calls.Load() != 2 {
		t.Fatalf("a scrape after %v: %v after %d reads; want 9 after 2", depthEvery, v, q.calls.Load())
	}
	q.fail.Store(true)
	advance(depthEvery)
	if v := d.value(); !math.IsNaN(v) {
		t.Fatalf("a failed read: %v, want NaN", v)
	}
	q.fail.Store(false)
	advance(depthEvery)
	if v := d.value(); v != 9 {
		t.Fatalf("after a failed read: %v, want 9", v)
	}
}
