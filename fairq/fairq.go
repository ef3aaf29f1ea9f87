package fairq

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/fairgate/fairgate/policy"
)

// Queue is a per-tenant fair job queue. Implementations are safe for
// concurrent use.
type Queue interface {
	// Enqueue adds a job of kind for tenant. Over the kind's refuse
	// threshold it fails with a *FullError and adds nothing.
	Enqueue(ctx context.Context, tenant, kind string, payload []byte) (Enqueued, error)
	// Lease hands out the next job of kind in fair order for the kind's
	// visibility timeout. ok is false when no job is ready.
	Lease(ctx context.Context, kind string) (l Lease, ok bool, err error)
	// Ack marks a leased job done. A lease that expired (the job was
	// handed out again) gets ErrLeaseLost.
	Ack(ctx context.Context, kind, id, token string) error
	// Nack gives a leased job back to run again after retryAfter, or moves
	// it to the dead letters once it has used its attempts. A lease that
	// expired gets ErrLeaseLost.
	Nack(ctx context.Context, kind, id, token string, retryAfter time.Duration) error
	// Get returns a job of tenant's. A job of another tenant's is
	// ErrNotFound, exactly as a job that does not exist.
	Get(ctx context.Context, tenant, id string) (Info, error)
	// Depth returns the unfinished jobs of kind (queued, waiting to retry
	// or running), in all and of tenant.
	Depth(ctx context.Context, kind, tenant string) (all, ofTenant int64, err error)
	// Close releases the queue's resources.
	Close() error
}

// Status is a job's state.
type Status string

// The statuses of a job.
const (
	StatusQueued  Status = "queued"  // waiting to be leased (or to be retried)
	StatusRunning Status = "running" // leased to a worker
	StatusDone    Status = "done"    // acked
	StatusFailed  Status = "failed"  // out of attempts: in the dead letters
)

// Enqueued is what Enqueue answers.
type Enqueued struct {
	ID string
	// Depth is the kind's depth after the job was added.
	Depth int64
	// Warn reports a depth at or over the kind's warn threshold.
	Warn bool
}

// Lease is a job handed to a worker.
type Lease struct {
	ID, Kind, Tenant string
	Payload          []byte
	// Attempt counts the deliveries, this one included (1 the first time).
	Attempt int
	// Token identifies this delivery: Ack and Nack need it, so a worker
	// whose lease expired cannot finish a job handed out again.
	Token string
	// Expires is when the job is handed out again unless acked or nacked.
	Expires time.Time
}

// Info is what Get tells of a job.
type Info struct {
	ID, Kind, Tenant string
	Status           Status
	Attempts         int
	Created, Updated time.Time
}

// Kind configures one kind of job.
type Kind struct {
	// Warn is the depth from which Enqueue reports Warn. Zero means never.
	Warn int64
	// Refuse is the depth at which Enqueue refuses with a *FullError.
	// Zero means never.
	Refuse int64
	// Visibility is how long a lease lasts before the job is handed out
	// again. Zero means DefaultVisibility.
	Visibility time.Duration
	// MaxAttempts is how many deliveries a job gets before it goes to the
	// dead letters. Zero means DefaultMaxAttempts.
	MaxAttempts int
}

// Defaults.
const (
	DefaultVisibility  = 30 * time.Second
	DefaultMaxAttempts = 5
	// Retention is how long a finished job (done or failed) can still be
	// read with Get.
	Retention = 24 * time.Hour
	// MaxPayload is the largest payload Enqueue takes: 64 KiB. A job
	// carries what a worker needs to find its input, not the input itself;
	// with the refuse depth it bounds what a kind's queue can hold.
	MaxPayload = 64 << 10
	// FullRetryAfter is how long a refused Enqueue is told to wait.
	FullRetryAfter = 30 * time.Second
)

// Errors.
var (
	// ErrUnknownKind means a kind is not configured.
	ErrUnknownKind = errors.New("fairq: unknown kind")
	// ErrNotFound means no such job (or not the caller's).
	ErrNotFound = errors.New("fairq: no such job")
	// ErrLeaseLost means a lease expired and the job went to another
	// worker, or the job was already acked or nacked.
	ErrLeaseLost = errors.New("fairq: the lease is no longer held: the job expired and was handed out again, or was already finished")
	// ErrInvalid means a malformed call: an empty tenant, a payload too
	// large, a negative delay.
	ErrInvalid = errors.New("fairq: invalid")
)

// FullError is Enqueue's answer over a kind's refuse threshold: the
// backend is behind, so the caller should try again after RetryAfter.
type FullError struct {
	Kind         string
	Depth, Limit int64
	// Tenant, when not empty, says that the tenant's own share of the
	// kind is full (Depth and Limit are then the tenant's), not the kind.
	Tenant string
	// Bytes, when not zero, says that the in-memory queue's payload bytes
	// are at their bound (MemoryConfig.MaxBytes), which Bytes is.
	Bytes      int64
	RetryAfter time.Duration
}

// Error says which queue is full and for whom.
func (e *FullError) Error() string {
	if e.Bytes > 0 {
		return fmt.Sprintf("fairq: the in-memory queue holds its bound of %d bytes of unfinished jobs' payloads: try again in %v", e.Bytes, e.RetryAfter)
	}
	if e.Tenant != "" {
		return fmt.Sprintf("fairq: this tenant holds %d unfinished %q jobs, at its share of %d: try again in %v", e.Depth, e.Kind, e.Limit, e.RetryAfter)
	}
	return fmt.Sprintf("fairq: kind %q holds %d unfinished jobs, at its limit of %d: try again in %v", e.Kind, e.Depth, e.Limit, e.RetryAfter)
}

// Sharer gives each tenant's share of a kind's refuse depth, in (0, 1]: the
// most of the kind's unfinished jobs one tenant may hold, so that one
// tenant can never fill a queue the others need. Nil means 1 (no share
// but the kind's).
type Sharer func(tenant string) float64

// TenantLimit is how many unfinished jobs of k tenant may hold: its share
// of k.Refuse, rounded up, at least 1; zero when k has no refuse depth.
func (s Sharer) TenantLimit(tenant string, k Kind) int64 {
	if k.Refuse <= 0 {
		return 0
	}
	share := 1.0
	if s != nil {
		share = min(1, max(s(tenant), 0))
	}
	return max(1, int64(math.Ceil(float64(k.Refuse)*share)))
}

// Kinds are the configured kinds by name.
type Kinds map[string]Kind

// Check validates kinds: names of 1 to 64 lower-case letters, digits, '-'
// and '_'; thresholds and durations not negative; Warn at most Refuse.
func (ks Kinds) Check() error {
	for _, name := range slices.Sorted(maps.Keys(ks)) {
		k := ks[name]
		switch {
		case !policy.ValidName(name):
			return fmt.Errorf("%w: kind name %q: want %s", ErrInvalid, name, policy.NameRule)
		case k.Warn < 0 || k.Refuse < 0:
			return fmt.Errorf("%w: kind %q: negative threshold", ErrInvalid, name)
		case k.Refuse > 0 && k.Warn > k.Refuse:
			return fmt.Errorf("%w: kind %q: warn %d is over refuse %d", ErrInvalid, name, k.Warn, k.Refuse)
		case k.Visibility < 0 || k.MaxAttempts < 0:
			return fmt.Errorf("%w: kind %q: negative visibility or attempts", ErrInvalid, name)
		}
	}
	return nil
}

// Lookup returns the named kind with its defaults filled in, or an error
// wrapping ErrUnknownKind that names the configured ones.
func (ks Kinds) Lookup(name string) (Kind, error) {
	k, ok := ks[name]
	if !ok {
		known := slices.Sorted(maps.Keys(ks))
		return k, fmt.Errorf("%w %q: configured are %s", ErrUnknownKind, name, strings.Join(known, ", "))
	}
	if k.Visibility == 0 {
		k.Visibility = DefaultVisibility
	}
	if k.MaxAttempts == 0 {
		k.MaxAttempts = DefaultMaxAttempts
	}
	return k, nil
}

// CheckEnqueue validates an Enqueue's arguments.
func CheckEnqueue(tenant string, payload []byte) error {
	switch {
	case tenant == "":
		return fmt.Errorf("%w: empty tenant", ErrInvalid)
	case len(tenant) > 16<<10:
		return fmt.Errorf("%w: tenant ID of %d bytes is over 16 KiB", ErrInvalid, len(tenant))
	case len(payload) > MaxPayload:
		return fmt.Errorf("%w: payload of %d bytes is over %d", ErrInvalid, len(payload), MaxPayload)
	}
	return nil
}

// Weigher gives a tenant's dispatch weight: how many jobs it is handed per
// round when it has work (its plan's weight). Nil means 1 for everyone.
type Weigher func(tenant string) int

// Weight is w(tenant) clamped to 1..1000, and 1 when w is nil.
func (w Weigher) Weight(tenant string) int {
	if w == nil {
		return 1
	}
	return min(max(w(tenant), 1), 1000)
}
