package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/internal/redistest"
	"github.com/fairgate/fairgate/internal/testcerts"
	"github.com/fairgate/fairgate/store"
)

// testCA writes a CA, a server certificate for 127.0.0.1 and redis.test,
// and a client certificate to dir.
func testCA(t *testing.T, dir string) {
	t.Helper()
	if err := testcerts.Write(dir, "redis"); err != nil {
		t.Fatal(err)
	}
}

// startTLSRedis starts a redis-server that speaks TLS on the port it
// returns (and plain on its own, for the test's readiness check),
// requiring client certificates when authClients.
func startTLSRedis(t *testing.T, dir string, authClients bool) string {
	t.Helper()
	redistest.Need(t)
	port, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	auth := "no"
	if authClients {
		auth = "yes"
	}
	srv, err := redistest.Start("--tls-port", strconv.Itoa(port), "--tls-cert-file", dir+"/server.crt", "--tls-key-file", dir+"/server.key",
		"--tls-ca-cert-file", dir+"/ca.crt", "--tls-auth-clients", auth)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return "127.0.0.1:" + strconv.Itoa(port)
}

// TestTLS: the store reaches a real Redis over TLS with a private CA, a
// client certificate where the server asks for one, a server name, or no
// verification when told; without the CA it fails saying why.
func TestTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	testCA(t, dir)
	open, mtls := startTLSRedis(t, dir, false), startTLSRedis(t, dir, true)
	q := func(kv ...string) string {
		v := url.Values{}
		for i := 0; i+1 < len(kv); i += 2 {
			v.Set(kv[i], kv[i+1])
		}
		return "?" + v.Encode()
	}
	ca, cert, key := dir+"/ca.crt", dir+"/client.crt", dir+"/client.key"
	for _, tc := range []struct {
		name, url, err string
	}{
		{"no CA", "rediss://" + open, "certificate signed by unknown authority"},
		{"private CA", "rediss://" + open + q("tls_ca_file", ca), ""},
		{"skip_verify", "rediss://" + open + q("skip_verify", "true"), ""},
		{"server name", "rediss://" + open + q("tls_ca_file", ca, "tls_server_name", "redis.test"), ""},
		{"wrong server name", "rediss://" + open + q("tls_ca_file", ca, "tls_server_name", "other.test"), "certificate is valid for"},
		{"wrong server name, hostname not verified", "rediss://" + open + q("tls_ca_file", ca, "tls_server_name", "other.test", "skip_hostname_verify", "true"), ""},
		{"hostname not verified, chain still is", "rediss://" + open + q("skip_hostname_verify", "true"), "certificate signed by unknown authority"},
		{"client certificate required, none", "rediss://" + mtls + q("tls_ca_file", ca), "connect to"},
		{"client certificate", "rediss://" + mtls + q("tls_ca_file", ca, "tls_cert_file", cert, "tls_key_file", key), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := New(Config{URL: tc.url})
			if err == nil {
				defer st.Close()
				var res store.Result
				err = st.Take(context.Background(), []store.Check{{Key: "tls", Limit: algo.PerSecond(10), Cost: 1}}, &res)
			}
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("%v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("got %v, want an error containing %q", err, tc.err)
			}
		})
	}
}

// TestTLSRefused: a certificate that does not verify is a setting to fix
// (ErrRefused: the daemon does not start), not an outage to wait out
// (ErrConnect).
func TestTLSRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	testCA(t, dir)
	tlsAddr := startTLSRedis(t, dir, false)
	for _, tc := range []struct{ url, want string }{
		{"rediss://" + tlsAddr, "the server's TLS certificate does not verify: set tls_ca_file"},
		{"rediss://" + tlsAddr + "?tls_ca_file=" + dir + "/ca.crt&tls_server_name=other.test", "the server's TLS certificate does not verify"},
	} {
		_, err := New(Config{URL: tc.url})
		if !errors.Is(err, ErrRefused) || errors.Is(err, ErrConnect) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrRefused saying %q", tc.url, err, tc.want)
		}
	}
}

// TestPasswordFile: the password comes from a file, never the command line.
func TestPasswordFile(t *testing.T) {
	t.Parallel()
	redistest.Need(t)
	srv, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if _, err := redistest.Do(srv.Addr, "CONFIG", "SET", "requirepass", "s3cret-pass"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	good, wrong := filepath.Join(dir, "good"), filepath.Join(dir, "wrong")
	os.WriteFile(good, []byte("s3cret-pass\n"), 0o600)
	os.WriteFile(wrong, []byte("nope\n"), 0o600)
	st, err := New(Config{URL: fmt.Sprintf("redis://%s?password_file=%s", srv.Addr, good)})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	if _, err := New(Config{URL: fmt.Sprintf("redis://%s?password_file=%s", srv.Addr, wrong)}); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Fatalf("a wrong password file: %v, want WRONGPASS", err)
	}
}

// TestUnixSocket: unix:///path reaches a Redis on its socket, with the
// password in the URL (envoyproxy/ratelimit's REDIS_SOCKET_TYPE=unix).
func TestUnixSocket(t *testing.T) {
	t.Parallel()
	redistest.Need(t)
	sock := filepath.Join(t.TempDir(), "redis.sock")
	srv, err := redistest.Start("--unixsocket", sock, "--unixsocketperm", "700", "--requirepass", "pw")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	st, err := New(Config{URL: "unix://:pw@" + sock})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var res store.Result
	if err := st.Take(context.Background(), []store.Check{{Key: "k", Limit: algo.PerSecond(1), Cost: 1}}, &res); err != nil || !res.Allowed {
		t.Fatalf("a decision over the socket: %v %+v", err, res)
	}
}
