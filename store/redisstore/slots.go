package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/fairgate/fairgate/store"
)

// slotScript takes a request's concurrency slots (lua/slot_acquire.lua).
// It is not retried after a broken connection: a lease acquired twice
// under one id is the same lease, so a retry would be harmless, but the
// caller's deadline decides.
var slotScript = rueidis.NewLuaScript(readLua("lib") + readLua("slot_acquire"))

// slotKey is the Redis key of a slot key: its own code, so that it never
// meets a rate-limit key.
func (s *Store) slotKey(key string) string { return s.prefix + "c:" + key }

// slotKeys are the Redis keys of keys, refused unless they share one hash
// slot: a script call's keys must on Redis Cluster, and a call that works
// on a standalone Redis must work on a cluster too.
func (s *Store) slotKeys(n int, key func(int) string) ([]string, error) {
	out := make([]string, n)
	for i := range n {
		out[i] = s.slotKey(key(i))
		if slot(out[i]) != slot(out[0]) {
			return nil, fmt.Errorf("%w: slot keys %q and %q are in different hash slots: give a request's slot keys one {hash tag}", store.ErrInvalidCheck, key(0), key(i))
		}
	}
	return out, nil
}

// AcquireSlots implements store.Slots: one script call, on Redis's clock.
func (s *Store) AcquireSlots(ctx context.Context, id string, ttl time.Duration, as []store.SlotAcquire, res []store.SlotResult) error {
	if err := store.ValidateSlots(id, ttl, as, res); err != nil {
		return err
	}
	keys, err := s.slotKeys(len(as), func(i int) string { return as[i].Key })
	if err != nil {
		return err
	}
	args := make([]string, 2, 2+2*len(as))
	args[0], args[1] = id, strconv.FormatInt(int64(ttl/time.Microsecond), 10)
	for _, a := range as {
		opt := "0"
		if a.Optional {
			opt = "1"
		}
		args = append(args, strconv.FormatInt(a.Limit, 10), opt)
	}
	msgs, err := s.exec(ctx, slotScript, keys, args)
	if err != nil {
		return fmt.Errorf("%w: acquire slots: %w", store.ErrUnavailable, err)
	}
	v, err := integers(nil, msgs, 1+3*len(as))
	if err != nil {
		return err
	}
	for i := range as {
		r := v[1+3*i:]
		res[i] = store.SlotResult{Acquired: r[0] == 1, InUse: r[1], NextExpiry: time.Duration(r[2]) * time.Microsecond, Now: time.UnixMicro(v[0])}
	}
	return nil
}

// ReleaseSlots implements store.Slots: one ZREM per key, pipelined.
func (s *Store) ReleaseSlots(ctx context.Context, id string, keys []string) error {
	if err := store.ValidateRelease(id, keys); err != nil {
		return err
	}
	cmds := make(rueidis.Commands, len(keys))
	for i, k := range keys {
		cmds[i] = s.c.B().Zrem().Key(s.slotKey(k)).Member(id).Build()
	}
	for _, r := range s.c.DoMulti(ctx, cmds...) {
		if err := r.Error(); err != nil {
			return fmt.Errorf("%w: release slots: %w", store.ErrUnavailable, err)
		}
	}
	return nil
}
