package apikeys_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fairgate/fairgate/internal/apikeys"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
func (l *lockedBuffer) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// TestRunLogsOutageOnce: a store that does not answer is logged when the
// failure starts (not at every poll), and its recovery once. In virtual
// time (testing/synctest): the polls fail for 100 ms however loaded the
// machine.
func TestRunLogsOutageOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var down atomic.Bool
		down.Store(true)
		mem := apikeys.NewMemory()
		be := apikeys.Deferred(func() (apikeys.Backend, error) {
			if down.Load() {
				return nil, errors.New("store unreachable")
			}
			return mem, nil
		})
		var logs lockedBuffer
		s, _ := apikeys.New(apikeys.Config{Backend: be, Poll: 2 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { s.Run(ctx); close(done) }()
		time.Sleep(100 * time.Millisecond) // about 50 failed polls
		down.Store(false)
		for !strings.Contains(logs.String(), "in sync again") {
			time.Sleep(5 * time.Millisecond)
		}
		cancel()
		<-done
		if n := strings.Count(logs.String(), "sync failed"); n != 1 {
			t.Errorf("the outage was logged %d times, want once:\n%s", n, logs.String())
		}
		if !s.Ready() {
			t.Error("not loaded after the store came back")
		}
	})
}

// TestPollReloadsAStoreThatLostItsData: a backend whose version went back
// below the Set's (a Redis restarted without its data) is loaded whole:
// the keys it lost are refused, and the keys written to it since are
// accepted, though their versions are ones the Set has seen before.
func TestPollReloadsAStoreThatLostItsData(t *testing.T) {
	ctx := context.Background()
	var cur atomic.Pointer[apikeys.Backend]
	swap := func() apikeys.Backend { b := apikeys.NewMemory(); cur.Store(&b); return b }
	swap()
	be := apikeys.Deferred(func() (apikeys.Backend, error) { return *cur.Load(), nil })
	writer, _ := apikeys.New(apikeys.Config{Backend: be})
	reader, _ := apikeys.New(apikeys.Config{Backend: be})
	var lost []string
	for range 3 {
		key, _, err := writer.Create(ctx, apikeys.Record{Tenant: "acme"})
		if err != nil {
			t.Fatal(err)
		}
		lost = append(lost, key)
	}
	if err := reader.Poll(ctx); err != nil || reader.Len() != 3 {
		t.Fatalf("first poll: %d keys, %v; want 3", reader.Len(), err)
	}
	swap() // the data is gone: version 0
	if err := reader.Poll(ctx); err != nil || reader.Len() != 0 {
		t.Fatalf("poll of a store that lost its data: %d keys, %v; want none", reader.Len(), err)
	}
	fresh, _, err := writer.Create(ctx, apikeys.Record{Tenant: "acme"}) // version 1 again
	if err != nil {
		t.Fatal(err)
	}
	if err := reader.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := reader.Lookup(apikeys.Sum(fresh)); err != nil {
		t.Errorf("a key written after the loss: %v, want accepted", err)
	}
	for _, k := range lost {
		if _, err := reader.Lookup(apikeys.Sum(k)); err != apikeys.ErrUnknown {
			t.Errorf("a key the store lost: %v, want ErrUnknown", err)
		}
	}
}
