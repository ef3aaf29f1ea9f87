package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/fairgate/fairgate/store"
)

// slotScript takes a concurrency slot (lua/slot_acquire.lua). It is not
// retried after a broken connection: a lease acquired twice under one id
// is the same lease, so a retry would be harmless, but the caller's
// deadline decides.
var slotScript = rueidis.NewLuaScript(readLua("lib") + readLua("slot_acquire"))

// slotKey is the Redis key of a slot key: its own code, so that it never
// meets a rate-limit key.
func (s *Store) slotKey(key string) string { return s.prefix + "c:" + key }

// AcquireSlot implements store.Slots: one script call, on Redis's clock.
func (s *Store) AcquireSlot(ctx context.Context, key, id string, limit int64, ttl time.Duration) (store.SlotResult, error) {
	if err := store.ValidateSlot(key, id, limit, ttl); err != nil {
		return store.SlotResult{}, err
	}
	args := []string{id, strconv.FormatInt(limit, 10), strconv.FormatInt(int64(ttl/time.Microsecond), 10)}
	msgs, err := slotScript.Exec(ctx, s.c, []string{s.slotKey(key)}, args).ToArray()
	if err != nil {
		return store.SlotResult{}, fmt.Errorf("%w: acquire slot: %w", store.ErrUnavailable, err)
	}
	v, err := integers(nil, msgs, 4)
	if err != nil {
		return store.SlotResult{}, err
	}
	return store.SlotResult{Acquired: v[1] == 1, InUse: v[2], NextExpiry: time.Duration(v[3]) * time.Microsecond, Now: time.UnixMicro(v[0])}, nil
}

// ReleaseSlot implements store.Slots.
func (s *Store) ReleaseSlot(ctx context.Context, key, id string) error {
	if key == "" || id == "" {
		return fmt.Errorf("%w: release needs a key and a lease id", store.ErrInvalidCheck)
	}
	if err := s.c.Do(ctx, s.c.B().Zrem().Key(s.slotKey(key)).Member(id).Build()).Error(); err != nil {
		return fmt.Errorf("%w: release slot: %w", store.ErrUnavailable, err)
	}
	return nil
}

var _ store.Slots = (*Store)(nil)
