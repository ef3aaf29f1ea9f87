package algo

import (
	"errors"
	"fmt"
	"math/bits"
	"strings"
	"time"
)

// Algorithm names one of the five limit algorithms. The zero value is GCRA.
type Algorithm uint8

// The algorithms. Their codes are stable: the Redis scripts and key prefixes
// use them.
const (
	// GCRA is the generic cell rate algorithm: one theoretical arrival time
	// per key. The default.
	GCRA Algorithm = iota
	// TokenBucket keeps a token count and the time the count was last
	// refilled; a partial token is kept exactly as the time accrued toward it.
	TokenBucket
	// SlidingLog keeps one timestamp per admitted unit of cost and admits at
	// most Limit in every window of one Period. Exact, memory grows with Limit.
	SlidingLog
	// SlidingWindow blends the counts of the current and the previous aligned
	// window by their overlap with the sliding window.
	SlidingWindow
	// FixedWindow counts per window aligned to multiples of Period since the
	// Unix epoch.
	FixedWindow
	numAlgorithms
)

var algorithmNames = [numAlgorithms]string{"gcra", "token_bucket", "sliding_log", "sliding_window", "fixed_window"}

// AlgorithmCount is the number of algorithms: their codes are 0 to
// AlgorithmCount-1.
const AlgorithmCount = int(numAlgorithms)

// Algorithms lists every algorithm, in code order.
var Algorithms = []Algorithm{GCRA, TokenBucket, SlidingLog, SlidingWindow, FixedWindow}

// AlgorithmNames lists the wire names for a message that offers them:
// "gcra, token_bucket, sliding_log, sliding_window or fixed_window".
func AlgorithmNames() string {
	n := len(algorithmNames)
	return strings.Join(algorithmNames[:n-1], ", ") + " or " + algorithmNames[n-1]
}

// String returns the algorithm's wire name, such as "token_bucket".
func (a Algorithm) String() string {
	if a < numAlgorithms {
		return algorithmNames[a]
	}
	return fmt.Sprintf("algorithm(%d)", uint8(a))
}

// Valid reports whether a names one of the five algorithms.
func (a Algorithm) Valid() bool { return a < numAlgorithms }

// Windowed reports whether a is one of the window algorithms, whose burst is
// always equal to the limit.
func (a Algorithm) Windowed() bool {
	return a == SlidingLog || a == SlidingWindow || a == FixedWindow
}

// ParseAlgorithm returns the algorithm with the given wire name.
func ParseAlgorithm(name string) (Algorithm, error) {
	for i, n := range algorithmNames {
		if n == name {
			return Algorithm(i), nil
		}
	}
	return 0, fmt.Errorf("algo: unknown algorithm %q: want %s", name, AlgorithmNames())
}

// Bounds on a [Limit]. They keep every intermediate value of the arithmetic
// below 2^53, where IEEE doubles (and so Lua numbers) are exact integers.
const (
	// MaxCount bounds Limit, Burst and a request's cost.
	MaxCount = 1_000_000_000
	// MaxPeriod bounds Period.
	MaxPeriod = 366 * 24 * time.Hour
	// MaxRefill bounds the time a GCRA or token bucket limit takes to refill
	// from empty (Burst × Period / Limit): 100 years.
	MaxRefill = 100 * 365 * 24 * time.Hour
	// MaxLogLimit bounds Limit for SlidingLog, which stores one entry per
	// admitted unit: above it, use SlidingWindow.
	MaxLogLimit = 10_000
)

// Errors reported by [Limit.Validate] and [Limit.CheckCost]. They are
// wrapped with the offending value; test with errors.Is.
var (
	// ErrInvalidLimit means a Limit is outside its bounds.
	ErrInvalidLimit = errors.New("algo: invalid limit")
	// ErrCostExceedsBurst means a request asks for more than the limit's
	// burst: it could never pass, so it is refused instead of limited forever.
	ErrCostExceedsBurst = errors.New("algo: cost exceeds burst")
	// ErrNegativeCost means a request's cost is below zero.
	ErrNegativeCost = errors.New("algo: negative cost")
)

// Limit is a rate limit: Limit per Period, with Burst requests allowed back
// to back from idle, decided by Algorithm. It is a small value; copy it.
type Limit struct {
	// Limit is how many units are admitted per Period (sustained).
	Limit int64
	// Period is the window over which Limit applies. Whole microseconds.
	Period time.Duration
	// Burst is how many units may pass back to back from idle. Zero means
	// Limit. For the window algorithms it must be zero or equal to Limit.
	Burst int64
	// Algorithm decides the limit. The zero value is GCRA.
	Algorithm Algorithm
	// Offset shifts a FixedWindow's windows: they start at Offset + k×Period
	// since the Unix epoch. Between 0 and Period, whole microseconds; zero
	// for the other algorithms. Calendar quotas (a day in a time zone, a
	// month) use it with one key per calendar window.
	Offset time.Duration
}

// PerSecond returns a GCRA limit of n per second with burst n.
func PerSecond(n int64) Limit { return Limit{Limit: n, Period: time.Second} }

// PerMinute returns a GCRA limit of n per minute with burst n.
func PerMinute(n int64) Limit { return Limit{Limit: n, Period: time.Minute} }

// PerHour returns a GCRA limit of n per hour with burst n.
func PerHour(n int64) Limit { return Limit{Limit: n, Period: time.Hour} }

// WithBurst returns l with its burst set to b.
func (l Limit) WithBurst(b int64) Limit { l.Burst = b; return l }

// With returns l decided by algorithm a.
func (l Limit) With(a Algorithm) Limit { l.Algorithm = a; return l }

// Capacity returns the effective burst: Burst, or Limit when Burst is zero.
func (l Limit) Capacity() int64 {
	if l.Burst == 0 {
		return l.Limit
	}
	return l.Burst
}

// String describes l, such as "120 per 1m0s (burst 30, gcra)".
func (l Limit) String() string {
	return fmt.Sprintf("%d per %v (burst %d, %v)", l.Limit, l.Period, l.Capacity(), l.Algorithm)
}

// Validate reports whether l is within its bounds. The error wraps
// [ErrInvalidLimit] and names the field and what would be right.
func (l Limit) Validate() error {
	if l.valid() {
		return nil
	}
	return l.invalid()
}

// valid is Validate's allocation-free fast path: every bound at once.
func (l Limit) valid() bool {
	if l.Algorithm >= numAlgorithms || l.Limit < 1 || l.Limit > MaxCount ||
		l.Period < time.Microsecond || l.Period > MaxPeriod || l.Period%time.Microsecond != 0 ||
		l.Period/time.Microsecond < time.Duration(l.Limit) || l.Burst < 0 || l.Burst > MaxCount ||
		l.Offset != 0 && (l.Algorithm != FixedWindow || l.Offset < 0 || l.Offset >= l.Period || l.Offset%time.Microsecond != 0) {
		return false
	}
	if l.Algorithm.Windowed() {
		return (l.Burst == 0 || l.Burst == l.Limit) && (l.Algorithm != SlidingLog || l.Limit <= MaxLogLimit)
	}
	hi, lo := bits.Mul64(uint64(l.emission()), uint64(l.Capacity()))
	return hi == 0 && lo <= uint64(MaxRefill/time.Microsecond)
}

// invalid explains why l is not valid.
func (l Limit) invalid() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidLimit, fmt.Sprintf(format, args...))
	}
	switch {
	case !l.Algorithm.Valid():
		return bad("unknown algorithm %d", l.Algorithm)
	case l.Limit < 1 || l.Limit > MaxCount:
		return bad("limit %d is outside 1..%d", l.Limit, MaxCount)
	case l.Period < time.Microsecond || l.Period > MaxPeriod:
		return bad("period %v is outside 1µs..%v", l.Period, MaxPeriod)
	case l.Period%time.Microsecond != 0:
		return bad("period %v is not a whole number of microseconds", l.Period)
	case l.Period/time.Microsecond < time.Duration(l.Limit):
		return bad("period/limit is %v, below 1µs: use a longer period or a lower limit", l.Period/time.Duration(l.Limit))
	case l.Burst < 0 || l.Burst > MaxCount:
		return bad("burst %d is outside 1..%d", l.Burst, MaxCount)
	case l.Algorithm.Windowed() && l.Burst != 0 && l.Burst != l.Limit:
		return bad("burst %d must equal limit %d for %v (or be omitted)", l.Burst, l.Limit, l.Algorithm)
	case l.Offset != 0 && l.Algorithm != FixedWindow:
		return bad("offset %v is only for fixed_window, not %v", l.Offset, l.Algorithm)
	case l.Offset < 0 || l.Offset >= l.Period || l.Offset%time.Microsecond != 0:
		return bad("offset %v must be whole microseconds in [0, period %v)", l.Offset, l.Period)
	case l.Algorithm == SlidingLog && l.Limit > MaxLogLimit:
		return bad("limit %d is over %d for sliding_log, which stores an entry per unit: use sliding_window", l.Limit, MaxLogLimit)
	}
	if !l.Algorithm.Windowed() {
		// emission × burst <= MaxRefill, checked without a second division.
		hi, lo := bits.Mul64(uint64(l.emission()), uint64(l.Capacity()))
		if hi != 0 || lo > uint64(MaxRefill/time.Microsecond) {
			return bad("burst × period / limit is over %v: lower the burst or the period", MaxRefill)
		}
	}
	return fmt.Errorf("%w: %v", ErrInvalidLimit, l) // no reason found: valid and invalid disagree
}

// CheckCost reports whether cost can ever be taken from l: it must be
// between 0 and the burst. It does not validate l itself.
func (l Limit) CheckCost(cost int64) error {
	if cost < 0 {
		return fmt.Errorf("%w: %d", ErrNegativeCost, cost)
	}
	if cost > l.Capacity() {
		return fmt.Errorf("%w: cost %d, burst %d", ErrCostExceedsBurst, cost, l.Capacity())
	}
	return nil
}

// emission is the GCRA emission interval in microseconds, period/limit
// rounded up so that the sustained rate never exceeds Limit per Period.
func (l Limit) emission() int64 {
	p := int64(l.Period / time.Microsecond)
	return (p + l.Limit - 1) / l.Limit
}

// Params returns the three integers that, with the algorithm code, define l
// to the Redis scripts: the emission interval in µs and the burst for GCRA
// and token bucket; the period in µs and the limit for the window
// algorithms. p3 is the window offset in µs (fixed window; else 0).
func (l Limit) Params() (p1, p2, p3 int64) {
	if l.Algorithm.Windowed() {
		return int64(l.Period / time.Microsecond), l.Limit, int64(l.Offset / time.Microsecond)
	}
	return l.emission(), l.Capacity(), 0
}
