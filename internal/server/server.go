// Package server is fairgate's HTTP decision API: GET /healthz and
// POST /v1/take (a limit on any key with the policy in the request, in the
// manner of redis-cell's CL.THROTTLE). Later issues add the tenant-aware
// endpoints, the proxy and the admin API beside these.
//
// Nothing a client sends can crash or stall it: bodies are capped, decoding
// is strict, every store call has a deadline, and errors are problem+json.
package server

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/fairgate/fairgate/internal/problem"
	"github.com/fairgate/fairgate/store"
)

// Config configures a Server.
type Config struct {
	// Store decides every limit. Required.
	Store store.Store
	// Timeout bounds each store call, connection wait included. Zero means
	// 50 ms.
	Timeout time.Duration
	// Logger receives store errors, at most one line a second. Nil means
	// silent.
	Logger *slog.Logger
	// Metrics, if not nil, is served at GET /metrics.
	Metrics http.Handler
}

// Server serves the decision API. It is an http.Handler.
type Server struct {
	store   store.Store
	timeout time.Duration
	log     *slog.Logger
	lastLog atomic.Int64 // unix seconds of the last store-error log line
	mux     *http.ServeMux
}

// MaxBody is the largest request body accepted; larger ones get 413.
const MaxBody = 64 << 10

// New returns a server for c.
func New(c Config) (*Server, error) {
	if c.Store == nil {
		return nil, errors.New("server: Config.Store is required")
	}
	s := &Server{store: c.Store, timeout: c.Timeout, log: c.Logger}
	if s.timeout <= 0 {
		s.timeout = 50 * time.Millisecond
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.mux = http.NewServeMux()
	s.mux.HandleFunc("/healthz", only("GET", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte("ok\n"))
	}))
	s.mux.HandleFunc("/v1/take", only("POST", s.handleTake))
	if c.Metrics != nil {
		s.mux.Handle("/metrics", only("GET", c.Metrics.ServeHTTP))
	}
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		problem.Write(w, problem.Details{Status: http.StatusNotFound, Detail: "no such endpoint: " + r.Method + " " + r.URL.Path})
	})
	return s, nil
}

// only restricts h to one method (GET also admits HEAD); other methods get
// a 405 problem with Allow.
func only(method string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != method && !(method == "GET" && r.Method == "HEAD") {
			w.Header().Set("Allow", method)
			problem.Write(w, problem.Details{Status: http.StatusMethodNotAllowed, Detail: r.URL.Path + " takes " + method})
			return
		}
		h(w, r)
	}
}

// ServeHTTP serves the API, turning any panic below into a 500 so that one
// request cannot take the process down.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.log.Error("panic serving request", slog.String("path", r.URL.Path), slog.Any("panic", v))
			problem.Write(w, problem.Details{Status: http.StatusInternalServerError, Detail: "internal error"})
		}
	}()
	s.mux.ServeHTTP(w, r)
}

// take runs one store call under the server's deadline.
func (s *Server) take(ctx context.Context, checks []store.Check, res *store.Result) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	err := s.store.Take(ctx, checks, res)
	if err != nil && !errors.Is(err, store.ErrInvalidCheck) {
		if now := time.Now().Unix(); s.lastLog.Swap(now) != now {
			s.log.Warn("store call failed", slog.String("error", err.Error()))
		}
	}
	return err
}
