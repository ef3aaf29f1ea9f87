// Package redisctl keeps fairgate's run-time overlay (plan changes and
// tenant overrides) in Redis, so that every instance on one Redis or Redis
// Cluster applies them: a limiter.ControlStore.
//
// Three keys share the hash tag {control}, so one slot holds them and every
// write is one atomic script: <prefix>{control}:plans and
// <prefix>{control}:tenants (hashes of JSON by name and tenant ID) and
// <prefix>{control}:version (a counter every write increments). Instances
// poll the version and load the hashes when it moves. The version is read
// through the client's cache (rueidis DoCache): on a client with
// client-side caching on (a redisstore URL's), Redis tracks the read and
// pushes an invalidation when the version moves, so a poll costs Redis
// nothing until then; the cached read is sent again after
// [VersionRecheck] all the same, and a broken connection drops the cache.
// Without caching each poll is one GET.
//
// A write carries its context's deadline, and the script refuses to apply
// one that reaches Redis after it (by Redis's clock): a write whose caller
// was told it failed never happens later.
package redisctl

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/policy"
)

// Store is a limiter.ControlStore on Redis. It is safe for concurrent use.
type Store struct {
	c                      rueidis.Client
	plans, tenants, verKey string
}

// New returns a Store on client c with key prefix (empty means "fg:"). The
// caller keeps c and closes it.
func New(c rueidis.Client, prefix string) *Store {
	if prefix == "" {
		prefix = "fg:"
	}
	p := prefix + "{control}:"
	return &Store{c: c, plans: p + "plans", tenants: p + "tenants", verKey: p + "version"}
}

var (
	//go:embed put.lua
	putSrc string
	//go:embed load.lua
	loadSrc string

	put  = rueidis.NewLuaScript(putSrc)
	load = rueidis.NewLuaScriptReadOnly(loadSrc)
)

// VersionRecheck is how long a cached read of the version stands without
// an invalidation from Redis: a safety net, should one ever be lost.
const VersionRecheck = 30 * time.Second

// Version implements limiter.ControlStore, through the client's cache
// (see the package doc): it may answer from memory.
func (s *Store) Version(ctx context.Context) (int64, error) {
	v, err := s.c.DoCache(ctx, s.c.B().Get().Key(s.verKey).Cache().ToStaticTTL(), VersionRecheck).AsInt64()
	if rueidis.IsRedisNil(err) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("redisctl: read version: %w", err)
	}
	return v, nil
}

// Load implements limiter.ControlStore.
func (s *Store) Load(ctx context.Context) (policy.Overlay, error) {
	ov := policy.Overlay{Plans: map[string]policy.Plan{}, Tenants: map[string]policy.Tenant{}}
	msgs, err := load.Exec(ctx, s.c, []string{s.plans, s.tenants, s.verKey}, nil).ToArray()
	if err != nil {
		return ov, fmt.Errorf("redisctl: load: %w", err)
	}
	if len(msgs) != 3 {
		return ov, fmt.Errorf("redisctl: load replied %d values, want 3", len(msgs))
	}
	if ov.Version, err = msgs[0].AsInt64(); err != nil {
		return ov, fmt.Errorf("redisctl: version: %w", err)
	}
	plans, err := msgs[1].AsStrMap()
	if err != nil {
		return ov, fmt.Errorf("redisctl: plans: %w", err)
	}
	for name, v := range plans {
		var p policy.Plan
		if err := json.Unmarshal([]byte(v), &p); err != nil {
			return ov, fmt.Errorf("redisctl: plan %q: %w", name, err)
		}
		ov.Plans[name] = p
	}
	tenants, err := msgs[2].AsStrMap()
	if err != nil {
		return ov, fmt.Errorf("redisctl: tenants: %w", err)
	}
	for id, v := range tenants {
		var t policy.Tenant
		if err := json.Unmarshal([]byte(v), &t); err != nil {
			return ov, fmt.Errorf("redisctl: tenant %q: %w", id, err)
		}
		ov.Tenants[id] = t
	}
	return ov, nil
}

func (s *Store) write(ctx context.Context, key, field string, v any) error {
	val := ""
	if v != nil {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		val = string(b)
	}
	deadline := int64(0)
	if d, ok := ctx.Deadline(); ok {
		deadline = d.UnixMicro()
	}
	if err := put.Exec(ctx, s.c, []string{key, s.verKey}, []string{field, val, strconv.FormatInt(deadline, 10)}).Error(); err != nil {
		return fmt.Errorf("redisctl: write %q: %w", field, err)
	}
	return nil
}

// PutPlan implements limiter.ControlStore.
func (s *Store) PutPlan(ctx context.Context, p policy.Plan) error {
	return s.write(ctx, s.plans, p.Name, p)
}

// PutTenant implements limiter.ControlStore.
func (s *Store) PutTenant(ctx context.Context, id string, t policy.Tenant) error {
	return s.write(ctx, s.tenants, id, t)
}

// DeleteTenant implements limiter.ControlStore.
func (s *Store) DeleteTenant(ctx context.Context, id string) error {
	return s.write(ctx, s.tenants, id, nil)
}

var _ limiter.ControlStore = (*Store)(nil)
