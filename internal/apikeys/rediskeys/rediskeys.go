// Package rediskeys keeps fairgate's stored API keys in Redis (standalone
// or Cluster), so that every instance on one Redis accepts the same keys:
// an apikeys.Backend.
//
// Five keys share the hash tag {apikeys}, so one slot holds them and each
// write is one atomic script: <prefix>{apikeys}:records (a hash of JSON
// records by key ID; digests only, never a key), :log (a sorted set of IDs
// by the version of their last change, trimmed to apikeys.LogMax), :version,
// :floor (the newest version trimmed from the log) and :used (last-used
// times by ID). Instances poll the version and, when it is not theirs, the
// log for what changed since theirs (one script call). The version is read
// through the client's cache (rueidis DoCache): on a client with
// client-side caching on (a redisstore URL's), Redis tracks the read and
// pushes an invalidation when a write moves the version, so a poll costs
// Redis nothing until then; the cached read is sent again after
// [VersionRecheck] all the same, and a broken connection drops the cache.
package rediskeys

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/fairgate/fairgate/internal/apikeys"
)

// Store is an apikeys.Backend on Redis. It is safe for concurrent use.
type Store struct {
	c                                    rueidis.Client
	records, log, version, floor, usedAt string
}

// New returns a Store on client c with key prefix (empty means "fg:"). The
// caller keeps c and closes it.
func New(c rueidis.Client, prefix string) *Store {
	if prefix == "" {
		prefix = "fg:"
	}
	p := prefix + "{apikeys}:"
	return &Store{c: c, records: p + "records", log: p + "log", version: p + "version", floor: p + "floor", usedAt: p + "used"}
}

var (
	//go:embed write.lua
	writeSrc string
	//go:embed changes.lua
	changesSrc string
	//go:embed touch.lua
	touchSrc string

	write   = rueidis.NewLuaScript(writeSrc)
	changes = rueidis.NewLuaScriptReadOnly(changesSrc)
	touch   = rueidis.NewLuaScript(touchSrc)
)

// VersionRecheck is how long a cached read of the version stands without
// an invalidation from Redis: a safety net, should one ever be lost.
const VersionRecheck = 30 * time.Second

// Version implements apikeys.Backend, through the client's cache (see the
// package doc): it may answer from memory.
func (s *Store) Version(ctx context.Context) (int64, error) {
	v, err := s.c.DoCache(ctx, s.c.B().Get().Key(s.version).Cache().ToStaticTTL(), VersionRecheck).AsInt64()
	if rueidis.IsRedisNil(err) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("rediskeys: version: %w", err)
	}
	return v, nil
}

// Write implements apikeys.Backend. A write that reaches Redis after its
// context's deadline is refused there, so one its caller was told failed
// never happens later.
func (s *Store) Write(ctx context.Context, op apikeys.Op, r apikeys.Record) (bool, error) {
	var deadline int64
	if d, ok := ctx.Deadline(); ok {
		deadline = d.UnixMicro()
	}
	doc := ""
	if op != apikeys.Delete {
		doc = string(apikeys.Encode(r))
	}
	v, err := write.Exec(ctx, s.c, []string{s.records, s.log, s.version, s.floor, s.usedAt},
		[]string{string(op), r.ID, doc, strconv.FormatInt(deadline, 10), strconv.Itoa(apikeys.LogMax)}).AsInt64()
	if err != nil {
		return false, fmt.Errorf("rediskeys: %s %s: %w", op, r.ID, err)
	}
	return v > 0, nil
}

// Changes implements apikeys.Backend.
func (s *Store) Changes(ctx context.Context, since int64, max int) ([]apikeys.Change, int64, bool, error) {
	msgs, err := changes.Exec(ctx, s.c, []string{s.records, s.log, s.version, s.floor},
		[]string{strconv.FormatInt(since, 10), strconv.Itoa(max)}).ToArray()
	if err != nil {
		return nil, 0, false, fmt.Errorf("rediskeys: changes: %w", err)
	}
	if len(msgs) < 2 || (len(msgs)-2)%3 != 0 {
		return nil, 0, false, fmt.Errorf("rediskeys: changes replied %d values", len(msgs))
	}
	ver, _ := msgs[0].AsInt64()
	if ok, _ := msgs[1].AsInt64(); ok == 0 {
		return nil, ver, false, nil
	}
	var ch []apikeys.Change
	for i := 2; i < len(msgs); i += 3 {
		id, _ := msgs[i].ToString()
		vs, _ := msgs[i+1].ToString()
		doc, _ := msgs[i+2].ToString()
		c := apikeys.Change{Deleted: doc == "", Record: apikeys.Record{ID: id}}
		if c.Version, err = strconv.ParseInt(vs, 10, 64); err != nil {
			return nil, 0, false, fmt.Errorf("rediskeys: change of %s: version %q", id, vs)
		}
		if !c.Deleted {
			if c.Record, err = apikeys.Decode([]byte(doc)); err != nil {
				return nil, 0, false, err
			}
		}
		ch = append(ch, c)
	}
	return ch, ver, true, nil
}

// Snapshot implements apikeys.Backend. It reads the version first and then
// scans the records in batches (never one long call that would hold Redis),
// so the set may be newer than the version: the changes after it bring it
// exactly up to date.
func (s *Store) Snapshot(ctx context.Context) ([]apikeys.Record, int64, error) {
	ver, err := s.c.Do(ctx, s.c.B().Get().Key(s.version).Build()).AsInt64()
	if err != nil && !rueidis.IsRedisNil(err) {
		return nil, 0, fmt.Errorf("rediskeys: version: %w", err)
	}
	var recs []apikeys.Record
	var cursor uint64
	for {
		e, err := s.c.Do(ctx, s.c.B().Hscan().Key(s.records).Cursor(cursor).Count(1000).Build()).AsScanEntry()
		if err != nil {
			return nil, 0, fmt.Errorf("rediskeys: scan: %w", err)
		}
		for i := 0; i+1 < len(e.Elements); i += 2 {
			r, err := apikeys.Decode([]byte(e.Elements[i+1]))
			if err != nil {
				return nil, 0, err
			}
			recs = append(recs, r)
		}
		if cursor = e.Cursor; cursor == 0 {
			return recs, ver, nil
		}
	}
}

// Touch implements apikeys.Backend, in calls of at most 500 keys.
func (s *Store) Touch(ctx context.Context, used map[string]int64) error {
	args := make([]string, 0, 2*min(len(used), 500))
	flush := func() error {
		if len(args) == 0 {
			return nil
		}
		err := touch.Exec(ctx, s.c, []string{s.records, s.usedAt}, args).Error()
		args = args[:0]
		return err
	}
	for id, t := range used {
		args = append(args, id, strconv.FormatInt(t, 10))
		if len(args) == 1000 {
			if err := flush(); err != nil {
				return fmt.Errorf("rediskeys: touch: %w", err)
			}
		}
	}
	if err := flush(); err != nil {
		return fmt.Errorf("rediskeys: touch: %w", err)
	}
	return nil
}

// LastUsed implements apikeys.Backend.
func (s *Store) LastUsed(ctx context.Context, ids []string) ([]int64, error) {
	out := make([]int64, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	vals, err := s.c.Do(ctx, s.c.B().Hmget().Key(s.usedAt).Field(ids...).Build()).ToArray()
	if err != nil {
		return nil, fmt.Errorf("rediskeys: last used: %w", err)
	}
	for i, v := range vals {
		if i < len(out) {
			out[i], _ = v.AsInt64()
		}
	}
	return out, nil
}

var _ apikeys.Backend = (*Store)(nil)
