package app

import (
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fairgate/fairgate/store/memstore"
	"github.com/fairgate/fairgate/store/redisstore"
)

// Tests stop `fairgate serve` at once; the drain test asks for its own.
func init() { os.Setenv("FAIRGATE_DRAIN", "0") }

// TestOpenBackend: memory:// is in-process (no deadline, no shared
// control); a Redis URL is shared and connected later, so a server that is
// down does not stop the start; bad URLs are refused by name.
func TestOpenBackend(t *testing.T) {
	be, err := OpenBackend("memory://?max_keys=10&shards=2", 50*time.Millisecond, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := be.Store.(*memstore.Store); !ok || be.Timeout != -1 || be.Control != nil {
		t.Fatalf("memory:// opened %T, timeout %v, control %v", be.Store, be.Timeout, be.Control)
	}
	be, err = OpenBackend("redis://127.0.0.1:1/0", 50*time.Millisecond, slog.New(slog.DiscardHandler))
	if err != nil || be.Timeout != 50*time.Millisecond || be.Control == nil || be.lazy == nil {
		t.Fatalf("redis:// = %+v, %v; want a shared backend connected later", be, err)
	}
	be.Store.Close()
	for url, want := range map[string]string{
		"memory://?colour=red":    `unknown option "colour"`,
		"memory://?max_keys=lots": "not a positive integer",
		"redis-cluster://nohost":  "want host:port",
		"ftp://example":           `unknown scheme "ftp"`,
	} {
		if _, err := OpenBackend(url, time.Second, nil); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("OpenBackend(%q) = %v, want error containing %q", url, err, want)
		}
	}
}

func TestParseServeEnvironment(t *testing.T) {
	t.Setenv("FAIRGATE_LISTEN", "127.0.0.1:9999")
	t.Setenv("FAIRGATE_STORE", "memory://?max_keys=5")
	t.Setenv("FAIRGATE_STORE_TIMEOUT", "20ms")
	c, err := ParseServe(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != "127.0.0.1:9999" || c.Store != "memory://?max_keys=5" || c.StoreTimeout != 20*time.Millisecond {
		t.Errorf("from the environment: %+v", c)
	}
	c, err = ParseServe([]string{"--listen", ":1", "--store", "redis://127.0.0.1:9", "--store-timeout", "1s"}, io.Discard)
	if err != nil || c.Listen != ":1" || c.StoreTimeout != time.Second {
		t.Errorf("flags over the environment: %+v %v", c, err)
	}
}

func TestStoreURLRedacted(t *testing.T) {
	for _, u := range []string{"redis://user:hunter2@h:1", "redis-cluster://:hunter2@a:1,b:2", "rediss://u:hunter2@h:1/2"} {
		if got := redisstore.RedactURL(u); strings.Contains(got, "hunter2") {
			t.Errorf("RedactURL(%q) = %q keeps the password", u, got)
		}
	}
}

// TestEnvoyEnvironmentFlags: envoyproxy/ratelimit's environment gives the
// defaults of serve's flags (store, listeners, gRPC TLS, store timeout, log
// level); a flag or FAIRGATE_* variable wins.
func TestEnvoyEnvironmentFlags(t *testing.T) {
	for k, v := range map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "r:6379", "REDIS_TIMEOUT": "80ms", "RUNTIME_ROOT": t.TempDir(),
		"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "/c.pem", "GRPC_SERVER_TLS_KEY": "/k.pem", "GRPC_CLIENT_TLS_CACERT": "/ca.pem", "LOG_LEVEL": "debug"} {
		t.Setenv(k, v)
	}
	c, err := ParseServe(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Store != "redis://r:6379" || c.StoreTimeout != 80*time.Millisecond || c.GRPCListen != "0.0.0.0:8081" || c.Listen != "0.0.0.0:8080" || c.ConfigData == nil {
		t.Errorf("%+v", c)
	}
	if c.GRPCTLS != (TLSFiles{Cert: "/c.pem", Key: "/k.pem", ClientCA: "/ca.pem"}) || c.Env.LogLevel != "debug" {
		t.Errorf("gRPC TLS %+v, log level %q", c.GRPCTLS, c.Env.LogLevel)
	}
	c, err = ParseServe([]string{"--store", "memory://", "--grpc-listen", "127.0.0.1:9"}, io.Discard)
	if err != nil || c.Store != "memory://" || c.GRPCListen != "127.0.0.1:9" {
		t.Errorf("flags do not win: %+v %v", c, err)
	}
}
