package fairq

import (
	"cmp"
	"container/heap"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/fairgate/fairgate/fairq/internal/job"
)

// MemoryConfig configures a Memory queue.
type MemoryConfig struct {
	// Kinds are the kinds of job. Required.
	Kinds Kinds
	// Weight gives each tenant's dispatch weight. Nil means 1.
	Weight Weigher
	// Share gives each tenant's share of a kind's refuse depth. Nil means
	// 1.
	Share Sharer
	// Now is the clock. Nil means time.Now.
	Now func() time.Time
	// MaxFinished bounds the finished jobs kept for Get (the oldest go
	// first, and all after Retention). Zero means 100,000.
	MaxFinished int
	// MaxBytes bounds the payload bytes of unfinished jobs, all kinds
	// together; past it Enqueue fails with a *FullError. Zero means
	// DefaultMaxBytes.
	MaxBytes int64
}

// DefaultMaxBytes bounds the in-memory queue's unfinished payloads: 64 MiB.
const DefaultMaxBytes = 64 << 20

// Memory is the in-process queue: the embedded default. Its jobs live as
// long as the process: a restart loses them (use the Redis queue for jobs
// that must survive one). It is safe for concurrent use.
type Memory struct {
	mu      sync.Mutex
	kinds   Kinds
	weight  Weigher
	share   Sharer
	bytes   int64 // payload bytes of unfinished jobs
	maxB    int64
	now     func() time.Time
	maxDone int
	q       map[string]*memKind
	jobs    map[string]*memJob
	done    []string // finished job IDs, oldest first
}

type memJob struct {
	id, kind, tenant string
	payload          []byte
	status           Status
	attempts         int
	token            string
	lease            time.Time // when the running lease expires
	created, updated time.Time
}

// memKind is one kind's dispatch state.
type memKind struct {
	ready    map[string][]string // tenant -> job IDs waiting to be leased, oldest first
	ring     []string            // tenants with ready jobs, in dispatch order
	deficit  map[string]int
	inflight timeHeap // running jobs by lease expiry
	delayed  timeHeap // nacked jobs by retry time
	depth    int64
	tdepth   map[string]int64
	dead     []string
}

// NewMemory returns a memory queue.
func NewMemory(c MemoryConfig) (*Memory, error) {
	if err := c.Kinds.Check(); err != nil {
		return nil, err
	}
	m := &Memory{kinds: c.Kinds, weight: c.Weight, share: c.Share, maxB: cmp.Or(c.MaxBytes, DefaultMaxBytes), now: c.Now, maxDone: c.MaxFinished, q: map[string]*memKind{}, jobs: map[string]*memJob{}}
	if m.now == nil {
		m.now = time.Now
	}
	if m.maxDone <= 0 {
		m.maxDone = 100_000
	}
	for name := range c.Kinds {
		m.q[name] = &memKind{ready: map[string][]string{}, deficit: map[string]int{}, tdepth: map[string]int64{}}
	}
	return m, nil
}

// Enqueue implements Queue.
func (m *Memory) Enqueue(ctx context.Context, tenant, kind string, payload []byte) (Enqueued, error) {
	k, err := m.kinds.Lookup(kind)
	if err != nil {
		return Enqueued{}, err
	}
	if err := CheckEnqueue(tenant, payload); err != nil {
		return Enqueued{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	q := m.q[kind]
	if k.Refuse > 0 && q.depth >= k.Refuse {
		return Enqueued{}, &FullError{Kind: kind, Depth: q.depth, Limit: k.Refuse, RetryAfter: FullRetryAfter}
	}
	if lim := m.share.TenantLimit(tenant, k); lim > 0 && q.tdepth[tenant] >= lim {
		return Enqueued{}, &FullError{Kind: kind, Depth: q.tdepth[tenant], Limit: lim, Tenant: tenant, RetryAfter: FullRetryAfter}
	}
	if m.bytes+int64(len(payload)) > m.maxB {
		return Enqueued{}, &FullError{Kind: kind, Depth: q.depth, Bytes: m.maxB, RetryAfter: FullRetryAfter}
	}
	m.bytes += int64(len(payload))
	now := m.now()
	j := &memJob{id: job.NewID(now), kind: kind, tenant: tenant, payload: append([]byte(nil), payload...), status: StatusQueued, created: now, updated: now}
	m.jobs[j.id] = j
	q.depth++
	q.tdepth[tenant]++
	q.push(tenant, j.id)
	return Enqueued{ID: j.id, Depth: q.depth, Warn: k.Warn > 0 && q.depth >= k.Warn}, nil
}

// push adds a ready job for tenant, putting the tenant in the ring if it
// was not there.
func (q *memKind) push(tenant, id string) {
	if len(q.ready[tenant]) == 0 {
		q.ring = append(q.ring, tenant)
	}
	q.ready[tenant] = append(q.ready[tenant], id)
}

// Lease implements Queue: first a job whose lease expired (handed out
// again, or to the dead letters when out of attempts), then nacked jobs
// whose retry time has come go back to their tenant's line, then deficit
// round robin over the tenants with ready jobs.
func (m *Memory) Lease(ctx context.Context, kind string) (Lease, bool, error) {
	k, err := m.kinds.Lookup(kind)
	if err != nil {
		return Lease{}, false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	q := m.q[kind]
	m.expire(now)
	for q.inflight.Len() > 0 && !q.inflight[0].at.After(now) {
		e := heap.Pop(&q.inflight).(timed)
		j := m.jobs[e.id]
		if j == nil || j.status != StatusRunning || j.token != e.token {
			continue // acked or nacked since
		}
		if j.attempts >= k.MaxAttempts {
			m.finish(q, j, StatusFailed, now)
			q.dead = append(q.dead, j.id)
			continue
		}
		return m.give(q, k, j, now), true, nil
	}
	for q.delayed.Len() > 0 && !q.delayed[0].at.After(now) {
		e := heap.Pop(&q.delayed).(timed)
		if j := m.jobs[e.id]; j != nil && j.status == StatusQueued && j.token == e.token {
			q.push(j.tenant, j.id)
		}
	}
	for len(q.ring) > 0 {
		t := q.ring[0]
		ids := q.ready[t]
		if len(ids) == 0 {
			q.ring = q.ring[1:]
			delete(q.deficit, t)
			continue
		}
		d := q.deficit[t]
		if d < 1 {
			d += m.weight.Weight(t)
		}
		id := ids[0]
		if len(ids) == 1 {
			delete(q.ready, t)
		} else {
			q.ready[t] = ids[1:]
		}
		if d--; d < 1 || len(ids) == 1 {
			// Its quantum is spent (or its line is empty): to the back.
			q.ring = q.ring[1:]
			delete(q.deficit, t)
			if len(ids) > 1 {
				q.ring = append(q.ring, t)
			}
		} else {
			q.deficit[t] = d
		}
		return m.give(q, k, m.jobs[id], now), true, nil
	}
	return Lease{}, false, nil
}

// give leases j.
func (m *Memory) give(q *memKind, k Kind, j *memJob, now time.Time) Lease {
	j.attempts++
	j.status, j.token, j.lease, j.updated = StatusRunning, job.NewToken(), now.Add(k.Visibility), now
	heap.Push(&q.inflight, timed{at: j.lease, id: j.id, token: j.token})
	return Lease{ID: j.id, Kind: j.kind, Tenant: j.tenant, Payload: j.payload, Attempt: j.attempts, Token: j.token, Expires: j.lease}
}

// finish ends j with status, counting it out of the depth.
func (m *Memory) finish(q *memKind, j *memJob, s Status, now time.Time) {
	m.bytes -= int64(len(j.payload))
	j.status, j.token, j.updated, j.payload = s, "", now, nil
	q.depth--
	if q.tdepth[j.tenant]--; q.tdepth[j.tenant] <= 0 {
		delete(q.tdepth, j.tenant)
	}
	m.done = append(m.done, j.id)
}

// expire forgets finished jobs past Retention or over MaxFinished.
func (m *Memory) expire(now time.Time) {
	n := 0
	for n < len(m.done) {
		j := m.jobs[m.done[n]]
		if len(m.done)-n <= m.maxDone && j != nil && now.Sub(j.updated) < Retention {
			break
		}
		delete(m.jobs, m.done[n])
		n++
	}
	m.done = m.done[n:]
}

// running returns the running job id of kind held by token.
func (m *Memory) running(kind, id, token string) (*memJob, error) {
	if _, err := m.kinds.Lookup(kind); err != nil {
		return nil, err
	}
	j := m.jobs[id]
	if j == nil || j.kind != kind {
		return nil, ErrNotFound
	}
	if j.status != StatusRunning || j.token != token {
		return nil, ErrLeaseLost
	}
	return j, nil
}

// Ack implements Queue.
func (m *Memory) Ack(ctx context.Context, kind, id, token string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	j, err := m.running(kind, id, token)
	if err != nil {
		return err
	}
	m.finish(m.q[kind], j, StatusDone, m.now())
	return nil
}

// Nack implements Queue.
func (m *Memory) Nack(ctx context.Context, kind, id, token string, retryAfter time.Duration) error {
	if retryAfter < 0 {
		return fmt.Errorf("%w: negative retry delay %v", ErrInvalid, retryAfter)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	j, err := m.running(kind, id, token)
	if err != nil {
		return err
	}
	k, _ := m.kinds.Lookup(kind)
	q, now := m.q[kind], m.now()
	if j.attempts >= k.MaxAttempts {
		m.finish(q, j, StatusFailed, now)
		q.dead = append(q.dead, j.id)
		return nil
	}
	j.status, j.token, j.updated = StatusQueued, job.NewToken(), now
	heap.Push(&q.delayed, timed{at: now.Add(retryAfter), id: j.id, token: j.token})
	return nil
}

// Get implements Queue.
func (m *Memory) Get(ctx context.Context, tenant, id string) (Info, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	j := m.jobs[id]
	if j == nil || j.tenant != tenant {
		return Info{}, ErrNotFound
	}
	return Info{ID: j.id, Kind: j.kind, Tenant: j.tenant, Status: j.status, Attempts: j.attempts, Created: j.created, Updated: j.updated}, nil
}

// Depth implements Queue.
func (m *Memory) Depth(ctx context.Context, kind, tenant string) (int64, int64, error) {
	if _, err := m.kinds.Lookup(kind); err != nil {
		return 0, 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	q := m.q[kind]
	return q.depth, q.tdepth[tenant], nil
}

// DeadLetters returns the IDs of kind's jobs that ran out of attempts,
// oldest first.
func (m *Memory) DeadLetters(kind string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if q := m.q[kind]; q != nil {
		return append([]string(nil), q.dead...)
	}
	return nil
}

// Close implements Queue; a Memory queue holds nothing to release.
func (m *Memory) Close() error { return nil }

// timed is a job ID due at a time, for one delivery (token).
type timed struct {
	at        time.Time
	id, token string
}

// timeHeap is a min-heap of timed by at.
type timeHeap []timed

func (h timeHeap) Len() int           { return len(h) }
func (h timeHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h timeHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *timeHeap) Push(x any)        { *h = append(*h, x.(timed)) }
func (h *timeHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

var _ Queue = (*Memory)(nil)
