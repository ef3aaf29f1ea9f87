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

// BinaryEnv names the environment variable that gives the fairgate binary
// the tests run, built already: `make test` builds it once before the
// suite, so that the packages that run it (cmd/fairgate, internal/dropin,
// examples/clients) do not each build it at the same time, which on an
// empty build cache cost minutes of the suite's ten.
const BinaryEnv = "FAIRGATE_TEST_BINARY"

// FairgateBinary returns the path of a fairgate binary built as `make
// image` builds it (static, -trimpath, its commit stamped): the one
// BinaryEnv names, else one it builds once per test binary, with the
// flags every package uses, so that they share the build cache. Under
// -short it skips t ([External]).
func FairgateBinary(t testing.TB) string {
	t.Helper()
	External(t, "a fairgate binary it builds")
	if p := os.Getenv(BinaryEnv); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s=%s: %v (make test builds it; unset it to build one here)", BinaryEnv, p, err)
		}
		return p
	}
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
