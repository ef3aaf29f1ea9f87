package server

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/fairgate/fairgate/internal/config"
	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/store/memstore"
)

// discard is a ResponseWriter that keeps nothing, so that a benchmark
// measures the handler, not a recorder.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(p []byte) (int, error) { return len(p), nil }
func (d *discard) WriteHeader(int)             {}

// benchHandler runs body (a format with one %d, the rotating key) through
// path on the memory store: the decision API's cost above net/http.
func benchHandler(b *testing.B, path string, body func(i int) []byte) {
	s, err := New(Config{Limiter: testLimiter(b, memstore.New(memstore.Config{}), time.Second)})
	if err != nil {
		b.Fatal(err)
	}
	bodies := make([][]byte, 10_000)
	for i := range bodies {
		bodies[i] = body(i)
	}
	w := &discard{h: http.Header{}}
	r, _ := http.NewRequest("POST", path, nil)
	rd := bytes.NewReader(nil)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		rd.Reset(bodies[i%len(bodies)])
		r.Body = readCloser{rd}
		clear(w.h)
		s.ServeHTTP(w, r)
		i++
	}
}

type readCloser struct{ *bytes.Reader }

func (readCloser) Close() error { return nil }

// BenchmarkDecisionAPI is /v1/take and /v1/check (three layers) on the
// memory store without the HTTP server: what fairgate adds per decision.
//
//	go test -run '^$' -bench DecisionAPI -benchmem ./internal/server/
func BenchmarkDecisionAPI(b *testing.B) {
	b.Run("take", func(b *testing.B) {
		benchHandler(b, "/v1/take", func(i int) []byte {
			return []byte(`{"key":"k` + strconv.Itoa(i) + `","limit":1000000000,"period_ms":3600000}`)
		})
	})
	b.Run("check", func(b *testing.B) {
		benchHandler(b, "/v1/check", func(i int) []byte {
			return []byte(`{"tenant":"t` + strconv.Itoa(i) + `","route":"GET /v1/search"}`)
		})
	})
}

// BenchmarkProxy is one proxied GET through fairgate's handler (API key,
// decision on the memory store, headers, the reverse proxy) to an upstream
// on loopback: the proxy path's cost and allocations above net/http's
// server side.
//
//	go test -run '^$' -bench Proxy -benchmem ./internal/server/
func BenchmarkProxy(b *testing.B) {
	for _, tc := range []struct{ name, section string }{
		{"limits", ""},
		{"limits+capacity_gate", "upstream_capacity: {floor: 4, ceiling: 1000, initial: 1000}\n"},
	} {
		b.Run(tc.name, func(b *testing.B) { benchmarkProxy(b, tc.section) })
	}
}

func benchmarkProxy(b *testing.B, section string) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"id":1,"name":"ada"}`))
	}))
	defer up.Close()
	u, _ := url.Parse(up.URL)
	cfg, err := config.Parse("bench.yaml", []byte(`default_plan: bench
default_class: read
classes: {read: {share: 1.0}}
plans:
  bench: [{limit: 1000000000, period: 1h}]
`+section))
	if err != nil {
		b.Fatal(err)
	}
	lim, err := limiter.New(limiter.Config{Store: memstore.New(memstore.Config{}), Policy: cfg.Policy})
	if err != nil {
		b.Fatal(err)
	}
	s, err := New(Config{Limiter: lim, Auth: testAuth(b), Upstream: u, Capacity: cfg.UpstreamCapacity})
	if err != nil {
		b.Fatal(err)
	}
	r := httptest.NewRequest("GET", "/v1/users/1", nil)
	r.Header.Set("X-API-Key", "key-acme")
	b.ReportAllocs()
	for b.Loop() {
		w := &discard{h: http.Header{}}
		s.ServeHTTP(w, r.Clone(r.Context()))
	}
}

// BenchmarkScanManyNames: the name scanner on a 64 KiB body of distinct
// names (an attacker's body for the strict reader): its time per name
// stays flat as the names grow (a set past 16 names, not a list).
func BenchmarkScanManyNames(b *testing.B) {
	for _, n := range []int{1000, 7000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			var body bytes.Buffer
			body.WriteByte('{')
			for i := range n {
				if i > 0 {
					body.WriteByte(',')
				}
				fmt.Fprintf(&body, `"%04d":0`, i)
			}
			body.WriteByte('}')
			for b.Loop() {
				if _, ok, err := scanBody(body.Bytes(), nil); !ok || err != nil {
					b.Fatal(ok, err)
				}
			}
		})
	}
}
