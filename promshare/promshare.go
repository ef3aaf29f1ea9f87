package promshare

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Register registers *c with reg. When reg already holds an identical
// collector of the same type, *c is pointed at it and Register returns
// nil: the caller then updates the shared collector. Any other error of
// reg.Register is returned as it came. A nil reg registers nothing.
func Register[C prometheus.Collector](reg prometheus.Registerer, c *C) error {
	if reg == nil {
		return nil
	}
	err := reg.Register(*c)
	if err == nil {
		return nil
	}
	if are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok {
		if existing, ok := are.ExistingCollector.(C); ok {
			*c = existing
			return nil
		}
	}
	return err
}

// Collect calls each with every series c holds now, written out: for a
// package that reads its own collectors' values (to show them as typed
// numbers) rather than have a program scrape them by name.
func Collect(c prometheus.Collector, each func(*dto.Metric)) {
	ch := make(chan prometheus.Metric)
	go func() { c.Collect(ch); close(ch) }()
	for pm := range ch {
		var m dto.Metric
		if pm.Write(&m) == nil {
			each(&m)
		}
	}
}

// Label is m's value of the label name ("" without one).
func Label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
