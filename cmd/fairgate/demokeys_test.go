package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fairgate/fairgate/internal/testwait"
)

const demoWarn = `"level":"WARN","msg":"the config accepts a published demo API key`

// TestDemoKeysWarnAtEveryStart: a start whose config accepts a published
// demo key (the embedded example, or a file holding one) logs a WARN that
// names the tenants, every time, and so does a reload that brings one in;
// the image's and chart's starting config (examples/fairgate.minimal.yaml)
// logs none.
func TestDemoKeysWarnAtEveryStart(t *testing.T) {
	_, example := exampleCopy(t)
	for _, args := range [][]string{nil, {"--config", example}, {"--config", example}} {
		sv := startServe(t, append([]string{"--listen", "127.0.0.1:0"}, args...)...)
		sv.stop()
		if logs := sv.logs.String(); strings.Count(logs, demoWarn) != 1 || !strings.Contains(logs, `"tenants":["acme","globex"]`) {
			t.Errorf("serve %v: want one WARN about the demo keys naming acme and globex:\n%s", args, logs)
		}
	}

	minimal, err := os.ReadFile("../../examples/fairgate.minimal.yaml")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "fairgate.yaml")
	os.WriteFile(path, minimal, 0o600)
	sv := startServe(t, "--listen", "127.0.0.1:0", "--config", path, "--config-poll", "1h")
	if strings.Contains(sv.logs.String(), demoWarn) {
		t.Errorf("the minimal config warned about demo keys:\n%s", sv.logs.String())
	}
	// A reload that adds the demo key of acme.
	withKey := string(minimal) + "\nauth:\n  api_keys:\n    - {sha256: a2fb8545fcd457204e9fee11be92013aa3240b1b146fe262ba608fdfc159041c, tenant: acme}\n"
	os.WriteFile(path, []byte(withKey), 0o600)
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	testwait.EventuallyNil(t, 30*time.Second, "a WARN after a reload that adds a demo key", func() error {
		if !strings.Contains(sv.logs.String(), demoWarn) {
			return fmt.Errorf("the logs:\n%s", sv.logs.String())
		}
		return nil
	})
	sv.stop()
}
