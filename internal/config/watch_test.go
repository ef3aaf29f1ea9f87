package config

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

type applied struct {
	mu   sync.Mutex
	got  []*Config
	logs bytes.Buffer
}

func (a *applied) apply(c *Config) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.got = append(a.got, c)
	return nil
}

func (a *applied) n() int { a.mu.Lock(); defer a.mu.Unlock(); return len(a.got) }

func TestWatcherReloadsGoodFilesOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "fairgate.yaml")
		good := with(5, "    - {limit: 240, period: 1m, burst: 30}")
		if err := os.WriteFile(path, []byte(strings.Join(base, "\n")), 0o600); err != nil {
			t.Fatal(err)
		}
		var a applied
		w := NewWatcher(path, time.Second, []byte(strings.Join(base, "\n")), a.apply, slog.New(slog.NewTextHandler(&a.logs, nil)))
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go w.Run(ctx)

		time.Sleep(1500 * time.Millisecond)
		synctest.Wait()
		if a.n() != 0 {
			t.Fatalf("applied %d configs with the file unchanged", a.n())
		}

		// A good change on disk is applied within one interval.
		os.WriteFile(path, good, 0o600)
		time.Sleep(time.Second)
		synctest.Wait()
		if a.n() != 1 || a.got[0].Policy.Plans["free"].Rules[0].Limit.Limit != 240 {
			t.Fatalf("after a good change: %d applied", a.n())
		}

		// A bad change is logged with its problem and never applied.
		os.WriteFile(path, with(5, "    - {limit: 0, period: 1m}"), 0o600)
		time.Sleep(time.Second)
		synctest.Wait()
		if a.n() != 1 {
			t.Fatalf("a bad file was applied")
		}
		if !strings.Contains(a.logs.String(), "plans.free[0].limit: limit 0 is outside") {
			t.Errorf("log does not name the problem:\n%s", a.logs.String())
		}

		// Reload (SIGHUP) re-reads at once; fixed again, it applies.
		os.WriteFile(path, good, 0o600)
		if err := w.Reload(); err != nil {
			t.Fatal(err)
		}
		if a.n() != 2 {
			t.Errorf("Reload applied %d, want 2 in all", a.n())
		}
	})
}
