package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServeRefusesUnusedFlags: a flag given where it does nothing stops
// `fairgate serve` with a line naming it (the whole table is
// internal/app's TestServeFlagModes); --per-second-store and
// --rls-max-calls, which depend on the config file, are refused without
// an rls section or --grpc-listen and taken with either.
func TestServeRefusesUnusedFlags(t *testing.T) {
	example, _ := exampleCopy(t)
	start, end := bytes.Index(example, []byte("\nrls:\n")), bytes.Index(example, []byte("\n# The live dashboard"))
	if start < 0 || end < start {
		t.Fatal("the example config has no rls section to take out")
	}
	noRLS := filepath.Join(t.TempDir(), "no-rls.yaml")
	if err := os.WriteFile(noRLS, append(append([]byte{}, example[:start]...), example[end:]...), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"serve", "--listen", "127.0.0.1:0", "--upstream-timeout", "5s"}, 2, "--upstream-timeout does nothing here"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--grpc-client-ca-file", "/ca.pem"}, 2, "--grpc-client-ca-file does nothing here"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--config", noRLS, "--per-second-store", "redis://127.0.0.1:1"}, 1, "--per-second-store (FAIRGATE_PER_SECOND_STORE) does nothing here"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--config", noRLS, "--rls-max-calls", "64"}, 1, "--rls-max-calls (FAIRGATE_RLS_MAX_CALLS) does nothing here"},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), c.args, &out, &errb)
		if code != c.code || !strings.Contains(errb.String(), c.msg) || strings.Count(strings.TrimSpace(errb.String()), "\n") > 0 {
			t.Errorf("run(%q) = %d, %q; want %d with one line saying %q", c.args, code, errb.String(), c.code, c.msg)
		}
	}
	// With an rls section (the embedded example's), or --grpc-listen, the
	// per-second store is the Envoy service's: taken.
	sv := startServe(t, "--listen", "127.0.0.1:0", "--per-second-store", "redis://127.0.0.1:1")
	sv.stop()
	sv = startServe(t, "--listen", "127.0.0.1:0", "--config", noRLS, "--grpc-listen", freeAddr(t), "--per-second-store", "redis://127.0.0.1:1", "--rls-max-calls", "64")
	sv.stop()
}
