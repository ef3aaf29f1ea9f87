package limiter

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/store"
	"github.com/fairgate/fairgate/store/memstore"
	"github.com/fairgate/fairgate/store/storetest"
)

// garbledStore answers every take with a protocol error, as a store whose
// script and parser are out of step would.
type garbledStore struct{ storetest.Down }

func (garbledStore) Take(context.Context, []store.Check, *store.Result) error {
	return fmt.Errorf("%w: script replied 3 values, want 8", store.ErrProtocol)
}
func (garbledStore) Close() error { return nil }

// TestProtocolErrorIsLoud: a reply of the wrong shape is never taken for an
// outage in silence: it is logged as an error and counted in
// fairgate_store_protocol_errors_total, and the decision follows the fail
// mode (issue 19 §5: today it was wrapped as ErrUnavailable, failing open
// unseen).
func TestProtocolErrorIsLoud(t *testing.T) {
	var buf strings.Builder
	reg := prometheus.NewRegistry()
	l, err := New(Config{Store: garbledStore{}, Policy: testPolicy(), Timeout: -1, Registerer: reg, Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
	if err != nil {
		t.Fatal(err)
	}
	open, err := l.Decide(context.Background(), policy.Request{Tenant: "acme", Class: "read"})
	if err != nil || open.Reason != ReasonDegradedOpen {
		t.Fatalf("fail-open class: %+v %v", open, err)
	}
	closed, err := l.Decide(context.Background(), policy.Request{Tenant: "acme", Class: "write"})
	if err != nil || closed.Reason != ReasonUnavailable {
		t.Fatalf("fail-closed class: %+v %v", closed, err)
	}
	if n := counted(t, reg, "fairgate_store_protocol_errors_total"); n < 1 {
		t.Errorf("protocol errors counted %v, want at least 1", n)
	}
	if !strings.Contains(buf.String(), `"level":"ERROR","msg":"store protocol error`) {
		t.Errorf("no error log line:\n%s", buf.String())
	}
}

// TestLocalStoreHasNoDeadline: the library's default sets no per-call
// deadline on an in-process store (a timer per decision is pure cost
// there), and 100 ms on any other.
func TestLocalStoreHasNoDeadline(t *testing.T) {
	for _, c := range []struct {
		st   store.Store
		want time.Duration
	}{
		{memstore.New(memstore.Config{}), -1},
		{garbledStore{}, 100 * time.Millisecond},
	} {
		l, err := New(Config{Store: c.st, Policy: testPolicy()})
		if err != nil {
			t.Fatal(err)
		}
		if got := l.guard.Timeout(); got != c.want {
			t.Errorf("%T: deadline %v, want %v", c.st, got, c.want)
		}
	}
}

// counted is the value of the counter name in reg.
func counted(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			n := 0.0
			for _, m := range mf.GetMetric() {
				n += m.GetCounter().GetValue()
			}
			return n
		}
	}
	return 0
}
