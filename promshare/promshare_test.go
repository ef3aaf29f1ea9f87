package promshare_test

import (
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/fairgate/fairgate/promshare"
)

func newCounter(help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: "fairgate_test_total", Help: help})
}

func TestRegisterSharesAnIdenticalCollector(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, b := newCounter("Tests."), newCounter("Tests.")
	if err := promshare.Register(reg, &a); err != nil {
		t.Fatal(err)
	}
	if err := promshare.Register(reg, &b); err != nil {
		t.Fatalf("second identical collector: %v, want it shared", err)
	}
	a.Inc()
	b.Inc()
	if got := testutil.ToFloat64(a); got != 2 || a != b {
		t.Errorf("shared counter = %v (same collector: %v), want 2 and the same", got, a == b)
	}
}

func TestRegisterRefusesAConflict(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, b := newCounter("Tests."), newCounter("Other help.")
	if err := promshare.Register(reg, &a); err != nil {
		t.Fatal(err)
	}
	orig := b
	if err := promshare.Register(reg, &b); err == nil || b != orig {
		t.Errorf("a collector of the same name and other help: err %v, replaced %v; want an error and no replacement", err, b != orig)
	}
}

// refusing reports a duplicate as a plain error, as the daemon's
// registerer does.
type refusing struct{ *prometheus.Registry }

var errTwice = errors.New("registered twice")

func (r refusing) Register(c prometheus.Collector) error {
	err := r.Registry.Register(c)
	if _, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok {
		return errTwice
	}
	return err
}

func TestRegisterSharesOnlyWhatTheRegistererAllows(t *testing.T) {
	reg := refusing{prometheus.NewRegistry()}
	a, b := newCounter("Tests."), newCounter("Tests.")
	if err := promshare.Register(reg, &a); err != nil {
		t.Fatal(err)
	}
	if err := promshare.Register(reg, &b); !errors.Is(err, errTwice) {
		t.Errorf("duplicate on a refusing registerer: %v, want %v", err, errTwice)
	}
}

func TestRegisterNil(t *testing.T) {
	c := newCounter("Tests.")
	if err := promshare.Register(nil, &c); err != nil {
		t.Errorf("nil registerer: %v", err)
	}
}

func TestCollect(t *testing.T) {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fairgate_test_total", Help: "Tests."}, []string{"outcome"})
	v.WithLabelValues("ok").Add(3)
	v.WithLabelValues("failed").Inc()
	got := map[string]float64{}
	promshare.Collect(v, func(m *dto.Metric) { got[promshare.Label(m, "outcome")] += m.GetCounter().GetValue() })
	if len(got) != 2 || got["ok"] != 3 || got["failed"] != 1 {
		t.Errorf("collected %v, want ok 3 and failed 1", got)
	}
}
