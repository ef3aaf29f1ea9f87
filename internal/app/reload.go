package app

import (
	"errors"
	"maps"
	"os"
	"os/signal"
	"reflect"
	"syscall"

	"github.com/fairgate/fairgate/internal/auth"
	"github.com/fairgate/fairgate/internal/config"
)

// watch follows the config file (changes on disk and SIGHUP), applying a
// new one only when every part takes it.
func (d *daemon) watch() {
	w := config.NewWatcher(d.cfg.File, d.c.ConfigPoll, d.raw, d.apply, d.log)
	if d.c.Config == "" {
		// A config made from the environment: it stays; its runtime
		// directory is what changes.
		w.Read = func() ([]byte, error) { return d.raw, nil }
	}
	w.Track(d.cfg)
	w.Refused = func() {
		d.reloads.WithLabelValues("refused").Inc()
		if d.cfg.HasRLS && d.cfg.RLSXDS.Address == "" {
			d.rlsSvc.CountConfigLoad(false) // the runtime directory's or file's domains refused
		}
	}
	d.reload = w.Reload
	d.goCheck("config watcher", func() error { return w.Run(d.bg) })
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	d.wg.Go(func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-d.bg.Done():
				return
			case <-hup:
				w.Reload()
			}
		}
	})
}

// apply puts a reloaded config in force, or changes nothing and returns
// why (the watcher counts it refused).
func (d *daemon) apply(nc *config.Config) error {
	nc.Auth.Logger, nc.Auth.Previous, nc.Auth.Stored = d.log, d.authn, d.keys
	na, err := auth.New(d.bg, nc.Auth)
	if err == nil {
		err = d.quotas.CheckProviders(nc.Providers)
	}
	if err == nil {
		err = d.checkRLS(nc.RLS.Domains, nil)
	}
	if err == nil {
		_, err = nc.ForwardAuth.Resolve()
	}
	if err == nil && nc.NoPolicy && d.c.Upstream != "" {
		err = errors.New("the proxy needs a policy: the new file has no plans, classes or routes")
	}
	if err == nil {
		err = d.lim.SetPolicy(policyOf(nc))
	}
	if err != nil {
		return err
	}
	// Checked above, so this cannot fail half-way.
	if err := d.quotas.SetProviders(nc.Providers); err != nil {
		return err
	}
	if err := d.setRLS(&nc.RLS, nil); err != nil {
		return err
	}
	reportRuntime(nc, d.rtSkipped, d.log)
	d.weights.Store(&nc.QueueWeights)
	if !maps.Equal(nc.Queues, d.cfg.Queues) || !reflect.DeepEqual(nc.Dependencies, d.cfg.Dependencies) {
		d.log.Warn("queue kinds and dependencies take effect at the next restart")
	}
	d.h.SetNoPolicy(nc.NoPolicy)
	d.h.SetCapacity(nc.UpstreamCapacity)
	// Checked above: it cannot be refused now.
	_ = d.h.SetIdentity(na, auth.ClientIP{Trusted: nc.TrustedProxies, Header: nc.ClientIPHeader}, nc.UpstreamHeaders, nc.ForwardAuth)
	d.authn = na
	d.reloads.WithLabelValues("applied").Inc()
	if nc.HasRLS && nc.RLSXDS.Address == "" {
		d.rlsSvc.CountConfigLoad(true)
	}
	warnDemoKeys(d.log, nc.File, nc.Auth.APIKeys)
	return nil
}
