package limiter

import (
	"sync"
	"sync/atomic"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/store"
)

// sampler lets through at most sampleRate calls per second.
type sampler struct {
	sec atomic.Int64
	n   atomic.Int64
}

const sampleRate = 10

func (s *sampler) allow(now int64) bool {
	if s.sec.Load() != now {
		s.sec.Store(now)
		s.n.Store(0)
	}
	return s.n.Add(1) <= sampleRate
}

// appendChecks appends the store checks of res to cs.
func appendChecks(cs []store.Check, res policy.Resolution) []store.Check {
	for _, l := range res.Layers {
		cs = append(cs, store.Check{Key: l.Key, Limit: l.Limit, Cost: res.Cost})
	}
	return cs
}

// checksOf returns the store checks of res.
func checksOf(res policy.Resolution) []store.Check {
	return appendChecks(make([]store.Check, 0, len(res.Layers)), res)
}

// scratch is what one decision's store call needs for up to four layers,
// pooled.
type scratch struct {
	checks    [4]store.Check
	res       store.Result
	decisions [4]algo.Decision
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}
