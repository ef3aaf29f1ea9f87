package app

import (
	"maps"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairgate/fairgate/breaker"
	"github.com/fairgate/fairgate/fairq"
	"github.com/fairgate/fairgate/internal/config"
	"github.com/fairgate/fairgate/internal/server"
	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/store"
)

// backpressure builds the dependencies' breakers (the proxied upstream
// always has one) and the fair job queue: on Redis Streams when the store
// is Redis, in memory otherwise. Dispatch weights are weights() (the
// config in force's, so that a reload changes them) by the tenant's plan.
// The queue depths by kind are read as fairgate_queue_depth reads them.
func backpressure(cfg *config.Config, c ServeConfig, st store.Store, lazy *lazyRedis, lim *limiter.Limiter, weights func() map[string]int, reg prometheus.Registerer) (*breaker.Set, fairq.Queue, map[string]*queueDepth, error) {
	deps := maps.Clone(cfg.Dependencies)
	if _, ok := deps[server.UpstreamDependency]; !ok && c.Upstream != "" {
		deps[server.UpstreamDependency] = breaker.Settings{}
	}
	breakers, err := breaker.New(deps, reg)
	if err != nil {
		return nil, nil, nil, err
	}
	weigh := func(tenant string) int {
		if w, ok := weights()[lim.Snapshot().Standing(tenant, "", time.Now()).Plan]; ok {
			return w
		}
		return 1
	}
	// A tenant may hold at most TenantQueueShare of a kind's refuse depth
	// scaled by its weight against the heaviest plan's, so that no one
	// tenant fills a queue the others need.
	share := func(tenant string) float64 {
		heaviest := 1
		for _, w := range weights() {
			heaviest = max(heaviest, w)
		}
		return TenantQueueShare * float64(weigh(tenant)) / float64(heaviest)
	}
	var q fairq.Queue
	if lazy != nil {
		if err := cfg.Queues.Check(); err != nil {
			return nil, nil, nil, err
		}
		lazy.kinds, lazy.weigh, lazy.share = cfg.Queues, weigh, share
		q = lazyQueue{lazy}
	} else {
		q, err = fairq.NewMemory(fairq.MemoryConfig{Kinds: cfg.Queues, Weight: weigh, Share: share})
	}
	if err != nil {
		return nil, nil, nil, err
	}
	depths := map[string]*queueDepth{}
	for _, kind := range slices.Sorted(maps.Keys(cfg.Queues)) {
		depths[kind] = &queueDepth{q: q, kind: kind, now: time.Now}
		err := reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "fairgate_queue_depth", Help: "Unfinished jobs (queued, waiting to retry or running) by kind, read at most every 5 s.",
			ConstLabels: prometheus.Labels{"kind": kind},
		}, depths[kind].value))
		if err != nil {
			return nil, nil, nil, err
		}
	}
	return breakers, q, depths, nil
}

// TenantQueueShare is the share of a job kind's refuse depth a tenant on
// the heaviest plan may hold; a tenant of weight w holds at most
// TenantQueueShare × w / (the heaviest weight) of it.
const TenantQueueShare = 0.5
