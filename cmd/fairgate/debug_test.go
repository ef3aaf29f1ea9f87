package main

import (
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// debugGet sends GET url, with a bearer token unless tok is empty, and
// returns the status and body.
func debugGet(t *testing.T, url, tok string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// TestEnvoyDebugListener: envoyproxy/ratelimit's DEBUG_PORT opens the
// debug listener (on that service's default host, 0.0.0.0, with a warning
// saying so): /rlconfig shows the runtime directory's domain in that
// service's format and follows a change of its file; /stats and Go's
// profiler answer there, and the profiler is not on the main listener.
func TestEnvoyDebugListener(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ratelimit", "config")
	writeDomain(t, dir, "a.yaml", "a", 2)
	_, debugPort, _ := net.SplitHostPort(freeAddr(t))
	sv, _, _ := serveEnvoyEnv(t, map[string]string{
		"RUNTIME_ROOT": filepath.Dir(filepath.Dir(dir)), "RUNTIME_SUBDIRECTORY": "ratelimit",
		"HOST": "127.0.0.1", "PORT": "0", "DEBUG_PORT": debugPort, "FAIRGATE_CONFIG_POLL": "100ms",
	})
	debug := "http://127.0.0.1:" + debugPort
	if logs := sv.logs.String(); !strings.Contains(logs, `"level":"WARN","msg":"the debug listener (the rate limit config, metrics and Go's profiler) is reachable from the network`) || !strings.Contains(logs, `"listen":"[::]:`+debugPort+`"`) && !strings.Contains(logs, `"listen":"0.0.0.0:`+debugPort+`"`) {
		t.Errorf("DEBUG_PORT alone: want the listener on every interface, port %s, and a warning: %s", debugPort, logs)
	}
	const was = "a.k: unit=HOUR requests_per_unit=2, shadow_mode: false, quota_mode: false\n"
	if code, body := debugGet(t, debug+"/rlconfig", ""); code != 200 || body != was {
		t.Fatalf("/rlconfig: %d %q, want %q", code, body, was)
	}
	writeDomain(t, dir, "a.yaml", "a", 5)
	const now = "a.k: unit=HOUR requests_per_unit=5, shadow_mode: false, quota_mode: false\n"
	for deadline := time.Now().Add(10 * time.Second); ; {
		_, body := debugGet(t, debug+"/rlconfig", "")
		if body == now {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/rlconfig after the file changed: %q, want %q", body, now)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code, body := debugGet(t, debug+"/stats", ""); code != 200 || !strings.Contains(body, "fairgate_config_reloads_total") || !strings.Contains(body, `fairgate_connections_open{listener="debug"}`) {
		t.Errorf("/stats: %d %.300s", code, body)
	}
	if code, body := debugGet(t, debug+"/", ""); code != 200 || !strings.Contains(body, "/rlconfig: ") || !strings.Contains(body, "/debug/pprof/: ") {
		t.Errorf("/: %d %q", code, body)
	}
	if code, body := debugGet(t, debug+"/debug/pprof/", ""); code != 200 || !strings.Contains(body, "goroutine") {
		t.Errorf("/debug/pprof/ on the debug listener: %d %.200q", code, body)
	}
	if code, body := debugGet(t, debug+"/debug/pprof/goroutine?debug=1", ""); code != 200 || !strings.Contains(body, "goroutine profile:") {
		t.Errorf("/debug/pprof/goroutine on the debug listener: %d %.200q", code, body)
	}
	for _, p := range []string{"/debug/pprof/", "/debug/pprof/goroutine?debug=1", "/debug/pprof/cmdline", "/rlconfig", "/stats"} {
		if code, _ := debugGet(t, "http://"+sv.addr+p, ""); code != http.StatusNotFound {
			t.Errorf("%s on the main listener: %d, want 404", p, code)
		}
	}
}

// TestDebugListenerToken: --debug-listen with a port alone is on
// loopback; with an internal token every path of the debug listener needs
// it, profiler and config too.
func TestDebugListenerToken(t *testing.T) {
	const tok = "debug-token-0123456789"
	t.Setenv("FAIRGATE_INTERNAL_TOKEN", tok)
	_, port, _ := net.SplitHostPort(freeAddr(t))
	sv := startServe(t, "--listen", "127.0.0.1:0", "--debug-listen", ":"+port)
	t.Cleanup(sv.stop)
	if logs := sv.logs.String(); !strings.Contains(logs, `"msg":"debug listener","listen":"127.0.0.1:`+port+`"`) || strings.Contains(logs, "reachable from the network") {
		t.Errorf("--debug-listen :%s: want it on 127.0.0.1 without a warning: %s", port, logs)
	}
	debug := "http://127.0.0.1:" + port
	for _, p := range []string{"/", "/rlconfig", "/stats", "/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/goroutine"} {
		if code, _ := debugGet(t, debug+p, ""); code != http.StatusUnauthorized {
			t.Errorf("%s without the token: %d, want 401", p, code)
		}
		if code, _ := debugGet(t, debug+p, "wrong-token-0123456789"); code != http.StatusUnauthorized {
			t.Errorf("%s with a wrong token: %d, want 401", p, code)
		}
		if code, _ := debugGet(t, debug+p, tok); code != http.StatusOK {
			t.Errorf("%s with the token: %d, want 200", p, code)
		}
	}
}
