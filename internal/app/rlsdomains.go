package app

import (
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/fairgate/fairgate/internal/config"
	"github.com/fairgate/fairgate/internal/rls"
	"github.com/fairgate/fairgate/internal/rlsxds"
)

// This file is the Envoy rate limit service's domains: the config file's
// rls section merged with the domains an xDS management server sends.

// mergeDomains is the Envoy service's config: cfg's rls section (its
// settings and domains) with xDS's domains (nil: none yet), each of those
// given the section's fail, algorithm and atomic and, where the section's
// domains name it, its own. A domain both the file and xDS configure is
// refused. xds is not changed: the domains in force are merged again with
// each new file.
func mergeDomains(cfg *config.Config, xds []rls.Domain) (rls.Config, error) {
	ds := slices.Clone(xds)
	cfg.RLSDomainDefaults(ds)
	for _, x := range ds {
		for _, f := range cfg.RLS.Domains {
			if x.Name == f.Name {
				return rls.Config{}, fmt.Errorf("rls domain %q comes both from the config file and from xDS", x.Name)
			}
		}
	}
	c := cfg.RLS
	c.Domains = append(slices.Clip(c.Domains), ds...)
	return c, nil
}

// followXDS receives the Envoy service's domains from the xDS management
// server of the config at start (its address, node and retry take effect
// at the next restart: fixedAtStart). Each update is merged with the file
// in force (mergeDomains) and swapped in with the rest of the graph kept;
// one the file refuses changes nothing.
func (d *daemon) followXDS() {
	x := d.cfg.RLSXDS
	var first sync.Once
	if !d.c.Env.ForceStart {
		d.xdsFirst = make(chan struct{})
	}
	c := &rlsxds.Client{Address: x.Address, NodeID: x.NodeID, Metadata: x.Metadata, Retry: x.Retry, Log: d.log,
		Apply: func(ds []rls.Domain) error {
			if ds == nil {
				ds = []rls.Domain{}
			}
			if err := d.swapXDS(ds); err != nil {
				d.rlsSvc.CountConfigLoad(false)
				return err
			}
			d.rlsSvc.CountConfigLoad(true)
			if d.xdsFirst != nil {
				first.Do(func() { close(d.xdsFirst) })
			}
			return nil
		},
		Refused: func() { d.rlsSvc.CountConfigLoad(false) }}
	d.log.Info("following the xDS management server for rls domains", slog.String("server", x.Address), slog.String("node_id", x.NodeID))
	d.goCheck("xDS client", func() error { return c.Run(d.bg) })
}

// swapXDS puts xDS's domains ds in force with the graph's file, or changes
// nothing and says why.
func (d *daemon) swapXDS(ds []rls.Domain) error {
	d.swapMu.Lock()
	defer d.swapMu.Unlock()
	cur := d.live.Load()
	merged, err := mergeDomains(cur.cfg, ds)
	if err != nil {
		return err
	}
	next := *cur
	next.xds, next.rls = ds, merged
	d.rlsSvc.SetConfig(merged)
	d.live.Store(&next)
	return nil
}
