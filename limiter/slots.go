package limiter

import (
	"context"
	"encoding/hex"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/store"
	"github.com/fairgate/fairgate/store/guard"
)

// Concurrency slots: a plan's Concurrency lets a tenant have
// that many requests in flight, across instances. A request takes its
// slots before its rate tokens: refused a slot, it takes no token; refused
// a token, it gives its slots back at once. So a rejected request takes
// neither. An allowed one holds its slots until the caller releases them
// (Decision.Slots) or their TTL runs out (Config.SlotLease).

// slotState is the limiter's part in concurrency slots.
type slotState struct {
	ttl   time.Duration
	avgNs atomic.Int64 // how long slots are held, a moving average
}

func (s *slotState) init(ttl time.Duration) {
	s.ttl = ttl
	if s.ttl <= 0 {
		s.ttl = 40 * time.Second
	}
}

// observe adds one holding time to the moving average (weight 1/8).
func (s *slotState) observe(d time.Duration) {
	for {
		old := s.avgNs.Load()
		n := int64(d)
		if old != 0 {
			n = old + (int64(d)-old)/8
		}
		if s.avgNs.CompareAndSwap(old, n) {
			return
		}
	}
}

// retryAfter estimates how long until a slot of a layer that refused r
// frees: the mean holding time divided among the requests in flight,
// never past the first TTL's end, at least a millisecond.
func (s *slotState) retryAfter(r store.SlotResult) time.Duration {
	d := time.Duration(s.avgNs.Load()) / time.Duration(max(1, r.InUse))
	if d <= 0 || (r.NextExpiry > 0 && d > r.NextExpiry) {
		d = r.NextExpiry
	}
	return max(d, time.Millisecond)
}

// SlotDecision is one concurrency layer's answer.
type SlotDecision struct {
	policy.SlotLayer
	// Allowed reports whether the request got a slot of the layer.
	Allowed bool
	// InUse is how many requests hold a slot after the decision.
	InUse int64
	// Remaining is how many more could take one now.
	Remaining int64
	// RetryAfter estimates how long until a slot frees; 0 if allowed.
	RetryAfter time.Duration
}

// Slots are the concurrency slots an allowed request holds. Release gives
// them back when the request ends; a request that may outlive the TTL
// renews it with Renew. Safe for concurrent use.
type Slots struct {
	l        *Limiter
	id       string
	layers   []policy.SlotLayer
	ttl      time.Duration
	since    time.Time
	released atomic.Bool
}

// Lease returns the slots' TTL (the wire's lease_ms): renew well within it.
func (s *Slots) Lease() time.Duration { return s.ttl }

// ID returns the slots' ID (the wire's lease_id), which [Limiter.ReleaseSlots] takes.
func (s *Slots) ID() string { return s.id }

// Release gives the slots back. It is safe to call more than once, and on
// a nil Slots; it tries even when ctx has ended (with a deadline of its
// own), since a slot not given back is lost until its TTL runs out.
func (s *Slots) Release(ctx context.Context) error {
	if s == nil || s.released.Swap(true) {
		return nil
	}
	s.l.slots.observe(time.Since(s.since))
	return s.l.releaseSlots(ctx, s.layers, s.id)
}

// Renew extends the slots' TTL by a full TTL from now.
func (s *Slots) Renew(ctx context.Context) error {
	if s == nil || s.released.Load() {
		return nil
	}
	// Each layer is renewed on its own (every one optional): a slot that
	// ran out and was taken meanwhile does not keep the others from
	// being renewed.
	as, rs := slotAcquires(s.layers, true)
	return s.l.guard.RenewSlots(ctx, s.id, s.ttl, as, rs)
}

// KeepAlive renews the slots every half TTL until stop is called (or
// they are released), for a request that may outlive its TTL: a stream.
// It costs one timer.
func (s *Slots) KeepAlive() (stop func()) {
	if s == nil {
		return func() {}
	}
	var mu sync.Mutex
	stopped := false
	var t *time.Timer
	mu.Lock() // t is set before the callback reads it
	defer mu.Unlock()
	t = time.AfterFunc(s.Lease()/2, func() {
		s.Renew(context.Background())
		mu.Lock()
		defer mu.Unlock()
		if !stopped && !s.released.Load() {
			t.Reset(s.Lease() / 2)
		}
	})
	return func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		t.Stop()
	}
}

// releaseSlots gives slot ID id's slots of layers back through the guard,
// even when ctx has ended (see [guard.Guard.ReleaseSlots]).
func (l *Limiter) releaseSlots(ctx context.Context, layers []policy.SlotLayer, id string) error {
	keys := make([]string, len(layers))
	for i, sl := range layers {
		keys[i] = sl.Key
	}
	return l.guard.ReleaseSlots(ctx, id, keys)
}

// leaseID is a fresh slot ID (the wire's lease_id): 128 random bits.
func leaseID() string {
	var b [16]byte
	for i := range 2 {
		v := rand.Uint64()
		for j := range 8 {
			b[i*8+j] = byte(v >> (8 * j))
		}
	}
	return hex.EncodeToString(b[:])
}

// decideWithSlots decides a request with concurrency layers: its slots
// first, then its rate layers.
func (l *Limiter) decideWithSlots(ctx context.Context, c *call) (Decision, error) {
	// A rejection the near cache remembers (held for the class's
	// slow-down first) is answered before any slot is taken: a tenant
	// over its rate costs the store nothing, and holds no slot while
	// held.
	if ld, ok := l.nearAnswer(ctx, c); ok {
		return l.nearDecision(c, ld), nil
	}
	id := leaseID()
	sd, refused, err := l.takeSlots(ctx, c, id, l.slots.ttl)
	if err != nil {
		return l.slotsFailed(ctx, c, err)
	}
	if refused != nil {
		return *refused, nil
	}
	dec, err := l.decide(ctx, c)
	dec.Concurrency = sd
	if err != nil || !dec.Allowed {
		l.releaseSlots(ctx, c.res.Slots, id)
		return dec, err
	}
	dec.Slots = &Slots{l: l, id: id, layers: c.res.Slots, ttl: l.slots.ttl, since: time.Now()}
	return dec, nil
}

// takeSlots takes c's slots for slot ID id, lasting ttl, in one store
// call: all of them, or none and the decision that refused (or the
// store's error). A shadow layer that is full does not refuse: the
// request goes on without its slot, counted as the shadow rejection it
// is.
func (l *Limiter) takeSlots(ctx context.Context, c *call, id string, ttl time.Duration) ([]SlotDecision, *Decision, error) {
	as, rs := slotAcquires(c.res.Slots, false)
	if err := l.guard.AcquireSlots(ctx, id, ttl, as, rs); err != nil {
		return nil, nil, err
	}
	sd := make([]SlotDecision, len(c.res.Slots))
	refused := -1
	for i, sl := range c.res.Slots {
		r := rs[i]
		sd[i] = SlotDecision{SlotLayer: sl, Allowed: r.Acquired, InUse: r.InUse, Remaining: max(0, sl.Limit-r.InUse)}
		if r.Acquired || r.InUse < sl.Limit {
			continue // taken, or not taken only because another layer was full
		}
		if !sl.Shadow {
			refused = i
			sd[i].RetryAfter = l.slots.retryAfter(r)
			break
		}
		c.shadowSlot = true
		l.m.shadow.WithLabelValues(sl.Policy).Inc()
		l.log.Info("shadow limit would reject", slog.String("tenant", c.res.Tenant), slog.String("policy", sl.Policy))
	}
	if refused >= 0 {
		sl := c.res.Slots[refused]
		dec := Decision{Reason: ReasonLimited, Policy: sl.Policy, RetryAfter: sd[refused].RetryAfter, Tightest: -1, Resolution: c.res, Now: c.now,
			Concurrency: sd[:refused+1]}
		l.count(c, &dec)
		return nil, &dec, nil
	}
	return sd, nil, nil
}

// slotAcquires are the store's slot calls of layers, and room for their
// answers: shadow layers are optional, and every layer is when
// allOptional.
func slotAcquires(layers []policy.SlotLayer, allOptional bool) ([]store.SlotAcquire, []store.SlotResult) {
	as := make([]store.SlotAcquire, len(layers))
	for i, sl := range layers {
		as[i] = store.SlotAcquire{Key: sl.Key, Limit: sl.Limit, Optional: sl.Shadow || allOptional}
	}
	return as, make([]store.SlotResult, len(layers))
}

// AcquireSlots takes req's concurrency slots alone, without rate tokens,
// lasting ttl (zero: Config.SlotLease): for a worker that holds them
// around a job and gives them back with [Limiter.ReleaseSlots] and the
// slot ID. A request without a concurrency limit is allowed with no
// slots; the fail mode decides when the store cannot give them.
func (l *Limiter) AcquireSlots(ctx context.Context, req policy.Request, ttl time.Duration) (Decision, error) {
	if ttl <= 0 {
		ttl = l.slots.ttl
	}
	now := l.now()
	res, err := l.Snapshot().Resolve(req, now)
	if err != nil {
		return Decision{Tightest: -1, Resolution: res, Now: now}, err
	}
	d := Decision{Allowed: true, Reason: ReasonAllowed, Tightest: -1, Resolution: res, Now: now}
	if len(res.Slots) == 0 {
		return d, nil
	}
	c := call{now: now, res: res}
	id := leaseID()
	sd, refused, err := l.takeSlots(ctx, &c, id, ttl)
	switch {
	case errors.Is(err, store.ErrInvalidCheck):
		return d, err
	case err != nil:
		if o, _ := l.guard.Fail(ctx, nil, res.Fail, nil); o == guard.Unavailable {
			return unavailable(res, now), nil
		}
		d.Reason = ReasonDegradedOpen
		return d, nil
	case refused != nil:
		return *refused, nil
	}
	d.Concurrency = sd
	d.Slots = &Slots{l: l, id: id, layers: res.Slots, ttl: ttl, since: time.Now()}
	return d, nil
}

// ReleaseSlots gives back the slots that slot ID id holds of req's
// concurrency layers (see AcquireSlots). An ID holding nothing is no error.
func (l *Limiter) ReleaseSlots(ctx context.Context, req policy.Request, id string) error {
	res, err := l.Snapshot().Resolve(req, l.now())
	if err != nil || len(res.Slots) == 0 {
		return err
	}
	return l.releaseSlots(ctx, res.Slots, id)
}

// slotsFailed decides a request whose slots the store could not give: by
// the fail mode, unavailable, or the rate layers alone.
func (l *Limiter) slotsFailed(ctx context.Context, c *call, err error) (Decision, error) {
	if errors.Is(err, store.ErrInvalidCheck) {
		return Decision{Tightest: -1, Resolution: c.res, Now: c.now}, err
	}
	l.guard.LogRare(c.now, "concurrency slots unavailable; deciding by the fail mode", err)
	if o, _ := l.guard.Fail(ctx, nil, c.res.Fail, nil); o == guard.Unavailable {
		d := unavailable(c.res, c.now)
		l.count(c, &d)
		return d, nil
	}
	l.log.Debug("slots skipped", slog.String("tenant", c.res.Tenant))
	c.slotsSkipped = true // an allowed answer is degraded: it holds no slot
	return l.decide(ctx, c)
}
