package server

import (
	"crypto/sha256"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/fairgate/fairgate/httplimit"
	"github.com/fairgate/fairgate/httplimit/problem"
	"github.com/fairgate/fairgate/internal/auth"
)

// The HTTP room's guards, wrapped around handlers by New: one method per
// route, the internal and worker tokens, "no policy", request targets
// upstreams read differently, and panics.

// plainTargets answers 400 to a request whose target upstreams read
// differently (policy.TargetPath: a '#', an encoded slash or dot segment,
// a backslash, …), before the mux sees it: ServeMux would redirect
// "/v1/search#/../../healthz" to its own reading of it.
func plainTargets(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := httplimit.RequestPath(r); err != nil && r.Method != http.MethodConnect {
			problem.BadRequest(w, err.Error())
			return
		}
		h.ServeHTTP(w, r)
	})
}

// closeUnauthorized wraps the proxy's public surface: an answer 401 closes
// its connection (Connection: close), unless the peer is a trusted proxy
// whose connection carries other clients' requests. A client without a
// valid credential then cannot keep idle connections open, each holding
// memory until the idle timeout, for the price of one refused request.
func (s *Server) closeUnauthorized(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.id.Load().ip.Trusts(auth.PeerIP(r)) {
			h.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(&closeOn401{ResponseWriter: w}, r)
	})
}

// closeOn401 adds Connection: close to an answer 401. It unwraps to the
// writer it wraps, so that http.ResponseController (flushes, deadlines,
// hijacking) reaches the connection's.
type closeOn401 struct{ http.ResponseWriter }

func (w *closeOn401) WriteHeader(code int) {
	if code == http.StatusUnauthorized {
		w.Header().Set("Connection", "close")
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *closeOn401) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// forInternal lets through requests that carry the internal token (any
// request when none is configured) and answers the others 401.
func (s *Server) forInternal(h http.HandlerFunc) http.HandlerFunc {
	return bearer(s.itoken, "fairgate-internal", "this endpoint needs Authorization: Bearer <internal token>", "FAIRGATE_INTERNAL_TOKEN", h)
}

// forWorkers lets through requests that carry the worker token (any
// request when none is configured) and answers the others 401.
func (s *Server) forWorkers(h http.HandlerFunc) http.HandlerFunc {
	return bearer(s.worker, "fairgate-workers", "worker requests need Authorization: Bearer <worker token>", "FAIRGATE_WORKER_TOKEN", h)
}

// tokenHash returns the SHA-256 of a bearer token (nil for none), refusing
// one under 16 characters.
func tokenHash(what, tok string) (*[sha256.Size]byte, error) {
	if tok == "" {
		return nil, nil
	}
	if len(tok) < 16 {
		return nil, fmt.Errorf("server: the %s token (FAIRGATE_%s_TOKEN or --%s-token-file) must be at least 16 characters: make one with openssl rand -hex 16", what, strings.ToUpper(what), what)
	}
	sum := sha256.Sum256([]byte(tok))
	return &sum, nil
}

// bearer lets through requests that carry the token whose hash is sum
// (any request when sum is nil) and answers the others 401 in realm,
// closing the connection: a caller without the operator's token has no
// use for it. envName is the variable the token usually comes from.
func bearer(sum *[sha256.Size]byte, realm, detail, envName string, h http.HandlerFunc) http.HandlerFunc {
	if sum == nil {
		return h
	}
	return func(w http.ResponseWriter, r *http.Request) {
		if !auth.BearerMatches(r, *sum) {
			unauthorized(w, r, realm, detail, envName)
			return
		}
		h(w, r)
	}
}

// unauthorized answers a request without the operator's token 401 in
// realm, closing the connection; an empty bearer token (an unset shell
// variable, most likely envName) is named as such.
func unauthorized(w http.ResponseWriter, r *http.Request, realm, detail, envName string) {
	if auth.EmptyBearer(r) {
		detail = fmt.Sprintf("the bearer token is empty (is $%s set where the request was sent?): %s", envName, detail)
	}
	w.Header().Set("Connection", "close")
	w.Header().Set("WWW-Authenticate", `Bearer realm="`+realm+`"`)
	problem.Write(w, problem.Details{Status: http.StatusUnauthorized, Detail: detail})
}

// needsPolicy answers 404 while the config has no policy, else runs h.
func (s *Server) needsPolicy(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.noPolicy.Load() {
			problem.Write(w, problem.Details{Status: http.StatusNotFound, Detail: "no policy: the config has no plans, classes or routes, only the Envoy rate limit service's settings (rls); add a policy to decide HTTP requests"})
			return
		}
		h(w, r)
	}
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

// recovering wraps h with ServeHTTP's panic recovery.
func (s *Server) recovering(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer s.recoverPanic(w, r)
		h.ServeHTTP(w, r)
	})
}

func (s *Server) recoverPanic(w http.ResponseWriter, r *http.Request) {
	if v := recover(); v != nil {
		if v == http.ErrAbortHandler {
			panic(v)
		}
		s.log.Error("panic serving request", slog.String("path", r.URL.Path), slog.Any("panic", v))
		problem.Write(w, problem.Details{Status: http.StatusInternalServerError, Detail: "internal error"})
	}
}
