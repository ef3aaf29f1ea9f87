package apikeys

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
)

// Backend keeps the records where every instance reads them: Redis when
// the store is Redis (package rediskeys), memory for the embedded default
// (NewMemory). Every write moves a version and is kept in a change log,
// so that instances load only what changed since their last poll.
// Implementations are safe for concurrent use.
type Backend interface {
	// Version returns the version, which every write moves. Cheap: a Set
	// calls it every poll, and syncs only when it is not the Set's. It may
	// answer from a cache the backend keeps fresh by itself (package
	// rediskeys: Redis's client tracking), so a write shows there a moment
	// after it returns; Changes never answers from a cache.
	Version(ctx context.Context) (int64, error)
	// Write applies one change: with op Create it stores r unless its ID
	// is taken, with Update it replaces an existing record, with Delete
	// it removes one. It reports whether it did.
	Write(ctx context.Context, op Op, r Record) (bool, error)
	// Changes returns the changes after version since, oldest first, at
	// most max of them, and the backend's current version. ok is false
	// when the log no longer reaches back to since: call Snapshot.
	Changes(ctx context.Context, since int64, max int) (ch []Change, ver int64, ok bool, err error)
	// Snapshot returns every record and a version the set is at least as
	// new as (apply Changes after it to be exact).
	Snapshot(ctx context.Context) ([]Record, int64, error)
	// Touch records when keys were last used (Unix seconds by ID), keeping
	// the latest of every instance's.
	Touch(ctx context.Context, used map[string]int64) error
	// LastUsed returns when each ID was last used (Unix seconds; 0: never
	// or not known yet).
	LastUsed(ctx context.Context, ids []string) ([]int64, error)
}

// Op is a write's kind.
type Op string

// The writes.
const (
	Create Op = "create"
	Update Op = "update"
	Delete Op = "delete"
)

// Change is one entry of the change log: the record as it now is, or
// Deleted with only ID set.
type Change struct {
	Version int64
	Deleted bool
	Record  Record
}

// LogMax is how many changes a backend's log keeps; an instance further
// behind reloads the whole set.
const LogMax = 10000

// Encode returns r as a backend stores it.
func Encode(r Record) []byte {
	b, _ := json.Marshal(wire{Sum: hex.EncodeToString(r.Sum[:]), Record: r})
	return b
}

// Decode parses a stored record.
func Decode(b []byte) (Record, error) {
	var w wire
	if err := json.Unmarshal(b, &w); err != nil {
		return Record{}, fmt.Errorf("apikeys: stored record: %w", err)
	}
	s, err := hex.DecodeString(w.Sum)
	if err != nil || len(s) != len(w.Record.Sum) {
		return Record{}, fmt.Errorf("apikeys: stored record %q: bad digest", w.ID)
	}
	copy(w.Record.Sum[:], s)
	return w.Record, nil
}

// memory is the in-process Backend.
type memory struct {
	mu    sync.Mutex
	recs  map[string]Record
	used  map[string]int64
	log   []logEntry // oldest first
	ver   int64
	floor int64 // versions at or below it have left the log
}

type logEntry struct {
	ver int64
	id  string
}

// NewMemory returns an empty in-process Backend.
func NewMemory() Backend {
	return &memory{recs: map[string]Record{}, used: map[string]int64{}}
}

func (m *memory) Write(_ context.Context, op Op, r Record) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, had := m.recs[r.ID]
	switch {
	case op == Create && had, op != Create && !had:
		return false, nil
	case op == Delete:
		delete(m.recs, r.ID)
		delete(m.used, r.ID)
	default:
		m.recs[r.ID] = r
	}
	m.ver++
	// Like the Redis log, keep only each ID's last change.
	m.log = slices.DeleteFunc(m.log, func(e logEntry) bool { return e.id == r.ID })
	m.log = append(m.log, logEntry{m.ver, r.ID})
	if n := len(m.log) - LogMax; n > 0 {
		m.floor = m.log[n-1].ver
		m.log = slices.Delete(m.log, 0, n)
	}
	return true, nil
}

func (m *memory) Version(context.Context) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ver, nil
}

func (m *memory) Changes(_ context.Context, since int64, max int) ([]Change, int64, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if since < m.floor {
		return nil, m.ver, false, nil
	}
	i, _ := slices.BinarySearchFunc(m.log, since+1, func(e logEntry, v int64) int { return int(e.ver - v) })
	var ch []Change
	for _, e := range m.log[i:] {
		if len(ch) == max {
			break
		}
		r, ok := m.recs[e.id]
		if !ok {
			r = Record{ID: e.id}
		}
		ch = append(ch, Change{Version: e.ver, Deleted: !ok, Record: r})
	}
	return ch, m.ver, true, nil
}

func (m *memory) Snapshot(context.Context) ([]Record, int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Record, 0, len(m.recs))
	for _, r := range m.recs {
		out = append(out, r)
	}
	return out, m.ver, nil
}

func (m *memory) Touch(_ context.Context, used map[string]int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, t := range used {
		if _, ok := m.recs[id]; ok && t > m.used[id] {
			m.used[id] = t
		}
	}
	return nil
}

func (m *memory) LastUsed(_ context.Context, ids []string) ([]int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]int64, len(ids))
	for i, id := range ids {
		out[i] = m.used[id]
	}
	return out, nil
}

// Deferred is a Backend that is not there yet, such as one on a Redis
// still connecting: each call asks Get for it and fails with Get's error
// until it is.
type Deferred func() (Backend, error)

// Write implements Backend.
func (d Deferred) Write(ctx context.Context, op Op, r Record) (bool, error) {
	b, err := d()
	if err != nil {
		return false, err
	}
	return b.Write(ctx, op, r)
}

// Version implements Backend.
func (d Deferred) Version(ctx context.Context) (int64, error) {
	b, err := d()
	if err != nil {
		return 0, err
	}
	return b.Version(ctx)
}

// Changes implements Backend.
func (d Deferred) Changes(ctx context.Context, since int64, max int) ([]Change, int64, bool, error) {
	b, err := d()
	if err != nil {
		return nil, 0, false, err
	}
	return b.Changes(ctx, since, max)
}

// Snapshot implements Backend.
func (d Deferred) Snapshot(ctx context.Context) ([]Record, int64, error) {
	b, err := d()
	if err != nil {
		return nil, 0, err
	}
	return b.Snapshot(ctx)
}

// Touch implements Backend.
func (d Deferred) Touch(ctx context.Context, used map[string]int64) error {
	b, err := d()
	if err != nil {
		return err
	}
	return b.Touch(ctx, used)
}

// LastUsed implements Backend.
func (d Deferred) LastUsed(ctx context.Context, ids []string) ([]int64, error) {
	b, err := d()
	if err != nil {
		return nil, err
	}
	return b.LastUsed(ctx, ids)
}
