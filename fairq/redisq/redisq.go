package redisq

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/fairgate/fairgate/fairq"
	"github.com/fairgate/fairgate/fairq/internal/job"
	"github.com/fairgate/fairgate/policy"
)

// Config configures a Queue.
type Config struct {
	// Client is the Redis client; the caller keeps it and closes it.
	// Required.
	Client rueidis.Client
	// Prefix starts every key. Empty means "fg:".
	Prefix string
	// Kinds are the kinds of job. Required.
	Kinds fairq.Kinds
	// Weight gives each tenant's dispatch weight. Nil means 1.
	Weight fairq.Weigher
	// Share gives each tenant's share of a kind's refuse depth. Nil means
	// 1.
	Share fairq.Sharer
}

// Queue is a fairq.Queue on Redis. It is safe for concurrent use.
type Queue struct {
	c      rueidis.Client
	prefix string
	kinds  fairq.Kinds
	weight fairq.Weigher
	share  fairq.Sharer
}

var (
	//go:embed lua/lib.lua
	libSrc string
	//go:embed lua/enqueue.lua
	enqueueSrc string
	//go:embed lua/lease.lua
	leaseSrc string
	//go:embed lua/finish.lua
	finishSrc string

	enqueueScript = rueidis.NewLuaScript(libSrc + enqueueSrc)
	leaseScript   = rueidis.NewLuaScript(libSrc + leaseSrc)
	finishScript  = rueidis.NewLuaScript(libSrc + finishSrc)
)

// New returns a queue on c.Client.
func New(c Config) (*Queue, error) {
	if c.Client == nil {
		return nil, errors.New("redisq: Config.Client is required")
	}
	if err := c.Kinds.Check(); err != nil {
		return nil, err
	}
	q := &Queue{c: c.Client, prefix: c.Prefix, kinds: c.Kinds, weight: c.Weight, share: c.Share}
	if q.prefix == "" {
		q.prefix = "fg:"
	}
	return q, nil
}

// base is the key prefix of a kind's keys, hash tag included.
func (q *Queue) base(kind string) string { return q.prefix + "{q:" + kind + "}:" }

// tag is a tenant's part of a key: escaped (hashed when long) as in
// package limiter, so no tenant ID can reach another's keys.
func tag(tenant string) string { return policy.TenantTag(tenant) }

// Enqueue implements fairq.Queue.
func (q *Queue) Enqueue(ctx context.Context, tenant, kind string, payload []byte) (fairq.Enqueued, error) {
	k, err := q.kinds.Lookup(kind)
	if err != nil {
		return fairq.Enqueued{}, err
	}
	if err := fairq.CheckEnqueue(tenant, payload); err != nil {
		return fairq.Enqueued{}, err
	}
	b, tg, id := q.base(kind), tag(tenant), job.NewID(time.Now())
	keys := []string{b + "s:" + tg, b + "j:" + id, b + "ring", b + "depth", b + "tdepth", b + "weight", b + "seq"}
	tlim := q.share.TenantLimit(tenant, k)
	args := []string{id, tenant, tg, string(payload), strconv.Itoa(q.weight.Weight(tenant)), strconv.FormatInt(k.Refuse, 10), strconv.FormatInt(tlim, 10)}
	r, err := enqueueScript.Exec(ctx, q.c, keys, args).AsIntSlice()
	if err != nil {
		return fairq.Enqueued{}, fmt.Errorf("redisq: enqueue %s job: %w", kind, err)
	}
	if len(r) != 2 {
		return fairq.Enqueued{}, fmt.Errorf("redisq: enqueue %s job: unexpected reply %v", kind, r)
	}
	switch r[0] {
	case 0:
		return fairq.Enqueued{}, &fairq.FullError{Kind: kind, Depth: r[1], Limit: k.Refuse, RetryAfter: fairq.FullRetryAfter}
	case 2:
		return fairq.Enqueued{}, &fairq.FullError{Kind: kind, Depth: r[1], Limit: tlim, Tenant: tenant, RetryAfter: fairq.FullRetryAfter}
	}
	return fairq.Enqueued{ID: id, Depth: r[1], Warn: k.Warn > 0 && r[1] >= k.Warn}, nil
}

// Lease implements fairq.Queue.
func (q *Queue) Lease(ctx context.Context, kind string) (fairq.Lease, bool, error) {
	k, err := q.kinds.Lookup(kind)
	if err != nil {
		return fairq.Lease{}, false, err
	}
	b := q.base(kind)
	keys := []string{b + "ring", b + "deficit", b + "weight", b + "inflight", b + "delayed", b + "depth", b + "tdepth", b + "dead", b + "seq"}
	token := job.NewToken()
	args := []string{b, strconv.FormatInt(k.Visibility.Milliseconds(), 10), strconv.Itoa(k.MaxAttempts), token, strconv.FormatInt(int64(fairq.Retention/time.Second), 10)}
	msg := leaseScript.Exec(ctx, q.c, keys, args)
	if rueidis.IsRedisNil(msg.Error()) {
		return fairq.Lease{}, false, nil
	}
	r, err := msg.ToArray()
	if err != nil {
		return fairq.Lease{}, false, fmt.Errorf("redisq: lease %s job: %w", kind, err)
	}
	if len(r) != 5 {
		return fairq.Lease{}, false, fmt.Errorf("redisq: lease %s job: unexpected reply of %d elements", kind, len(r))
	}
	var l fairq.Lease
	var attempt, until int64
	l.ID, err = r[0].ToString()
	if err == nil {
		l.Tenant, err = r[1].ToString()
	}
	var payload string
	if err == nil {
		payload, err = r[2].ToString()
	}
	if err == nil {
		attempt, err = r[3].AsInt64()
	}
	if err == nil {
		until, err = r[4].AsInt64()
	}
	if err != nil {
		return fairq.Lease{}, false, fmt.Errorf("redisq: lease %s job: unexpected reply: %w", kind, err)
	}
	l.Kind, l.Payload, l.Attempt, l.Token, l.Expires = kind, []byte(payload), int(attempt), token, time.UnixMilli(until)
	return l, true, nil
}

// finish runs finish.lua.
func (q *Queue) finish(ctx context.Context, kind, id, token, op string, delay time.Duration) error {
	k, err := q.kinds.Lookup(kind)
	if err != nil {
		return err
	}
	if !job.ValidID(id) {
		return fairq.ErrNotFound
	}
	b := q.base(kind)
	keys := []string{b + "inflight", b + "delayed", b + "depth", b + "tdepth", b + "dead", b + "j:" + id}
	args := []string{b, token, op, strconv.FormatInt(delay.Milliseconds(), 10), strconv.Itoa(k.MaxAttempts), strconv.FormatInt(int64(fairq.Retention/time.Second), 10)}
	code, err := finishScript.Exec(ctx, q.c, keys, args).AsInt64()
	switch {
	case err != nil:
		return fmt.Errorf("redisq: %s %s job %s: %w", op, kind, id, err)
	case code == -1:
		return fairq.ErrNotFound
	case code == 0:
		return fairq.ErrLeaseLost
	}
	return nil
}

// Ack implements fairq.Queue.
func (q *Queue) Ack(ctx context.Context, kind, id, token string) error {
	return q.finish(ctx, kind, id, token, "ack", 0)
}

// Nack implements fairq.Queue.
func (q *Queue) Nack(ctx context.Context, kind, id, token string, retryAfter time.Duration) error {
	if retryAfter < 0 {
		return fmt.Errorf("%w: negative retry delay %v", fairq.ErrInvalid, retryAfter)
	}
	return q.finish(ctx, kind, id, token, "nack", retryAfter)
}

// Get implements fairq.Queue. The kind is not in the ID, so it looks in
// each configured kind (a few reads).
func (q *Queue) Get(ctx context.Context, tenant, id string) (fairq.Info, error) {
	if !job.ValidID(id) {
		return fairq.Info{}, fairq.ErrNotFound
	}
	for kind := range q.kinds {
		cmd := q.c.B().Hmget().Key(q.base(kind)+"j:"+id).Field("tenant", "status", "attempts", "created", "updated").Build()
		vals, err := q.c.Do(ctx, cmd).ToArray()
		if err != nil {
			return fairq.Info{}, fmt.Errorf("redisq: get job %s: %w", id, err)
		}
		if len(vals) != 5 {
			return fairq.Info{}, fmt.Errorf("redisq: get job %s: unexpected reply", id)
		}
		t, err := vals[0].ToString()
		if rueidis.IsRedisNil(err) {
			continue
		}
		if err != nil {
			return fairq.Info{}, fmt.Errorf("redisq: get job %s: %w", id, err)
		}
		if t != tenant {
			return fairq.Info{}, fairq.ErrNotFound
		}
		st, _ := vals[1].ToString()
		attempts, _ := vals[2].AsInt64()
		created, _ := vals[3].AsInt64()
		updated, _ := vals[4].AsInt64()
		return fairq.Info{ID: id, Kind: kind, Tenant: t, Status: fairq.Status(st), Attempts: int(attempts),
			Created: time.UnixMilli(created), Updated: time.UnixMilli(updated)}, nil
	}
	return fairq.Info{}, fairq.ErrNotFound
}

// DepthRecheck is how long a cached read of a depth stands without an
// invalidation from Redis (see [Queue.Depth]): a safety net, should one
// ever be lost.
const DepthRecheck = 30 * time.Second

// Depth implements fairq.Queue. It reads through the client's cache
// (rueidis DoMultiCache): on a client with client-side caching on (a
// redisstore URL's), Redis tracks the reads and pushes an invalidation
// when a job is added or finished, so that reading an idle queue's depth
// (the fairgate_queue_depth metric, the dashboard) costs Redis nothing;
// the cached reads are sent again after [DepthRecheck] all the same.
// Tenant "" (no job has it) reads the kind's depth alone.
func (q *Queue) Depth(ctx context.Context, kind, tenant string) (int64, int64, error) {
	if _, err := q.kinds.Lookup(kind); err != nil {
		return 0, 0, err
	}
	b := q.base(kind)
	reads := []rueidis.CacheableTTL{rueidis.CT(q.c.B().Get().Key(b+"depth").Cache().ToStaticTTL(), DepthRecheck)}
	if tenant != "" {
		reads = append(reads, rueidis.CT(q.c.B().Hget().Key(b+"tdepth").Field(tag(tenant)).Cache().ToStaticTTL(), DepthRecheck))
	}
	res := q.c.DoMultiCache(ctx, reads...)
	var n [2]int64
	for i, r := range res {
		v, err := r.AsInt64()
		if err != nil && !rueidis.IsRedisNil(err) {
			return 0, 0, fmt.Errorf("redisq: depth of %s: %w", kind, err)
		}
		n[i] = v
	}
	return n[0], n[1], nil
}

// DeadLetters returns the IDs of kind's jobs that ran out of attempts,
// oldest first (the last 10,000).
func (q *Queue) DeadLetters(ctx context.Context, kind string) ([]string, error) {
	return q.c.Do(ctx, q.c.B().Lrange().Key(q.base(kind)+"dead").Start(0).Stop(-1).Build()).AsStrSlice()
}

// Close implements fairq.Queue; the caller closes the client.
func (q *Queue) Close() error { return nil }

var _ fairq.Queue = (*Queue)(nil)
