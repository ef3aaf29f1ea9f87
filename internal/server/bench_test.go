package server

import (
	"bytes"
	"net/http"
	"strconv"
	"testing"
	"time"

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
