package rlsxds_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	confpb "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/fairgate/fairgate/internal/rls"
	"github.com/fairgate/fairgate/internal/rlsxds"
	"github.com/fairgate/fairgate/internal/rlsxds/xdstest"
	"github.com/fairgate/fairgate/internal/testwait"
)

func startMgmt(t *testing.T) *xdstest.Server {
	t.Helper()
	m, err := xdstest.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	return m
}

func set(t *testing.T, m *xdstest.Server, version string, cfgs ...*confpb.RateLimitConfig) {
	t.Helper()
	if err := m.Set("node-1", version, cfgs...); err != nil {
		t.Fatal(err)
	}
}

// waitNACK waits for a refusal whose reason contains want.
func waitNACK(t *testing.T, m *xdstest.Server, want string) {
	t.Helper()
	testwait.EventuallyNil(t, 30*time.Second, "a NACK containing "+strconv.Quote(want), func() error {
		if !strings.Contains(m.NACKs(), want) {
			return fmt.Errorf("the NACKs: %q", m.NACKs())
		}
		return nil
	})
}

// TestFollow: updates from a go-control-plane management server are
// applied and acknowledged; an invalid one is refused with its reason
// (NACK) and nothing changes; after the server restarts, the client comes
// back and receives again.
func TestFollow(t *testing.T) {
	m := startMgmt(t)
	quota := xdstest.Domain("a", 5, confpb.RateLimitUnit_MINUTE)
	quota.Descriptors[0].QuotaMode = true
	set(t, m, "1", quota)
	got := make(chan []rls.Domain, 10)
	c := &rlsxds.Client{Address: m.Addr, NodeID: "node-1", Retry: 100 * time.Millisecond, Apply: func(ds []rls.Domain) error { got <- ds; return nil }}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go c.Run(ctx)
	next := func(what string) []rls.Domain {
		t.Helper()
		select {
		case ds := <-got:
			return ds
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no update within 10s", what)
			return nil
		}
	}
	ds := next("the first snapshot")
	if len(ds) != 1 || ds[0].Name != "a" || ds[0].Descriptors[0].Limit.RequestsPerUnit != 5 || !ds[0].Descriptors[0].QuotaMode {
		t.Fatalf("first: %+v", ds)
	}
	set(t, m, "2", xdstest.Domain("a", 7, confpb.RateLimitUnit_MINUTE), xdstest.Domain("b", 1, confpb.RateLimitUnit_HOUR))
	// The server sends resources in no set order.
	if ds := next("an update"); len(ds) != 2 || limitOf(ds, "a") != 7 || limitOf(ds, "b") != 1 {
		t.Fatalf("update: %+v", ds)
	}
	set(t, m, "3", xdstest.Domain("a", 7, confpb.RateLimitUnit_UNKNOWN))
	waitNACK(t, m, `unit "UNKNOWN"`)
	select {
	case ds := <-got:
		t.Fatalf("an invalid update was applied: %+v", ds)
	default:
	}
	// The server goes away and comes back on the same address.
	addr := m.Addr
	m.Stop()
	set(t, m, "4", xdstest.Domain("c", 2, confpb.RateLimitUnit_SECOND))
	if err := m.Restart(addr); err != nil {
		t.Fatal(err)
	}
	if ds := next("after the server's restart"); len(ds) != 1 || ds[0].Name != "c" {
		t.Fatalf("after restart: %+v", ds)
	}
}

// limitOf is the first rule's limit of the named domain, 0 if absent.
func limitOf(ds []rls.Domain, name string) uint32 {
	for _, d := range ds {
		if d.Name == name {
			return d.Descriptors[0].Limit.RequestsPerUnit
		}
	}
	return 0
}

// TestDomainsChecked: the same domain in two resources is refused.
func TestDomainsChecked(t *testing.T) {
	m := startMgmt(t)
	set(t, m, "1", xdstest.Domain("a", 5, confpb.RateLimitUnit_MINUTE), &confpb.RateLimitConfig{Name: "again", Domain: "a"})
	c := &rlsxds.Client{Address: m.Addr, NodeID: "node-1", Apply: func([]rls.Domain) error { t.Error("applied"); return nil }}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go c.Run(ctx)
	waitNACK(t, m, `domain "a" is also in xds:`) // in whichever order the server sends them
}

// TestRefusalBacksOff: against go-control-plane's snapshot cache, which
// answers a refusal at once with the same invalid update, the client
// waits before each refusal after the first (50 ms, then doubling to 400
// ms), so that five take 750 ms at least, not a moment for thousands, and
// logs the same refusal once; a valid update is then applied.
func TestRefusalBacksOff(t *testing.T) {
	m := startMgmt(t)
	set(t, m, "1", xdstest.Domain("a", 7, confpb.RateLimitUnit_UNKNOWN))
	got := make(chan []rls.Domain, 10)
	var logs strings.Builder
	var mu sync.Mutex
	c := &rlsxds.Client{Address: m.Addr, NodeID: "node-1", NACKBackoff: 50 * time.Millisecond, MaxNACKBackoff: 400 * time.Millisecond,
		Apply: func(ds []rls.Domain) error { got <- ds; return nil },
		Log:   slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	go c.Run(ctx)
	// A lower bound on the time is exact on any machine: a slow one only
	// takes longer.
	testwait.Eventually(t, 30*time.Second, "5 refusals of the same update", func() bool {
		return strings.Count(m.NACKs(), `unit "UNKNOWN"`) >= 5
	})
	if took := time.Since(start); took < 750*time.Millisecond {
		t.Errorf("5 refusals of the same update in %v, want 750 ms at least (50+100+200+400 ms of waits)", took)
	}
	mu.Lock()
	if n := strings.Count(logs.String(), "update refused"); n != 1 {
		t.Errorf("the same refusal logged %d times, want once: %s", n, logs.String())
	}
	mu.Unlock()
	set(t, m, "2", xdstest.Domain("a", 7, confpb.RateLimitUnit_MINUTE))
	select {
	case ds := <-got:
		if len(ds) != 1 || limitOf(ds, "a") != 7 {
			t.Fatalf("the valid update: %+v", ds)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the valid update after the refusals was not applied")
	}
}

// lockedWriter serializes writes to w.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
