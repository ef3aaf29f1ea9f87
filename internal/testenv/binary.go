package testenv

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
)

// FairgateBinary builds cmd/fairgate once per test binary, as `make image`
// builds it (static, -trimpath, its commit stamped), and returns its path.
// Every package's tests build it with the same flags, so that they share
// the build cache. Under -short it skips t ([External]).
func FairgateBinary(t testing.TB) string {
	t.Helper()
	External(t, "a fairgate binary it builds")
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "fairgate-bin-")
		if err != nil {
			buildErr = err
			return
		}
		builtBin = filepath.Join(dir, "fairgate")
		cmd := exec.Command("go", "build", "-buildvcs=true", "-trimpath", "-o", builtBin, "github.com/fairgate/fairgate/cmd/fairgate")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtBin
}

// SyncBuffer is a bytes.Buffer safe for concurrent use: a process's or a
// server's log written by one goroutine and read by the test.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *SyncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }
