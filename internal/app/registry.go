package app

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// registry is the daemon's Prometheus registry. Each part of the daemon
// is built once and registers its metrics once (the per-second guard
// under its own prefix; a reload changes parts in place), so a collector
// registered twice is a wiring bug: Register reports it as an error of
// its own, never as a [prometheus.AlreadyRegisteredError], so that the
// library packages that share a collector already registered (limiter,
// quota: see package promshare) refuse it instead, and the daemon does
// not start.
type registry struct{ *prometheus.Registry }

func newRegistry() registry { return registry{prometheus.NewRegistry()} }

// Register registers c, or says which metric a part of the daemon
// registered twice.
func (r registry) Register(c prometheus.Collector) error {
	err := r.Registry.Register(c)
	if are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok {
		return fmt.Errorf("metrics: %s registered twice on the daemon's registry: each part of the daemon registers its metrics once", metricNames(are.NewCollector))
	}
	return err
}

// MustRegister registers cs, panicking on an error (for the daemon's own
// collectors, registered first).
func (r registry) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// fqName reads a metric's name from its Desc's String (Desc has no
// getter for it).
var fqName = regexp.MustCompile(`fqName: "([^"]*)"`)

// metricNames are the names of the metrics c describes.
func metricNames(c prometheus.Collector) string {
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	var names []string
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			names = append(names, m[1])
		}
	}
	return strings.Join(names, ", ")
}

var _ prometheus.Registerer = registry{}
