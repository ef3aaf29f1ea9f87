package app

import (
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fairgate/fairgate/store/memstore"
	"github.com/fairgate/fairgate/store/redisstore"
)

// Tests stop `fairgate serve` at once; the drain test asks for its own.
func init() { os.Setenv("FAIRGATE_DRAIN", "0") }

func TestOpenStore(t *testing.T) {
	st, err := OpenStore("memory://?max_keys=10&shards=2")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := st.(*memstore.Store); !ok {
		t.Fatalf("memory:// opened %T", st)
	}
	for url, want := range map[string]string{
		"memory://?colour=red":    `unknown option "colour"`,
		"memory://?max_keys=lots": "not a positive integer",
		"redis-cluster://nohost":  "want host:port",
		"ftp://example":           `unknown scheme "ftp"`,
		"redis://127.0.0.1:1/0":   "connect to",
	} {
		if _, err := OpenStore(url); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("OpenStore(%q) = %v, want error containing %q", url, err, want)
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
	c, err = ParseServe([]string{"--listen", ":1", "--store-timeout", "1s"}, io.Discard)
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
