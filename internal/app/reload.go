package app

import (
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"reflect"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairgate/fairgate/internal/auth"
	"github.com/fairgate/fairgate/internal/config"
	"github.com/fairgate/fairgate/internal/rls"
	"github.com/fairgate/fairgate/policy"
)

// This file is a config reload, as Caddy does it: the whole graph of what
// a config determines is built from the new file and validated before any
// part changes (buildGraph), then swapped in, where nothing can fail
// (swap). A file that does not build changes nothing. The settings that
// only a restart changes are decided in one place, fixedAtStart, and a
// reload that changes one of them says so (restartPending).

// graph is what one config determines that a running daemon puts in
// force: the policy, the credentials and trusted proxies, the Envoy
// service's domains, and the config itself (providers, queue weights,
// upstream capacity, identity headers, forward auth). It is built whole
// and never changed: a reload or an xDS update builds the next one. The
// job queue reads its weights from the graph in force; the other parts
// are handed theirs by swap.
type graph struct {
	cfg    *config.Config
	policy policy.Policy // policyOf(cfg), compiled once to validate it
	authn  *auth.Authenticator
	ip     auth.ClientIP
	// xds is the xDS server's domains as they came (nil: none yet); rls
	// the Envoy service's config, cfg's with them (mergeDomains).
	xds []rls.Domain
	rls rls.Config
}

// buildGraph builds and validates the graph of cfg, the domains of xDS in
// force (prev's; none at start) merged in. It changes no part of the
// daemon: its error, if any, says what in cfg is wrong. The authenticator
// is built last (it may fetch a key set), reusing prev's key set when its
// URL is the same.
func (d *daemon) buildGraph(cfg *config.Config, prev *graph) (*graph, error) {
	if cfg.NoPolicy && d.c.Upstream != "" {
		return nil, errors.New("serve: --upstream needs a policy to decide the proxied requests by: " + cfg.File + " has no plans, classes or routes, only the rls section")
	}
	g := &graph{cfg: cfg, policy: policyOf(cfg), ip: auth.ClientIP{Trusted: cfg.TrustedProxies, Header: cfg.ClientIPHeader}}
	if _, err := policy.Compile(g.policy); err != nil {
		return nil, err
	}
	if d.quotas != nil { // at start quota.New checks them
		if err := d.quotas.CheckProviders(cfg.Providers); err != nil {
			return nil, err
		}
	}
	if _, err := cfg.ForwardAuth.Resolve(); err != nil {
		return nil, err
	}
	var prevAuth *auth.Authenticator
	if prev != nil {
		g.xds, prevAuth = prev.xds, prev.authn
	}
	var err error
	if g.rls, err = mergeDomains(cfg, g.xds); err != nil {
		return nil, err
	}
	cfg.Auth.Logger, cfg.Auth.Previous, cfg.Auth.Stored = d.log, prevAuth, d.keys
	if g.authn, err = auth.New(d.bg, cfg.Auth); err != nil {
		return nil, err
	}
	return g, nil
}

// swap puts g in force in every part that a config reload changes. Every
// part takes what buildGraph validated, so none refuses it: the daemon is
// never left half-way between two configs. Calls in flight finish with
// the parts they started with.
func (d *daemon) swap(g *graph) {
	// Each error below is one buildGraph already had a chance to return.
	// The policy and the credentials change as one step for a request
	// (Server.Swap); the rest reads neither's pair.
	d.h.Swap(func() {
		_ = d.lim.SetPolicy(g.policy)
		_ = d.h.SetIdentity(g.authn, g.ip, g.cfg.UpstreamHeaders, g.cfg.ForwardAuth)
	})
	_ = d.quotas.SetProviders(g.cfg.Providers)
	d.rlsSvc.SetConfig(g.rls)
	d.h.SetNoPolicy(g.cfg.NoPolicy)
	d.h.SetCapacity(g.cfg.UpstreamCapacity)
	d.live.Store(g)
}

// rebuild is the watcher's: it builds the graph of a reloaded config and
// swaps it in, or changes nothing and returns why (the watcher counts it
// refused). The settings it changed that only a restart puts in force
// are logged and set in fairgate_config_restart_pending.
func (d *daemon) rebuild(nc *config.Config) error {
	d.swapMu.Lock()
	defer d.swapMu.Unlock()
	g, err := d.buildGraph(nc, d.live.Load())
	if err != nil {
		return err
	}
	d.swap(g)
	reportRuntime(nc, d.rtSkipped, d.log)
	d.reportRestart(nc)
	d.reloads.WithLabelValues("applied").Inc()
	if nc.HasRLS && nc.RLSXDS.Address == "" {
		d.rlsSvc.CountConfigLoad(true)
	}
	warnDemoKeys(d.log, nc.File, nc.Auth.APIKeys)
	return nil
}

// fixedAtStart are the config's settings a running daemon does not
// change: each is built into a part once, at start. A reload that changes
// one puts the rest of its file in force, and says which wait for a
// restart (restartPending). Every other field of config.Config is put in
// force by swap; TestEveryConfigFieldIsPlaced keeps the two lists whole.
// The flags and environment (listen addresses, the stores, TLS files'
// paths, tokens) are read once and never reloaded; the TLS files' content
// is (package tlsfiles).
var fixedAtStart = []struct {
	field   string // of config.Config
	setting string // its name in the file
	why     string
}{
	{"Headers", "headers", "the rate limit headers' form is built into the HTTP server"},
	{"Queues", "queues", "the job queue is built with its kinds"},
	{"Dependencies", "dependencies", "the dependencies' breakers are built once"},
	{"HasRLS", "rls", "the /json endpoint is served only when the config at start has an rls section"},
	{"RLSXDS", "rls.xds", "the xDS client connects at start"},
	{"Statsd", "statsd", "the statsd sink is opened at start"},
	{"Dashboard", "dashboard", "the dashboard is built at start"},
	{"Instances", "instances", "the limiter sizes its in-process fallback by the instances at start"},
}

// liveFields are config.Config's fields that swap puts in force, or that
// only describe the file (File, RLSSources, RLSFiles).
var liveFields = []string{"File", "Policy", "NoPolicy", "Providers", "QueueWeights", "RLS", "RLSSources", "RLSFiles",
	"Auth", "TrustedProxies", "ClientIPHeader", "ForwardAuth", "UpstreamHeaders", "UpstreamCapacity"}

// restartPending names the fixedAtStart settings whose value in next is
// not the one running (an empty map or list is the same as none).
func restartPending(running, next *config.Config) []string {
	var out []string
	a, b := reflect.ValueOf(*running), reflect.ValueOf(*next)
	for _, f := range fixedAtStart {
		if !sameSetting(a.FieldByName(f.field), b.FieldByName(f.field)) {
			out = append(out, f.setting)
		}
	}
	return out
}

// sameSetting reports whether two values of a setting mean the same: an
// empty map or list is none, and a statsd mogrifier's pattern is its
// source.
func sameSetting(a, b reflect.Value) bool {
	if a.Kind() == reflect.Map || a.Kind() == reflect.Slice {
		return a.Len() == 0 && b.Len() == 0 || reflect.DeepEqual(a.Interface(), b.Interface())
	}
	if s, ok := a.Interface().(config.Statsd); ok {
		return reflect.DeepEqual(statsdForm(s), statsdForm(b.Interface().(config.Statsd)))
	}
	return reflect.DeepEqual(a.Interface(), b.Interface())
}

// statsdForm is s for comparing: each mogrifier's pattern as its source,
// no tags as none.
func statsdForm(s config.Statsd) any {
	type mogrifier struct {
		Pattern, Name string
		Tags          map[string]string
	}
	ms := make([]mogrifier, 0, len(s.Mogrifiers))
	for _, m := range s.Mogrifiers {
		var p string
		if m.Pattern != nil {
			p = m.Pattern.String()
		}
		ms = append(ms, mogrifier{p, m.Name, m.Tags})
	}
	s.Mogrifiers = nil
	if len(s.Tags) == 0 {
		s.Tags = nil
	}
	return struct {
		S config.Statsd
		M []mogrifier
	}{s, ms}
}

// newRestartPending is fairgate_config_restart_pending, every setting
// exported at 0 so that an alert can name them.
func newRestartPending(reg prometheus.Registerer) (*prometheus.GaugeVec, error) {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "fairgate_config_restart_pending",
		Help: "1 for each config setting whose value in the file in force waits for a restart to take effect (headers, queues, dependencies, rls, rls.xds, statsd, dashboard, instances); the log names it at the reload."}, []string{"setting"})
	for _, f := range fixedAtStart {
		g.WithLabelValues(f.setting)
	}
	return g, reg.Register(g)
}

// reportRestart sets fairgate_config_restart_pending for the config nc
// just put in force and, when a setting of it waits for a restart, logs
// which and why.
func (d *daemon) reportRestart(nc *config.Config) {
	pending := restartPending(d.cfg, nc)
	var why []string
	for _, f := range fixedAtStart {
		on := 0.0
		for _, p := range pending {
			if p == f.setting {
				on = 1
				why = append(why, f.setting+": "+f.why)
			}
		}
		d.restartPending.WithLabelValues(f.setting).Set(on)
	}
	if len(pending) > 0 {
		d.log.Warn("config reloaded, but these settings keep their value at start until the next restart", slog.String("file", nc.File), slog.Any("settings", pending), slog.Any("why", why))
	}
}

// watch follows the config file (changes on disk and SIGHUP), putting a
// new one in force only when its whole graph builds (rebuild).
func (d *daemon) watch() {
	w := config.NewWatcher(d.cfg.File, d.c.ConfigPoll, d.raw, d.rebuild, d.log)
	if d.c.Config == "" {
		// A config made from the environment: it stays; its runtime
		// directory is what changes.
		w.Read = func() ([]byte, error) { return d.raw, nil }
	}
	w.Track(d.cfg)
	w.Refused = func() {
		d.reloads.WithLabelValues("refused").Inc()
		if c := d.live.Load().cfg; c.HasRLS && c.RLSXDS.Address == "" {
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
