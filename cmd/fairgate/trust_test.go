package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestProxyModeListeners: with --upstream the public listener proxies
// /v1/take (an unauthenticated caller gets the proxy's 401, and nothing is
// decided), while the internal listener serves the decision API; a slow
// body is cut at --read-timeout on both, the proxied path included.
func TestProxyModeListeners(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Write([]byte("upstream"))
	}))
	defer up.Close()
	internal := freeAddr(t)
	sv := startServe(t, "--listen", "127.0.0.1:0", "--upstream", up.URL, "--internal-listen", internal, "--read-timeout", "1s")
	take := `{"key":"rl:{t:globex}:all:1m","limit":1,"period_ms":31622400000}`
	if c := statusOf(t, "POST", "http://"+sv.addr+"/v1/take", take, ""); c != 401 {
		t.Errorf("public /v1/take without a credential: %d, want the proxy's 401", c)
	}
	for _, p := range []string{"/metrics", "/readyz", "/dashboard"} {
		if c := statusOf(t, "GET", "http://"+sv.addr+p, "", ""); c != 401 {
			t.Errorf("public %s: %d, want the proxy's 401", p, c)
		}
		if c := statusOf(t, "GET", "http://"+internal+p, "", ""); c != 200 {
			t.Errorf("internal %s: %d, want 200", p, c)
		}
	}
	if c := statusOf(t, "POST", "http://"+internal+"/v1/take", take, ""); c != 200 {
		t.Errorf("internal /v1/take: %d", c)
	}
	if !strings.Contains(sv.logs.String(), `"msg":"internal listener"`) {
		t.Errorf("no log line naming the internal listener:\n%s", sv.logs.String())
	}
	slow := func(addr, path, key string) {
		t.Helper()
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		start := time.Now()
		conn.Write([]byte("POST " + path + " HTTP/1.1\r\nHost: x\r\nX-API-Key: " + key + "\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"key\":"))
		conn.SetReadDeadline(time.Now().Add(15 * time.Second))
		_, err = io.Copy(io.Discard, conn)
		if err != nil {
			t.Errorf("slow body to %s%s: still held after %v: %v", addr, path, time.Since(start), err)
		}
	}
	slow(internal, "/v1/take", "")
	slow(sv.addr, "/v1/users/1", "demo-acme-key")
	slow(sv.addr, "/v1/take", "")
	sv.stop()
}

// TestConfigSizeAndRefusedReloads: a config file over 4 MiB is refused by
// name before it is parsed (today a 50 MB file took 42 s and 4.7 GB), both
// by check-config and by a reload, and every refused reload is counted in
// fairgate_config_reloads_total{result="refused"} (today it never counted).
func TestConfigSizeAndRefusedReloads(t *testing.T) {
	example, path := exampleCopy(t)
	big := filepath.Join(t.TempDir(), "big.yaml")
	os.WriteFile(big, append(append([]byte{}, example...), bytes.Repeat([]byte("# padding\n"), 450_000)...), 0o600)
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"check-config", big}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "over 4194304 bytes") {
		t.Fatalf("check-config of a 4.5 MB file: %d %q", code, errb.String())
	}
	sv := startServe(t, "--listen", "127.0.0.1:0", "--config", path, "--config-poll", "1h")
	refused := func() string {
		resp, err := http.Get("http://" + sv.addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, `fairgate_config_reloads_total{result="refused"}`) {
				return strings.Fields(l)[1]
			}
		}
		return "0"
	}
	for i, content := range [][]byte{[]byte("plans: {free: [{limit: -1}]}\n"), mustRead(t, big)} {
		os.WriteFile(path, content, 0o600)
		syscall.Kill(os.Getpid(), syscall.SIGHUP)
		want := fmt.Sprint(i + 1)
		deadline := time.Now().Add(5 * time.Second)
		for refused() != want {
			if time.Now().After(deadline) {
				t.Fatalf("refused reloads %s, want %s:\n%s", refused(), want, sv.logs.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if !strings.Contains(sv.logs.String(), "over 4194304 bytes") {
		t.Errorf("the oversized reload's log line does not say why:\n%s", sv.logs.String())
	}
	sv.stop()
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
