// Package backendtest checks that an apikeys.Backend keeps records, logs
// changes and answers a Set as the package says: the same tests for the
// in-process backend and for Redis.
package backendtest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fairgate/fairgate/internal/apikeys"
)

// Run runs the suite; fresh returns an empty backend for each test, and
// fresh2, if not nil, a second client of the same backend (a second
// instance).
func Run(t *testing.T, fresh func(t *testing.T) (apikeys.Backend, apikeys.Backend)) {
	t.Run("Writes", func(t *testing.T) { writes(t, fresh) })
	t.Run("ChangeLog", func(t *testing.T) { changeLog(t, fresh) })
	t.Run("TwoInstances", func(t *testing.T) { twoInstances(t, fresh) })
	t.Run("LastUsed", func(t *testing.T) { lastUsed(t, fresh) })
}

func record(i int) apikeys.Record {
	_, r := apikeys.Generate()
	r.Tenant, r.Label = fmt.Sprintf("t%d", i), "label"
	r.Created = time.Unix(1_700_000_000, 0).UTC()
	return r
}

func writes(t *testing.T, fresh func(t *testing.T) (apikeys.Backend, apikeys.Backend)) {
	b, _ := fresh(t)
	ctx := context.Background()
	r := record(1)
	steps := []struct {
		op   apikeys.Op
		want bool
	}{
		{apikeys.Update, false}, // no such ID
		{apikeys.Delete, false},
		{apikeys.Create, true},
		{apikeys.Create, false}, // the ID is taken
		{apikeys.Update, true},
		{apikeys.Delete, true},
		{apikeys.Delete, false},
	}
	for i, s := range steps {
		if ok, err := b.Write(ctx, s.op, r); err != nil || ok != s.want {
			t.Fatalf("step %d: %s = %v, %v; want %v", i, s.op, ok, err, s.want)
		}
	}
	recs, ver, err := b.Snapshot(ctx)
	if err != nil || len(recs) != 0 || ver != 3 {
		t.Fatalf("Snapshot = %d records at version %d, %v; want none at 3 (three writes done)", len(recs), ver, err)
	}
	if v, err := b.Version(ctx); err != nil || v != 3 {
		t.Fatalf("Version = %d, %v; want 3", v, err)
	}
}

func changeLog(t *testing.T, fresh func(t *testing.T) (apikeys.Backend, apikeys.Backend)) {
	b, _ := fresh(t)
	ctx := context.Background()
	a, c := record(1), record(2)
	mustWrite(t, b, apikeys.Create, a)
	mustWrite(t, b, apikeys.Create, c)
	a.Label = "changed"
	mustWrite(t, b, apikeys.Update, a)
	mustWrite(t, b, apikeys.Delete, c)
	ch, ver, ok, err := b.Changes(ctx, 1, 10)
	if err != nil || !ok || ver != 4 {
		t.Fatalf("Changes(1) = ver %d ok %v err %v", ver, ok, err)
	}
	// The log keeps each ID's last change: a at 3 (changed), c at 4 (gone).
	if len(ch) != 2 || ch[0].Record.ID != a.ID || ch[0].Version != 3 || ch[0].Record.Label != "changed" || ch[0].Record.Sum != a.Sum ||
		ch[1].Record.ID != c.ID || !ch[1].Deleted || ch[1].Version != 4 {
		t.Fatalf("Changes(1) = %+v", ch)
	}
	if ch, _, _, _ := b.Changes(ctx, 1, 1); len(ch) != 1 || ch[0].Version != 3 {
		t.Fatalf("Changes(1, max 1) = %+v", ch)
	}
	if ch, _, ok, _ := b.Changes(ctx, 4, 10); len(ch) != 0 || !ok {
		t.Fatalf("Changes(4) = %+v, %v; want none", ch, ok)
	}
}

func mustWrite(t *testing.T, b apikeys.Backend, op apikeys.Op, r apikeys.Record) {
	t.Helper()
	if ok, err := b.Write(context.Background(), op, r); err != nil || !ok {
		t.Fatalf("%s %s = %v, %v", op, r.ID, ok, err)
	}
}

// twoInstances: a key made through one Set is accepted by another after
// its sync (or poll), and refused there after it is revoked.
func twoInstances(t *testing.T, fresh func(t *testing.T) (apikeys.Backend, apikeys.Backend)) {
	b1, b2 := fresh(t)
	ctx := context.Background()
	s1, _ := apikeys.New(apikeys.Config{Backend: b1})
	s2, _ := apikeys.New(apikeys.Config{Backend: b2})
	for _, s := range []*apikeys.Set{s1, s2} {
		if err := s.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	key, r, err := s1.Create(ctx, apikeys.Record{Tenant: "acme", Plan: "pro", Label: "ci"})
	if err != nil {
		t.Fatal(err)
	}
	sum := apikeys.Sum(key)
	if got, err := s1.Lookup(sum); err != nil || got.Tenant != "acme" || got.Plan != "pro" {
		t.Fatalf("the creating instance: Lookup = %+v, %v", got, err)
	}
	if _, err := s2.Lookup(sum); err != apikeys.ErrUnknown {
		t.Fatalf("the other instance before its sync: %v, want ErrUnknown", err)
	}
	// A poll sees the version move (at once on the in-process backend;
	// on Redis once the cached version's invalidation has come).
	for start := time.Now(); ; time.Sleep(time.Millisecond) {
		if err := s2.Poll(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := s2.Lookup(sum); err == nil || time.Since(start) > 2*time.Second {
			break
		}
	}
	if got, err := s2.Lookup(sum); err != nil || got.ID != r.ID {
		t.Fatalf("the other instance after its poll: %+v, %v", got, err)
	}
	if err := s2.Revoke(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	if err := s1.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s1.Lookup(sum); err != apikeys.ErrUnknown {
		t.Fatalf("revoked on the other instance: %v, want ErrUnknown", err)
	}
	if err := s1.Revoke(ctx, r.ID); err != apikeys.ErrNotFound {
		t.Fatalf("revoking twice: %v, want ErrNotFound", err)
	}
}

func lastUsed(t *testing.T, fresh func(t *testing.T) (apikeys.Backend, apikeys.Backend)) {
	b, _ := fresh(t)
	ctx := context.Background()
	r := record(1)
	mustWrite(t, b, apikeys.Create, r)
	gone := record(2).ID
	if err := b.Touch(ctx, map[string]int64{r.ID: 200, gone: 300}); err != nil {
		t.Fatal(err)
	}
	if err := b.Touch(ctx, map[string]int64{r.ID: 100}); err != nil { // an older one loses
		t.Fatal(err)
	}
	got, err := b.LastUsed(ctx, []string{r.ID, gone})
	if err != nil || got[0] != 200 || got[1] != 0 {
		t.Fatalf("LastUsed = %v, %v; want [200 0] (a revoked or unknown ID is not kept)", got, err)
	}
}
