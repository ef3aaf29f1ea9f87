package app

import (
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/fairgate/fairgate/internal/rls"
	"github.com/fairgate/fairgate/internal/rlsxds"
)

// checkRLS reports a domain both the file and xDS configure. Nil
// arguments are the ones in force.
func (d *daemon) checkRLS(file, xds []rls.Domain) error {
	d.rlsMu.Lock()
	defer d.rlsMu.Unlock()
	if file == nil {
		file = d.rlsFile.Domains
	}
	if xds == nil {
		xds = d.rlsXDS
	}
	for _, x := range xds {
		for _, f := range file {
			if x.Name == f.Name {
				return fmt.Errorf("rls domain %q comes both from the config file and from xDS", x.Name)
			}
		}
	}
	return nil
}

// setRLS puts the Envoy service's domains in force: the file's (nil: the
// ones in force) and xDS's (nil: the ones in force).
func (d *daemon) setRLS(file *rls.Config, xds []rls.Domain) error {
	if err := d.checkRLS(domainsOf(file), xds); err != nil {
		return err
	}
	d.rlsMu.Lock()
	defer d.rlsMu.Unlock()
	if file != nil {
		d.rlsFile = *file
	}
	if xds != nil {
		d.rlsXDS = xds
	}
	c := d.rlsFile
	c.Domains = append(slices.Clip(c.Domains), d.rlsXDS...)
	d.rlsSvc.SetConfig(c)
	return nil
}

// domainsOf is c's domains, nil for a nil c.
func domainsOf(c *rls.Config) []rls.Domain {
	if c == nil {
		return nil
	}
	return c.Domains
}

// followXDS receives the Envoy service's domains from the xDS management
// server of the config, with the rls section's defaults and domains'
// own settings (those of the config at start: the xDS address and these
// take effect at the next restart).
func (d *daemon) followXDS() {
	x, cfg := d.cfg.RLSXDS, d.cfg
	var first sync.Once
	if !d.c.Env.ForceStart {
		d.xdsFirst = make(chan struct{})
	}
	c := &rlsxds.Client{Address: x.Address, NodeID: x.NodeID, Metadata: x.Metadata, Retry: x.Retry, Log: d.log,
		Apply: func(ds []rls.Domain) error {
			cfg.RLSDomainDefaults(ds)
			if ds == nil {
				ds = []rls.Domain{}
			}
			if err := d.setRLS(nil, ds); err != nil {
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
