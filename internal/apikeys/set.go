package apikeys

import (
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultPoll is how often a Set asks its backend for changes: a key
// created or revoked anywhere is in force everywhere within about twice
// this.
const DefaultPoll = 500 * time.Millisecond

// DefaultMaxKeys bounds the keys a Set holds (about 300 bytes each).
const DefaultMaxKeys = 1_000_000

// Config configures a Set.
type Config struct {
	// Backend keeps the records. Required.
	Backend Backend
	// Poll is how often Run loads changes. Zero means DefaultPoll.
	Poll time.Duration
	// MaxKeys bounds Create. Zero means DefaultMaxKeys.
	MaxKeys int
	// Now is the clock. Nil means time.Now.
	Now func() time.Time
	// Logger receives sync failures. Nil means silent.
	Logger *slog.Logger
}

// Set is one instance's copy of the stored keys, kept in step with the
// backend by Run. It is safe for concurrent use.
type Set struct {
	c Config

	mu    sync.RWMutex
	bySum map[[sha256.Size]byte]*entry
	byID  map[string]*entry
	ver   int64
	ready bool // a first load succeeded

	syncMu sync.Mutex // one sync at a time
}

type entry struct {
	rec  Record
	used atomic.Int64 // Unix seconds of the last use here
	sent int64        // the last value Touch sent (under syncMu)
}

// New returns an empty Set on c.Backend; Sync or Run loads it.
func New(c Config) (*Set, error) {
	if c.Backend == nil {
		return nil, errors.New("apikeys: Config.Backend is required")
	}
	c.Poll = cmp.Or(c.Poll, DefaultPoll)
	c.MaxKeys = cmp.Or(c.MaxKeys, DefaultMaxKeys)
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return &Set{c: c, bySum: map[[sha256.Size]byte]*entry{}, byID: map[string]*entry{}}, nil
}

// Errors of Lookup.
var (
	// ErrUnknown means no stored key has the digest.
	ErrUnknown = errors.New("unknown API key")
	// ErrExpired means the key has passed its expiry.
	ErrExpired = errors.New("API key expired")
)

// Lookup returns the record of the key whose SHA-256 is sum, and notes
// that it was used. It costs one map probe keyed by the digest.
func (s *Set) Lookup(sum [sha256.Size]byte) (Record, error) {
	s.mu.RLock()
	e := s.bySum[sum]
	s.mu.RUnlock()
	if e == nil {
		return Record{}, ErrUnknown
	}
	now := s.c.Now()
	if !e.rec.Expires.IsZero() && !now.Before(e.rec.Expires) {
		return Record{}, ErrExpired
	}
	if t := now.Unix(); e.used.Load() != t {
		e.used.Store(t)
	}
	return e.rec, nil
}

// Len returns how many keys the Set holds.
func (s *Set) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.byID)
}

// Count returns how many keys tenant has ("" for every tenant's).
func (s *Set) Count(tenant string) int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if tenant == "" {
		return len(s.byID)
	}
	n := 0
	for _, e := range s.byID {
		if e.rec.Tenant == tenant {
			n++
		}
	}
	return n
}

// Ready reports whether the Set has loaded the backend at least once.
func (s *Set) Ready() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.ready
}

// SyncTimeout bounds each of Run's syncs: a backend gone away must not
// hold the loop (and the next sync) for ever.
const SyncTimeout = 10 * time.Second

// Run polls every Poll (see [Set.Poll]), and sends the last-used times
// every 10 s, until ctx ends.
func (s *Set) Run(ctx context.Context) {
	t := time.NewTicker(s.c.Poll)
	defer t.Stop()
	lastTouch := s.c.Now()
	var failing time.Time // when the failure now going on was last logged
	for {
		sctx, cancel := context.WithTimeout(ctx, SyncTimeout)
		err := s.Poll(sctx)
		cancel()
		switch {
		case err != nil && ctx.Err() == nil:
			// Logged when it starts, then once a minute: a store outage
			// must not fill the log twice a second.
			if now := s.c.Now(); failing.IsZero() || now.Sub(failing) >= time.Minute {
				s.c.Logger.Warn("API keys: sync failed; keys created or revoked elsewhere are not in force here until it works", slog.String("error", err.Error()))
				failing = now
			}
		case err == nil && !failing.IsZero():
			s.c.Logger.Info("API keys: in sync again")
			failing = time.Time{}
		}
		if now := s.c.Now(); now.Sub(lastTouch) >= 10*time.Second {
			lastTouch = now
			fctx, cancel := context.WithTimeout(ctx, SyncTimeout)
			err := s.flushUsed(fctx)
			cancel()
			if err != nil && ctx.Err() == nil {
				s.c.Logger.Warn("API keys: last-used times not saved", slog.String("error", err.Error()))
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Poll syncs if the backend's version (Backend.Version, which may answer
// from a cache the backend keeps fresh) is not the Set's, or the Set has
// not loaded yet: on Redis, a poll that finds nothing new sends Redis no
// command.
func (s *Set) Poll(ctx context.Context) error {
	s.mu.RLock()
	ver, ready := s.ver, s.ready
	s.mu.RUnlock()
	if ready {
		v, err := s.c.Backend.Version(ctx)
		if err != nil {
			return fmt.Errorf("apikeys: version: %w", err)
		}
		if v == ver {
			return nil
		}
	}
	return s.Sync(ctx)
}

// Sync brings the Set up to the backend's version. A backend whose
// version went back, or moved with nothing in its change log (a Redis
// restarted without its data, or from an older copy), is loaded whole.
func (s *Set) Sync(ctx context.Context) error {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	s.mu.RLock()
	since, ready := s.ver, s.ready
	s.mu.RUnlock()
	for reloaded := false; ; {
		if !ready {
			recs, ver, err := s.c.Backend.Snapshot(ctx)
			if err != nil {
				return fmt.Errorf("apikeys: load: %w", err)
			}
			s.replace(recs, ver)
			since, ready = ver, true
		}
		ch, ver, ok, err := s.c.Backend.Changes(ctx, since, 1000)
		switch {
		case err != nil:
			return fmt.Errorf("apikeys: changes: %w", err)
		case !ok: // too far behind: reload everything
			ready = false
			continue
		case ver < since || len(ch) == 0 && ver > since:
			if reloaded {
				return fmt.Errorf("apikeys: changes: the backend is at version %d, and its change log has nothing after %d, just after a load", ver, since)
			}
			s.c.Logger.Warn("API keys: the store's version is behind this instance's, or its change log misses changes (a Redis restarted without its data?); loading every key", slog.Int64("store_version", ver), slog.Int64("version", since))
			ready, reloaded = false, true
			continue
		}
		s.apply(ch)
		if len(ch) == 0 {
			return nil
		}
		if since = ch[len(ch)-1].Version; since >= ver {
			return nil
		}
	}
}

// replace makes recs the whole set, at version ver, keeping what each
// kept key's last use was.
func (s *Set) replace(recs []Record, ver int64) {
	bySum := make(map[[sha256.Size]byte]*entry, len(recs))
	byID := make(map[string]*entry, len(recs))
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range recs {
		e := carried(r, s.byID[r.ID])
		bySum[r.Sum], byID[r.ID] = e, e
	}
	s.bySum, s.byID, s.ver, s.ready = bySum, byID, ver, true
}

// carried is the entry of r, with the last use old (r's entry until now,
// or nil) had noted.
func carried(r Record, old *entry) *entry {
	e := &entry{rec: r}
	if old != nil {
		e.used.Store(old.used.Load())
		e.sent = old.sent
	}
	return e
}

// apply puts changes into the set.
func (s *Set) apply(ch []Change) {
	if len(ch) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range ch {
		old := s.byID[c.Record.ID]
		if old != nil {
			delete(s.bySum, old.rec.Sum)
			delete(s.byID, old.rec.ID)
		}
		if !c.Deleted {
			e := carried(c.Record, old)
			s.bySum[c.Record.Sum], s.byID[c.Record.ID] = e, e
		}
		s.ver = max(s.ver, c.Version)
	}
}

// flushUsed sends the last-used times that moved since the last flush.
func (s *Set) flushUsed(ctx context.Context) error {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	used := map[string]int64{}
	var sent []*entry
	s.mu.RLock()
	for id, e := range s.byID {
		if u := e.used.Load(); u > e.sent {
			used[id] = u
			sent = append(sent, e)
		}
	}
	s.mu.RUnlock()
	if len(used) == 0 {
		return nil
	}
	if err := s.c.Backend.Touch(ctx, used); err != nil {
		return err
	}
	for _, e := range sent {
		e.sent = used[e.rec.ID]
	}
	return nil
}

// Key is a stored key as the admin API lists it.
type Key struct {
	Record
	// LastUsed is when the key was last accepted, by any instance, to
	// within 10 s (zero: not yet).
	LastUsed time.Time `json:"last_used,omitzero"`
	// Expired is whether Expires has passed.
	Expired bool `json:"expired"`
}

// ListOptions select a page of keys.
type ListOptions struct {
	Tenant string // only this tenant's keys; "" for all
	After  string // the page starts after this ID
	Limit  int    // at most this many (1..1000; 0 means 100)
}

// List returns a page of keys in ID order and the ID to pass as After
// for the next page ("" at the end).
func (s *Set) List(ctx context.Context, o ListOptions) ([]Key, string, error) {
	limit := o.Limit
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, 1000)
	s.mu.RLock()
	var recs []Record
	for id, e := range s.byID {
		if id > o.After && (o.Tenant == "" || e.rec.Tenant == o.Tenant) {
			recs = append(recs, e.rec)
		}
	}
	s.mu.RUnlock()
	slices.SortFunc(recs, func(a, b Record) int { return cmp.Compare(a.ID, b.ID) })
	next := ""
	if len(recs) > limit {
		recs = recs[:limit]
		next = recs[limit-1].ID
	}
	keys, err := s.withUse(ctx, recs)
	return keys, next, err
}

// entry returns id's entry, or nil.
func (s *Set) entry(id string) *entry {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.byID[id]
}

// Get returns the key with ID id, or false.
func (s *Set) Get(ctx context.Context, id string) (Key, bool, error) {
	e := s.entry(id)
	if e == nil {
		return Key{}, false, nil
	}
	k, err := s.withUse(ctx, []Record{e.rec})
	if err != nil {
		return Key{}, false, err
	}
	return k[0], true, nil
}

// withUse makes keys of recs, with their last use: the latest of the
// backend's and this instance's.
func (s *Set) withUse(ctx context.Context, recs []Record) ([]Key, error) {
	ids := make([]string, len(recs))
	for i, r := range recs {
		ids[i] = r.ID
	}
	used, err := s.c.Backend.LastUsed(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("apikeys: last used: %w", err)
	}
	now := s.c.Now()
	keys := make([]Key, len(recs))
	s.mu.RLock()
	defer s.mu.RUnlock()
	for i, r := range recs {
		u := used[i]
		if e := s.byID[r.ID]; e != nil {
			u = max(u, e.used.Load())
		}
		keys[i] = Key{Record: r, Expired: !r.Expires.IsZero() && !now.Before(r.Expires)}
		if u > 0 {
			keys[i].LastUsed = time.Unix(u, 0).UTC()
		}
	}
	return keys, nil
}

// Errors of the writes.
var (
	// ErrNotFound means no key has the ID.
	ErrNotFound = errors.New("apikeys: no key has this ID")
	// ErrFull means the Set holds MaxKeys keys.
	ErrFull = errors.New("apikeys: the key store is full")
)

// Create generates a key for r's tenant, plan, label and expiry, stores
// its record and returns the key (the only time it is seen) with the
// record. The key is in force here on return and everywhere within two
// polls.
func (s *Set) Create(ctx context.Context, r Record) (string, Record, error) {
	if err := r.Check(); err != nil {
		return "", Record{}, err
	}
	if s.Len() >= s.c.MaxKeys {
		return "", Record{}, fmt.Errorf("%w: %d keys; revoke unused ones or raise the limit", ErrFull, s.c.MaxKeys)
	}
	for range 3 { // a taken ID (64 random bits) is all but impossible
		key, g := Generate()
		r.ID, r.Sum, r.Created = g.ID, g.Sum, s.c.Now().UTC().Truncate(time.Millisecond)
		ok, err := s.c.Backend.Write(ctx, Create, r)
		if err != nil {
			return "", Record{}, err
		}
		if ok {
			return key, r, s.syncAfterWrite(ctx)
		}
	}
	return "", Record{}, errors.New("apikeys: three generated IDs were taken; check the random source")
}

// Update replaces the label and expiry of key id with r's.
func (s *Set) Update(ctx context.Context, id string, label string, expires time.Time) (Record, error) {
	e := s.entry(id)
	if e == nil { // made on another instance since the last poll?
		if err := s.Sync(ctx); err != nil {
			return Record{}, err
		}
		if e = s.entry(id); e == nil {
			return Record{}, ErrNotFound
		}
	}
	r := e.rec
	r.Label, r.Expires = label, expires
	if err := r.checkChange(); err != nil {
		return Record{}, err
	}
	ok, err := s.c.Backend.Write(ctx, Update, r)
	if err != nil {
		return Record{}, err
	}
	if !ok {
		return Record{}, ErrNotFound
	}
	return r, s.syncAfterWrite(ctx)
}

// Revoke deletes key id: it is refused here on return and everywhere
// within two polls.
func (s *Set) Revoke(ctx context.Context, id string) error {
	ok, err := s.c.Backend.Write(ctx, Delete, Record{ID: id})
	if err != nil {
		return err
	}
	if !ok {
		return ErrNotFound
	}
	return s.syncAfterWrite(ctx)
}

// syncAfterWrite loads the write just made, so that this instance applies
// it at once.
func (s *Set) syncAfterWrite(ctx context.Context) error {
	if err := s.Sync(ctx); err != nil {
		s.c.Logger.Warn("API keys: written but not loaded here yet; the next poll loads it", slog.String("error", err.Error()))
	}
	return nil
}
