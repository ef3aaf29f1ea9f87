// Package testenv sorts tests into the suite's two tiers. The fast tier,
// `go test -short ./...` (make test-short), starts no external program:
// no redis-server or redis-cli, nginx, Caddy, Chromium, podman or
// systemd-analyze, and no fairgate binary built for the test; it runs in
// under a minute. The full tier, `make test`, runs every test.
//
// A test that starts an external program calls [External] first, so that
// under -short it skips, naming what it would have started; tests that use
// Redis do so through internal/redistest, which calls it for them. A test
// that spends seconds of real time by design (a load run, a failover)
// calls [Slow]. Every other test runs in both tiers.
package testenv

import (
	"flag"
	"testing"
)

// Short reports whether the test binary runs with -short. Unlike
// testing.Short it may be called before the flags are parsed (it is false
// until then) and outside a test binary (false).
func Short() bool {
	f := flag.Lookup("test.short")
	return f != nil && f.Value.String() == "true"
}

// External skips t under -short, saying that it starts what (an external
// program: "redis-server", "nginx", "the fairgate binary"); without -short
// it does nothing. The test itself still says, by failing or skipping as
// it always did, when the program is missing.
func External(t testing.TB, what string) {
	t.Helper()
	if Short() {
		t.Skipf("-short: skipped, it starts %s (the full suite, make test, runs it)", what)
	}
}

// Slow skips t under -short, saying why it is slow (what it spends real
// time on: "a 3 s load run"); without -short it does nothing. Only tests
// that spend seconds by design call it; a test slow by accident is made
// fast instead.
func Slow(t testing.TB, why string) {
	t.Helper()
	if Short() {
		t.Skipf("-short: skipped, it spends %s (the full suite, make test, runs it)", why)
	}
}
