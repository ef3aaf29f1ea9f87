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
