package app

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairgate/fairgate/internal/config"
)

// runtimeSkippedReasons are the reason label's values, all exported at 0
// so that an alert can name them.
var runtimeSkippedReasons = []string{config.SkipDotFile, config.SkipDirLink, config.SkipDangling, config.SkipNotRegular, config.SkipUnreadable}

// newRuntimeSkipped is fairgate_rls_runtime_skipped_entries.
func newRuntimeSkipped(reg prometheus.Registerer) (*prometheus.GaugeVec, error) {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "fairgate_rls_runtime_skipped_entries",
		Help: "Entries of the rls runtime directories (RUNTIME_ROOT) that the config in force did not load, by reason: dot_file, link_to_directory, dangling_link, not_regular, unreadable. The log names each one."}, []string{"reason"})
	for _, r := range runtimeSkippedReasons {
		g.WithLabelValues(r)
	}
	return g, reg.Register(g)
}

// reportRuntime logs and counts what the runtime directories of c left
// out: a WARN naming each skipped entry with why, and an ERROR for a
// directory that yielded no domain (Envoy's every descriptor is then
// answered OK).
func reportRuntime(c *config.Config, g *prometheus.GaugeVec, log *slog.Logger) {
	n := map[string]int{}
	for _, s := range c.RLSSources {
		var skipped []string
		for _, k := range s.Skipped {
			n[k.Reason]++
			skipped = append(skipped, k.String())
		}
		attrs := []any{slog.String("dir", s.Dir), slog.Int("domains", s.Domains), slog.Any("skipped", skipped)}
		if s.Generation != "" {
			attrs = append(attrs, slog.String("generation", s.Generation))
		}
		switch {
		case s.Domains == 0:
			log.Error("the rls runtime directory yielded no domain: every descriptor of its domains is answered OK (set HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED=true to fail the health checks meanwhile)", attrs...)
		case len(skipped) > 0:
			log.Warn("rls runtime directory entries skipped", attrs...)
		}
	}
	if g != nil {
		for _, r := range runtimeSkippedReasons {
			g.WithLabelValues(r).Set(float64(n[r]))
		}
	}
}
