package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/fairgate/fairgate/internal/kubetest"
)

// domainYAML is an envoyproxy/ratelimit file of one domain whose key k is
// limited to n per hour.
func domainYAML(domain string, n int) string {
	return "domain: " + domain + "\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: " + strconv.Itoa(n) + "}\n"
}

// TestEnvoyEnvironmentConfigMap runs serve as envoyproxy/ratelimit is run
// on Kubernetes: its ConfigMap mounted at RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/
// config (RUNTIME_WATCH_ROOT=false, RUNTIME_IGNOREDOTFILES=true) and
// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED=true. While the ConfigMap has no
// domain, the health checks fail (gRPC health, /healthcheck, /readyz) and
// the log and fairgate_rls_runtime_skipped_entries say what was left out
// and why; kubelet's ..data swaps are picked up, each decision made
// meanwhile under one generation's limit (never none); a ConfigMap that is
// emptied fails the health checks again.
func TestEnvoyEnvironmentConfigMap(t *testing.T) {
	root := t.TempDir()
	elsewhere := filepath.Join(root, "elsewhere")
	os.MkdirAll(elsewhere, 0o755)
	mount := filepath.Join(root, "data", "ratelimit", "config")
	v := kubetest.NewVolume(t, mount, map[string]string{".keep": ""})
	if err := os.Symlink(elsewhere, filepath.Join(mount, "shared")); err != nil {
		t.Fatal(err)
	}
	sv, conn, c := serveEnvoyEnv(t, map[string]string{
		"RUNTIME_ROOT": filepath.Join(root, "data"), "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_WATCH_ROOT": "false", "RUNTIME_IGNOREDOTFILES": "true",
		"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": "true", "FAIRGATE_STORE": "memory://", "HOST": "127.0.0.1", "PORT": "0", "FAIRGATE_CONFIG_POLL": "50ms",
	})
	hc := healthpb.NewHealthClient(conn)
	health := func() string {
		var out []string
		r, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, "grpc="+r.Status.String())
		for _, p := range []string{"/healthcheck", "/readyz"} {
			resp, err := http.Get("http://" + sv.addr + p)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			out = append(out, fmt.Sprintf("%s=%d", p, resp.StatusCode))
		}
		return strings.Join(out, " ")
	}
	const unhealthy, healthy = "grpc=NOT_SERVING /healthcheck=500 /readyz=503", "grpc=SERVING /healthcheck=200 /readyz=200"
	if got := health(); got != unhealthy {
		t.Fatalf("with no domain loaded: %s, want %s", got, unhealthy)
	}
	logs := sv.logs.String()
	for _, want := range []string{"yielded no domain", filepath.Join(mount, "shared") + ": a symbolic link to a directory", filepath.Join(mount, ".keep") + ": its name starts with a dot"} {
		if !strings.Contains(logs, want) {
			t.Errorf("the log does not say %q:\n%s", want, logs)
		}
	}
	resp, err := http.Get("http://" + sv.addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`fairgate_rls_runtime_skipped_entries{reason="link_to_directory"} 1`, `fairgate_rls_runtime_skipped_entries{reason="dot_file"} 1`} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics has no %s", want)
		}
	}

	limitOf := func(value string) (uint32, error) {
		r, err := c.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "a", Descriptors: []*commonpb.RateLimitDescriptor{
			{Entries: []*commonpb.RateLimitDescriptor_Entry{{Key: "k", Value: value}}},
		}})
		if err != nil {
			return 0, err
		}
		return r.Statuses[0].GetCurrentLimit().GetRequestsPerUnit(), nil
	}
	eventually := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 10s: %s", what, sv.logs.String())
			}
		}
	}
	v.Write(map[string]string{"a.yaml": domainYAML("a", 5)})
	eventually("the first domain", func() bool { n, _ := limitOf("x"); return n == 5 })
	if got := health(); got != healthy {
		t.Fatalf("with a domain loaded: %s, want %s", got, healthy)
	}

	// Swaps under load: every decision is under 5 or 7 per hour, the
	// limit of one generation or the other, never under none.
	var stop atomic.Bool
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				n, err := limitOf(fmt.Sprint(w, "-", i))
				key := fmt.Sprint(n)
				if err != nil {
					key = err.Error()
				}
				mu.Lock()
				seen[key]++
				mu.Unlock()
			}
		})
	}
	for i := range 10 {
		n := 7 - 2*(i%2)
		v.Write(map[string]string{"a.yaml": domainYAML("a", n), "b.yaml": domainYAML("b", n)})
		eventually(fmt.Sprintf("swap %d", i), func() bool { got, _ := limitOf("probe"); return got == uint32(n) })
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("decisions by limit: %v", seen)
	for k, n := range seen {
		if k != "5" && k != "7" {
			t.Errorf("%d decisions under %q, want each under 5 or 7 per hour: %v", n, k, seen)
		}
	}

	// The ConfigMap emptied: unhealthy again, as that service is.
	v.Write(map[string]string{})
	eventually("the emptied ConfigMap", func() bool { return health() == unhealthy })
}
