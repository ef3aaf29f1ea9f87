package server

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/fairgate/fairgate/internal/config"
	"github.com/fairgate/fairgate/store/memstore"
)

// samples returns, per label set ("k=v,k=v" in label order), a histogram's
// sample count or a counter's value.
func samples(t *testing.T, reg *prometheus.Registry, name string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.Metric {
			var ls []string
			for _, l := range m.Label {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			out[strings.Join(ls, ",")] = value(m)
		}
	}
	return out
}

func value(m *dto.Metric) float64 {
	if h := m.GetHistogram(); h != nil {
		return float64(h.GetSampleCount())
	}
	return m.GetCounter().GetValue()
}

// TestProxyMetrics: proxied requests are timed by route class and status
// class (limited ones included, the upstream's part apart), and /v1/authz
// answers are counted by outcome. No label carries a tenant or a path.
func TestProxyMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, err := New(Config{Limiter: testLimiter(t, memstore.New(memstore.Config{}), time.Second), Auth: testAuth(t), Upstream: upstreamEcho(t), Registerer: reg, ForwardAuth: config.ForwardAuth{Gateway: "caddy"}})
	if err != nil {
		t.Fatal(err)
	}
	key := map[string]string{"X-API-Key": "key-acme"}
	for range 3 {
		if rec := (call{method: "GET", path: "/v1/users/1", headers: key}).do(s); rec.Code != 200 {
			t.Fatalf("proxied: %d %s", rec.Code, rec.Body)
		}
	}
	(call{method: "GET", path: "/v1/users/1"}).do(s) // no credential: 401 before any class
	got := samples(t, reg, "fairgate_proxy_request_duration_seconds")
	if got["class=read,status=2xx"] != 3 || got["class=none,status=4xx"] != 1 {
		t.Errorf("request durations %v, want 3 of read/2xx and 1 of none/4xx", got)
	}
	if up := samples(t, reg, "fairgate_proxy_upstream_duration_seconds"); up["class=read,status=2xx"] != 3 || len(up) != 1 {
		t.Errorf("upstream durations %v, want the 3 that reached it", up)
	}

	in := s.Internal()
	(call{method: "GET", path: "/v1/authz", headers: map[string]string{"X-API-Key": "key-acme", "X-Forwarded-Method": "GET", "X-Forwarded-Uri": "/v1/users/1"}}).do(in)
	(call{method: "GET", path: "/v1/authz", headers: map[string]string{"X-API-Key": "nope", "X-Forwarded-Method": "GET", "X-Forwarded-Uri": "/v1/users/1"}}).do(in)
	if a := samples(t, reg, "fairgate_forward_auth_decisions_total"); a["outcome=allowed"] != 1 || a["outcome=unauthorized"] != 1 {
		t.Errorf("forward-auth decisions %v", a)
	}
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		for _, m := range mf.Metric {
			for _, l := range m.Label {
				if strings.Contains(l.GetValue(), "acme") || strings.Contains(l.GetValue(), "/v1/") {
					t.Errorf("%s has a label %s=%s: tenants and paths are unbounded", mf.GetName(), l.GetName(), l.GetValue())
				}
			}
		}
	}
}
