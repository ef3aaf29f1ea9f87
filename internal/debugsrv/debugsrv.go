// Package debugsrv is the debug listener's handler, as envoyproxy/ratelimit
// serves on its DEBUG_HOST:DEBUG_PORT: /rlconfig (the rate limit domains in
// force, in that service's format), /stats (the process's Prometheus
// metrics, in the Prometheus text format, where that service prints its
// own stats as "name: value" lines) and Go's profiler under /debug/pprof/.
// "/" lists them.
//
// Its handlers are registered on the handler's own mux only: nothing here
// touches http.DefaultServeMux beyond what importing net/http/pprof does,
// and fairgate serves that mux on no listener.
package debugsrv

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/fairgate/fairgate/internal/auth"
)

// Config is what the debug listener shows.
type Config struct {
	// RLConfig writes the rate limit config in force for /rlconfig. Nil
	// means /rlconfig is empty.
	RLConfig func(w io.Writer) error
	// Stats are the metrics of /stats. Nil means /stats is empty.
	Stats prometheus.Gatherer
	// Token, if not empty, is the bearer token every path requires
	// ("Authorization: Bearer <token>"); without it a request is answered
	// 401. Empty means open to whoever reaches the listener.
	Token string
}

// endpoints are the paths "/" lists, with what each shows.
var endpoints = []struct{ path, help string }{
	{"/debug/pprof/", "root of various pprof endpoints. hit for help."},
	{"/rlconfig", "print out the currently loaded configuration for debugging"},
	{"/stats", "print out stats (Prometheus text format)"},
}

// New returns the debug listener's handler.
func New(c Config) (http.Handler, error) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		for _, e := range endpoints {
			fmt.Fprintf(w, "%s: %s\n", e.path, e.help)
		}
	})
	mux.HandleFunc("GET /rlconfig", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if c.RLConfig != nil {
			_ = c.RLConfig(w)
		}
	})
	stats := c.Stats
	if stats == nil {
		stats = prometheus.NewRegistry()
	}
	mux.Handle("GET /stats", promhttp.HandlerFor(stats, promhttp.HandlerOpts{}))
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	if c.Token == "" {
		return mux, nil
	}
	if len(c.Token) < 16 {
		return nil, errors.New("debugsrv: the token must be at least 16 characters")
	}
	sum := sha256.Sum256([]byte(c.Token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !auth.BearerMatches(r, sum) {
			w.Header().Set("Connection", "close")
			w.Header().Set("WWW-Authenticate", `Bearer realm="fairgate debug"`)
			http.Error(w, "the debug listener needs Authorization: Bearer <the internal token> (FAIRGATE_INTERNAL_TOKEN)", http.StatusUnauthorized)
			return
		}
		mux.ServeHTTP(w, r)
	}), nil
}
