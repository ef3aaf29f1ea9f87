package dash

import (
	"slices"
	"strings"
	"sync"
)

// TopK is a fixed-size heavy-hitters sketch (Space-Saving): it counts at
// most k keys, so attacker-chosen tenant IDs cannot grow it. A key it does
// not hold takes the place of the smallest count and inherits it, so a
// reported count can be over the truth by at most that smallest count,
// never under; every key whose true count is over total/k is held. It is
// safe for concurrent use.
type TopK struct {
	mu     sync.Mutex
	keys   []string
	counts []float64
	index  map[string]int // at most k entries
}

// maxKeyLen bounds a key's length (longer ones are cut): the sketch's
// memory is k × this at most.
const maxKeyLen = 128

// NewTopK returns a sketch of k keys.
func NewTopK(k int) *TopK {
	return &TopK{keys: make([]string, 0, k), counts: make([]float64, 0, k), index: make(map[string]int, k)}
}

// Add counts one occurrence of key.
func (t *TopK) Add(key string) {
	if len(key) > maxKeyLen {
		key = key[:maxKeyLen] + "…"
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if i, ok := t.index[key]; ok {
		t.counts[i]++
		return
	}
	if len(t.keys) < cap(t.keys) {
		t.index[key] = len(t.keys)
		t.keys, t.counts = append(t.keys, strings.Clone(key)), append(t.counts, 1)
		return
	}
	m := 0
	for i, c := range t.counts {
		if c < t.counts[m] {
			m = i
		}
	}
	delete(t.index, t.keys[m])
	t.keys[m] = strings.Clone(key)
	t.counts[m]++
	t.index[key] = m
}

// Decay multiplies every count by f (0..1), so that the sketch follows
// recent traffic; keys whose count falls under 0.5 are dropped.
func (t *TopK) Decay(f float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	keep := 0
	for i := range t.keys {
		c := t.counts[i] * f
		if c < 0.5 {
			delete(t.index, t.keys[i])
			continue
		}
		t.keys[keep], t.counts[keep] = t.keys[i], c
		t.index[t.keys[keep]] = keep
		keep++
	}
	t.keys, t.counts = t.keys[:keep], t.counts[:keep]
}

// Entry is a key and its (over-)estimated count.
type Entry struct {
	Key   string  `json:"tenant"`
	Count float64 `json:"count"`
}

// Top returns the n largest counts, largest first.
func (t *TopK) Top(n int) []Entry {
	t.mu.Lock()
	out := make([]Entry, len(t.keys))
	for i := range t.keys {
		out[i] = Entry{t.keys[i], t.counts[i]}
	}
	t.mu.Unlock()
	slices.SortFunc(out, func(a, b Entry) int {
		switch {
		case a.Count > b.Count:
			return -1
		case a.Count < b.Count:
			return 1
		}
		return strings.Compare(a.Key, b.Key)
	})
	return out[:min(n, len(out))]
}
