package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/fairq"
	"github.com/fairgate/fairgate/fairq/redisq"
	"github.com/fairgate/fairgate/internal/apikeys"
	"github.com/fairgate/fairgate/internal/apikeys/rediskeys"
	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/limiter/redisctl"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/store"
	"github.com/fairgate/fairgate/store/redisstore"
)

// lazyRedis is a Redis store that may not be reachable yet: a pod restarted
// during a Redis outage must still come up. Until it connects, every call
// fails with store.ErrUnavailable, so each policy is decided by its fail
// mode (the in-process fallback, or 503), and /readyz reports the store
// down; a goroutine keeps connecting (Run) and swaps the store in.
type lazyRedis struct {
	url   string
	log   *slog.Logger
	conn  atomic.Pointer[redisstore.Store]
	queue atomic.Pointer[redisq.Queue]
	ctl   atomic.Pointer[redisctl.Store]
	keys  atomic.Pointer[rediskeys.Store]
	kinds fairq.Kinds
	weigh fairq.Weigher
	share fairq.Sharer
	// caches marks the store whose cached reads the daemon polls (the
	// API keys' and the overlay's versions, the queues' depths): its
	// connection warns when Redis refuses client tracking.
	caches bool

	// failures counts failed connection attempts by reason (unreachable,
	// refused); nil until register.
	failures *prometheus.CounterVec

	mu      sync.Mutex
	warning string // about the server's settings, for /readyz; "" when none
}

// register adds fairgate_store_connect_failures_total to reg.
func (z *lazyRedis) register(reg prometheus.Registerer) error {
	z.failures = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fairgate_store_connect_failures_total",
		Help: "Failed attempts to connect to Redis, by reason: unreachable (down, refused, timed out; the daemon keeps trying) or refused (Redis refused the URL's settings: a password, the ACL user, the database number, the sentinel master name, TLS)."},
		[]string{"reason"})
	for _, r := range []string{reasonUnreachable, reasonRefused} {
		z.failures.WithLabelValues(r)
	}
	return reg.Register(z.failures)
}

// The reasons of fairgate_store_connect_failures_total.
const (
	reasonUnreachable = "unreachable"
	reasonRefused     = "refused"
)

// failed counts a failed connection attempt and says whether Redis
// refused the settings (else it was not reached).
func (z *lazyRedis) failed(err error) (refused bool) {
	refused = errors.Is(err, redisstore.ErrRefused)
	if z.failures != nil {
		r := reasonUnreachable
		if refused {
			r = reasonRefused
		}
		z.failures.WithLabelValues(r).Inc()
	}
	return refused
}

// errNotConnected is what every call answers before the first connection.
var errNotConnected = fmt.Errorf("%w: not connected to Redis yet", store.ErrUnavailable)

// connect tries once to reach Redis and, on success, swaps in the store,
// its job queue and control store.
func (z *lazyRedis) connect() error {
	rs, err := redisstore.New(redisstore.Config{URL: z.url})
	if err != nil {
		return err
	}
	if z.kinds != nil {
		q, err := redisq.New(redisq.Config{Client: rs.Client(), Prefix: rs.Prefix(), Kinds: z.kinds, Weight: z.weigh, Share: z.share})
		if err != nil {
			rs.Close()
			return err
		}
		z.queue.Store(q)
	}
	z.ctl.Store(redisctl.New(rs.Client(), rs.Prefix()))
	z.keys.Store(rediskeys.New(rs.Client(), rs.Prefix()))
	z.conn.Store(rs)
	z.checkEviction(context.Background())
	if z.caches && !rs.Tracking() {
		z.log.Warn(noTracking, slog.String("store", redisstore.RedactURL(z.url)))
	}
	return nil
}

// noTracking is the warning of a Redis that refuses client tracking.
const noTracking = "Redis refuses client tracking (RESP3 CLIENT TRACKING: a proxy without RESP3, protocol=2 in the URL, or an ACL user without +client|tracking +client|caching): the reads fairgate polls go to Redis each time, 3 to 4 commands a second from an idle instance instead of under 1 (docs/redis.md#idle-cost)"

// Run connects, retrying with a backoff of up to 5 s, until it has or ctx
// ends, logging each failure; then it looks at Redis's eviction policy
// every minute (a Redis restarted or failed over may come back with
// another) until ctx ends.
func (z *lazyRedis) Run(ctx context.Context) {
	z.connectLoop(ctx)
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			z.checkEviction(ctx)
		}
	}
}

func (z *lazyRedis) connectLoop(ctx context.Context) {
	wait := 100 * time.Millisecond
	for z.conn.Load() == nil {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		if err := z.connect(); err != nil {
			if z.failed(err) {
				// Redis came up refusing the settings the daemon started
				// with: an operator must fix them (a password_file is read
				// again on each try), so it is an error, not an outage.
				z.log.Error("store refuses fairgate's settings; deciding by each policy's fail mode until they are fixed", slog.String("store", redisstore.RedactURL(z.url)), slog.String("error", err.Error()))
			} else {
				z.log.Warn("store not reachable yet; deciding by each policy's fail mode", slog.String("store", redisstore.RedactURL(z.url)), slog.String("error", err.Error()))
			}
			wait = min(2*wait, 5*time.Second)
			continue
		}
		z.log.Info("store connected", slog.String("store", redisstore.RedactURL(z.url)))
	}
}

// checkEviction warns when Redis may evict fairgate's keys: under an
// allkeys-* policy a flood of other keys silently resets limits.
func (z *lazyRedis) checkEviction(ctx context.Context) {
	rs := z.conn.Load()
	if rs == nil {
		return
	}
	w := evictionWarning(ctx, rs)
	z.mu.Lock()
	z.warning = w
	z.mu.Unlock()
	if w != "" {
		z.log.Warn(w)
	}
}

// evictionWarning reads Redis's maxmemory-policy and says what is wrong
// with it, or "" when nothing is (or it cannot be read: managed Redis
// services often refuse CONFIG).
func evictionWarning(ctx context.Context, rs *redisstore.Store) string {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	c := rs.Client()
	if c == nil {
		return ""
	}
	m, err := c.Do(ctx, c.B().ConfigGet().Parameter("maxmemory-policy").Build()).AsStrMap()
	if err != nil {
		return ""
	}
	if p := m["maxmemory-policy"]; strings.HasPrefix(p, "allkeys-") {
		return fmt.Sprintf("Redis's maxmemory-policy is %s: under memory pressure Redis evicts fairgate's keys and silently resets their limits; use noeviction or volatile-ttl (every fairgate key has a TTL) for the Redis fairgate uses", p)
	}
	return ""
}

// Warning is what /readyz reports about the store's settings.
func (z *lazyRedis) Warning() string {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.warning
}

// lazyStore is the store.Store face of a lazyRedis.
type lazyStore struct{ z *lazyRedis }

// Take implements store.Store.
func (s lazyStore) Take(ctx context.Context, checks []store.Check, res *store.Result) error {
	if rs := s.z.conn.Load(); rs != nil {
		return rs.Take(ctx, checks, res)
	}
	if err := store.Validate(checks); err != nil {
		return err
	}
	return errNotConnected
}

// Settle implements store.Store.
func (s lazyStore) Settle(ctx context.Context, id string, adjs []store.Adjustment, res *store.SettleResult) error {
	if rs := s.z.conn.Load(); rs != nil {
		return rs.Settle(ctx, id, adjs, res)
	}
	if err := store.ValidateSettle(id, adjs); err != nil {
		return err
	}
	return errNotConnected
}

// Hold implements store.Store.
func (s lazyStore) Hold(ctx context.Context, key string, lim algo.Limit, d time.Duration) error {
	if rs := s.z.conn.Load(); rs != nil {
		return rs.Hold(ctx, key, lim, d)
	}
	if err := store.ValidateHold(key, lim, d); err != nil {
		return err
	}
	return errNotConnected
}

// AcquireSlots implements store.Store.
func (s lazyStore) AcquireSlots(ctx context.Context, id string, ttl time.Duration, as []store.SlotAcquire, res []store.SlotResult) error {
	if rs := s.z.conn.Load(); rs != nil {
		return rs.AcquireSlots(ctx, id, ttl, as, res)
	}
	if err := store.ValidateSlots(id, ttl, as, res); err != nil {
		return err
	}
	return errNotConnected
}

// ReleaseSlots implements store.Store.
func (s lazyStore) ReleaseSlots(ctx context.Context, id string, keys []string) error {
	if rs := s.z.conn.Load(); rs != nil {
		return rs.ReleaseSlots(ctx, id, keys)
	}
	return errNotConnected
}

// Shard implements store.Sharded: a cluster's slots once connected.
func (s lazyStore) Shard(c store.Check) int {
	if rs := s.z.conn.Load(); rs != nil {
		return rs.Shard(c)
	}
	return 0
}

// ProbeKeys implements store.Prober: a key on each of a Cluster's
// masters once connected.
func (s lazyStore) ProbeKeys() []string {
	if rs := s.z.conn.Load(); rs != nil {
		return rs.ProbeKeys()
	}
	return nil
}

// Close implements store.Store.
func (s lazyStore) Close() error {
	if rs := s.z.conn.Load(); rs != nil {
		return rs.Close()
	}
	return nil
}

// keyBackend is the stored API keys' backend on this Redis, once
// connected.
func (z *lazyRedis) keyBackend() (apikeys.Backend, error) {
	if s := z.keys.Load(); s != nil {
		return s, nil
	}
	return nil, errNotConnected
}

// lazyControl is the limiter.ControlStore face of a lazyRedis.
type lazyControl struct{ z *lazyRedis }

func (c lazyControl) get() (*redisctl.Store, error) {
	if s := c.z.ctl.Load(); s != nil {
		return s, nil
	}
	return nil, errNotConnected
}

// Version implements limiter.ControlStore.
func (c lazyControl) Version(ctx context.Context) (int64, error) {
	s, err := c.get()
	if err != nil {
		return 0, err
	}
	return s.Version(ctx)
}

// Load implements limiter.ControlStore.
func (c lazyControl) Load(ctx context.Context) (policy.Overlay, error) {
	s, err := c.get()
	if err != nil {
		return policy.Overlay{}, err
	}
	return s.Load(ctx)
}

// PutPlan implements limiter.ControlStore.
func (c lazyControl) PutPlan(ctx context.Context, p policy.Plan) error {
	s, err := c.get()
	if err != nil {
		return err
	}
	return s.PutPlan(ctx, p)
}

// PutTenant implements limiter.ControlStore.
func (c lazyControl) PutTenant(ctx context.Context, id string, t policy.Tenant) error {
	s, err := c.get()
	if err != nil {
		return err
	}
	return s.PutTenant(ctx, id, t)
}

// DeleteTenant implements limiter.ControlStore.
func (c lazyControl) DeleteTenant(ctx context.Context, id string) error {
	s, err := c.get()
	if err != nil {
		return err
	}
	return s.DeleteTenant(ctx, id)
}

// lazyQueue is the fairq.Queue face of a lazyRedis.
type lazyQueue struct{ z *lazyRedis }

func (q lazyQueue) get(kind string) (*redisq.Queue, error) {
	if _, err := q.z.kinds.Lookup(kind); err != nil {
		return nil, err
	}
	if s := q.z.queue.Load(); s != nil {
		return s, nil
	}
	return nil, errNotConnected
}

// Enqueue implements fairq.Queue.
func (q lazyQueue) Enqueue(ctx context.Context, tenant, kind string, payload []byte) (fairq.Enqueued, error) {
	s, err := q.get(kind)
	if err != nil {
		return fairq.Enqueued{}, err
	}
	return s.Enqueue(ctx, tenant, kind, payload)
}

// Lease implements fairq.Queue.
func (q lazyQueue) Lease(ctx context.Context, kind string) (fairq.Lease, bool, error) {
	s, err := q.get(kind)
	if err != nil {
		return fairq.Lease{}, false, err
	}
	return s.Lease(ctx, kind)
}

// Ack implements fairq.Queue.
func (q lazyQueue) Ack(ctx context.Context, kind, id, token string) error {
	s, err := q.get(kind)
	if err != nil {
		return err
	}
	return s.Ack(ctx, kind, id, token)
}

// Nack implements fairq.Queue.
func (q lazyQueue) Nack(ctx context.Context, kind, id, token string, retryAfter time.Duration) error {
	s, err := q.get(kind)
	if err != nil {
		return err
	}
	return s.Nack(ctx, kind, id, token, retryAfter)
}

// Get implements fairq.Queue.
func (q lazyQueue) Get(ctx context.Context, tenant, id string) (fairq.Info, error) {
	s := q.z.queue.Load()
	if s == nil {
		return fairq.Info{}, errNotConnected
	}
	return s.Get(ctx, tenant, id)
}

// Depth implements fairq.Queue.
func (q lazyQueue) Depth(ctx context.Context, kind, tenant string) (int64, int64, error) {
	s, err := q.get(kind)
	if err != nil {
		return 0, 0, err
	}
	return s.Depth(ctx, kind, tenant)
}

// Close implements fairq.Queue.
func (q lazyQueue) Close() error {
	if s := q.z.queue.Load(); s != nil {
		return s.Close()
	}
	return nil
}

var (
	_ store.Store          = lazyStore{}
	_ store.Sharded        = lazyStore{}
	_ store.Prober         = lazyStore{}
	_ limiter.ControlStore = lazyControl{}
	_ fairq.Queue          = lazyQueue{}
)
