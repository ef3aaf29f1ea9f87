package config

import (
	"context"
	"crypto/sha256"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"
)

// Watcher reloads a config file when its content changes on disk (looked
// at every interval, which also catches editors that replace the file and
// Kubernetes ConfigMap symlink swaps) and when Reload is called (on
// SIGHUP). A file that fails validation is logged and changes nothing: the
// running config stays.
type Watcher struct {
	path  string
	every time.Duration
	apply func(*Config) error
	log   *slog.Logger
	// Refused, if not nil, is called for every reload that changed
	// nothing: a file that could not be read, or did not validate, or that
	// apply refused. Set it before Run.
	Refused func()

	// Read, if not nil, reads the config in place of the file at path
	// (a config made from the environment). Set it before Run.
	Read func() ([]byte, error)

	mu     sync.Mutex
	last   [sha256.Size]byte // of the content last applied or refused
	cur    *Config           // the config in force, for its rls sources
	lastFP [sha256.Size]byte // of its rls sources when last looked at
}

// Track tells the watcher the config in force, whose rls files and
// directories it then watches too: a file added, changed or removed there
// reloads the config.
func (w *Watcher) Track(c *Config) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.cur, w.lastFP = c, c.LoadedFingerprint()
}

// NewWatcher returns a watcher of path that passes every valid new content
// to apply. current is the content already in force.
func NewWatcher(path string, every time.Duration, current []byte, apply func(*Config) error, log *slog.Logger) *Watcher {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if every <= 0 {
		every = time.Second
	}
	return &Watcher{path: path, every: every, apply: apply, log: log, last: sha256.Sum256(current)}
}

func (w *Watcher) refused() {
	if w.Refused != nil {
		w.Refused()
	}
}

// Run looks at the file every interval until ctx ends.
func (w *Watcher) Run(ctx context.Context) error {
	t := time.NewTicker(w.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			w.check(false)
		}
	}
}

// Reload reads the file now, applying it even if its content is the same,
// and returns what stopped it, if anything (also logged).
func (w *Watcher) Reload() error { return w.check(true) }

func (w *Watcher) check(force bool) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	read := w.Read
	if read == nil {
		read = func() ([]byte, error) { return ReadFile(w.path) }
	}
	data, err := read()
	if err != nil {
		w.log.Error("config reload failed; keeping the running config", slog.String("file", w.path), slog.String("error", err.Error()))
		w.refused()
		return err
	}
	sum, fp := sha256.Sum256(data), Fingerprint(w.cur)
	if sum == w.last && fp == w.lastFP && !force {
		return nil
	}
	w.last, w.lastFP = sum, fp
	c, err := Parse(w.path, data)
	if err == nil {
		err = w.apply(c)
	}
	if err == nil {
		// What c was built from, not what is there now: a change that
		// landed since c was read is then seen at the next look.
		w.cur, w.lastFP = c, c.LoadedFingerprint()
	}
	if err != nil {
		w.log.Error("config reload refused; keeping the running config", slog.String("file", w.path), slog.String("error", err.Error()))
		w.refused()
		// What the refused file took to parse goes back to the system now,
		// not at the garbage collector's leisure.
		debug.FreeOSMemory()
		return err
	}
	w.log.Info("config reloaded", slog.String("file", w.path))
	return nil
}
