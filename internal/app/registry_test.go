package app

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/quota"
	"github.com/fairgate/fairgate/store/memstore"
)

// TestRegistryRefusesDuplicates: on a plain registry a second limiter or
// quota set shares the first one's metrics (the library's rule), but on
// the daemon's registry a part registered twice is a wiring bug, and its
// constructor says which metric.
func TestRegistryRefusesDuplicates(t *testing.T) {
	pol := policy.Policy{
		DefaultPlan: "free", DefaultClass: "api",
		Plans:   map[string]policy.Plan{"free": {Rules: []policy.Rule{{Name: "rate", Limit: algo.PerMinute(10)}}}},
		Classes: map[string]policy.Class{"api": {}},
	}
	newLimiter := func(reg prometheus.Registerer) error {
		_, err := limiter.New(limiter.Config{Store: memstore.New(memstore.Config{}), Policy: pol, Registerer: reg})
		return err
	}
	newQuotas := func(reg prometheus.Registerer) error {
		_, err := quota.New(quota.Config{Store: memstore.New(memstore.Config{}), Registerer: reg})
		return err
	}
	for name, build := range map[string]func(prometheus.Registerer) error{"limiter": newLimiter, "quota": newQuotas} {
		shared := prometheus.NewRegistry()
		if err := build(shared); err != nil {
			t.Fatal(err)
		}
		if err := build(shared); err != nil {
			t.Errorf("%s: a second one on a plain registry: %v, want the metrics shared", name, err)
		}
		daemon := newRegistry()
		if err := build(daemon); err != nil {
			t.Fatal(err)
		}
		if err := build(daemon); err == nil || !strings.Contains(err.Error(), "registered twice on the daemon's registry") || !strings.Contains(err.Error(), "fairgate_") {
			t.Errorf("%s: a second one on the daemon's registry: %v, want refused naming the metric", name, err)
		}
	}
}
