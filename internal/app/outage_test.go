package app

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/fairgate/fairgate/internal/redistest"
)

// TestOutageSeenWithoutTraffic: with no request coming, a Redis that goes
// away after the daemon connected is reported down by /readyz (the idle
// probe, once in 10 s, then its retries open the store breaker), and back
// up once it
// returns, without a restart. Before, the control store's poll retried
// for ever on the dead connection and held the loop that probes, so the
// store stayed "up" until requests failed.
func TestOutageSeenWithoutTraffic(t *testing.T) {
	redistest.Need(t)
	srv, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	listen := freeAddr(t)
	c, err := ParseServe([]string{"--listen", listen, "--store", "redis://" + srv.Addr + "/0", "--drain", "0"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	runServe(t, c, slog.New(slog.DiscardHandler))
	client := &http.Client{Timeout: 5 * time.Second}
	store := func() string {
		resp, err := client.Get("http://" + listen + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m struct{ Store string }
		json.NewDecoder(resp.Body).Decode(&m)
		return m.Store
	}
	wait := func(want string) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); store() != want; time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("/readyz did not report the store %s within 20 s, with no traffic", want)
			}
		}
	}
	wait("up")
	srv.Kill()
	wait("down")
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	wait("up")
}
