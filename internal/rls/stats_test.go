package rls_test

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairgate/fairgate/internal/config"
	"github.com/fairgate/fairgate/internal/rls"
	"github.com/fairgate/fairgate/internal/statsd"
	"github.com/fairgate/fairgate/store/memstore"
)

// TestStats: envoyproxy/ratelimit's per-rule statistics, with its counts
// (test/integration's testBasicBaseConfig: 25 hits on 20 per minute are
// 20 within the limit, 4 of them near it, and 5 over), named by the rule
// (request values only where detailed_metric asks), as Prometheus
// counters and as statsd counters under its names.
func TestStats(t *testing.T) {
	var c rls.Config
	for _, f := range []string{"another.yaml", "e2e.yaml"} {
		ds, err := config.ParseRLSFile("testdata/reference/" + f)
		if err != nil {
			t.Fatal(err)
		}
		c.Domains = append(c.Domains, ds...)
	}
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	sink, err := statsd.New(statsd.Config{Address: udp.LocalAddr().String(), Protocol: "udp", Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	svc, err := rls.New(c, testGuard(t, memstore.New(memstore.Config{})), nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	svc.SetStatsSink(sink)
	client := serveService(t, svc)
	for range 25 {
		ask(t, client, "another", 1, desc("key2=v"))
	}
	for range 3 {
		ask(t, client, "rl", 1, desc("unspec=unspecified_value"))
	}
	hits := func(key, stat string) float64 { return hitsOf(t, reg, key, stat) }
	for _, w := range []struct {
		key, stat string
		n         float64
	}{
		{"key2", "total_hits", 25}, {"key2", "within_limit", 20}, {"key2", "near_limit", 4}, {"key2", "over_limit", 5},
		{"unspec_unspecified_value", "total_hits", 3}, {"unspec_unspecified_value", "over_limit", 1},
	} {
		if got := hits(w.key, w.stat); got != w.n {
			t.Errorf("%s %s: %v, want %v", w.key, w.stat, got, w.n)
		}
	}
	sink.Flush()
	buf := make([]byte, 2048)
	udp.SetReadDeadline(time.Now().Add(5 * time.Second))
	var lines []string
	for !strings.Contains(strings.Join(lines, "\n"), "ratelimit.service.rate_limit.another.key2.over_limit:5|c\n") {
		n, _, err := udp.ReadFrom(buf)
		if err != nil {
			t.Fatalf("statsd got %q, want ratelimit.service.rate_limit.another.key2.over_limit:5|c among them: %v", lines, err)
		}
		lines = append(lines, strings.Split(string(buf[:n]), "\n")...)
	}
	sink.Close()
}

// hitsOf is the fairgate_rls_rate_limit_hits_total count of a key.
func hitsOf(t *testing.T, reg *prometheus.Registry, key, stat string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "fairgate_rls_rate_limit_hits_total" {
			continue
		}
		for _, m := range mf.Metric {
			l := map[string]string{}
			for _, p := range m.Label {
				l[p.GetName()] = p.GetValue()
			}
			if l["key"] == key && l["stat"] == stat {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
