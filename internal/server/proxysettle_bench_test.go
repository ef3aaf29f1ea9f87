package server

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fairgate/fairgate/internal/config"
	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/store/memstore"
)

// BenchmarkProxySettled is one proxied completion through fairgate's
// handler (API key, decision on the memory store, the reverse proxy) to
// an upstream on loopback, in a fixed-cost class and in a measured one:
// the second reads the estimate from the request's JSON body, meters the
// answer as it passes and settles when it ends. json is a 1 KiB answer
// with its usage; sse is 20 chunk events and a usage event. cpu-ns/op is
// the process's CPU time (user and system, the upstream's included) per
// request: on a shared machine a steadier figure than the wall time,
// which loopback round trips make.
//
//	go test -run '^$' -bench ProxySettled -benchmem ./internal/server/
func BenchmarkProxySettled(b *testing.B) {
	for _, answer := range []string{"json", "sse"} {
		for _, class := range []string{"fixed", "measured"} {
			b.Run(answer+"/"+class, func(b *testing.B) { benchmarkProxySettled(b, answer, class) })
		}
	}
}

func benchmarkProxySettled(b *testing.B, answer, class string) {
	chunk := `{"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":" word"}}],"usage":null}`
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if answer == "json" {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"id":"chatcmpl-1","choices":[{"message":{"content":"`+strings.Repeat("word ", 200)+`"}}],"usage":{"prompt_tokens":9,"completion_tokens":200,"total_tokens":209}}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for range 20 {
			io.WriteString(w, "data: "+chunk+"\n\n")
			http.NewResponseController(w).Flush()
		}
		io.WriteString(w, "data: {\"choices\":[],\"usage\":{\"total_tokens\":209}}\n\ndata: [DONE]\n\n")
	}))
	defer up.Close()
	u, _ := url.Parse(up.URL)
	cfg, err := config.Parse("bench.yaml", []byte(`default_plan: bench
default_class: read
plans:
  bench: [{limit: 1000000000, period: 1000s}]
classes:
  read: {}
  llm:
    cost:
      unit: tokens
      estimate: {json: max_tokens, default: 500, cap: 4000}
      measure: {json: usage.total_tokens, sse: usage.total_tokens}
routes:
  - {route: "POST /v1/measured", class: llm}
  - {route: "POST /v1/fixed", class: read}
`))
	if err != nil {
		b.Fatal(err)
	}
	lim, err := limiter.New(limiter.Config{Store: memstore.New(memstore.Config{}), Policy: cfg.Policy})
	if err != nil {
		b.Fatal(err)
	}
	s, err := New(Config{Limiter: lim, Auth: testAuth(b), Upstream: u})
	if err != nil {
		b.Fatal(err)
	}
	body := `{"model":"gpt-4o","max_tokens":300,"stream":` + fmt.Sprint(answer == "sse") + `,"messages":[{"role":"user","content":"` + strings.Repeat("hello ", 100) + `"}]}`
	b.ReportAllocs()
	start := cpuTime()
	for b.Loop() {
		r := httptest.NewRequest("POST", "/v1/"+class, strings.NewReader(body))
		r.Header.Set("X-API-Key", "key-acme")
		w := httptest.NewRecorder()
		s.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			b.Fatalf("%d %s", w.Code, w.Body)
		}
	}
	b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
}

// cpuTime is the process's CPU time so far, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
