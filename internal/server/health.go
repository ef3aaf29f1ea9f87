package server

import (
	"net/http"

	"github.com/fairgate/fairgate/docs"
)

// Health and the API's description: /healthz, /readyz, /openapi.json, and
// draining.

// handleHealthz answers that the process serves: 200 "ok".
func handleHealthz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Write([]byte("ok\n"))
}

// handleReady answers whether this instance can answer: 200 once it
// serves, 503 while it drains. The store's state is in the body, and makes
// the answer 503 only with Config.ReadyRequiresStore: a shared store's
// outage is every instance's, and the instance still decides by each
// policy's fail mode meanwhile.
func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	up := s.StoreUp()
	store := "up"
	if !up {
		store = "down"
	}
	draining := s.draining.Load()
	rlsErr := s.rlsErr()
	ready := !draining && (!s.needStore || up) && rlsErr == nil // Ready, with these
	out := map[string]any{"ready": ready, "store": store, "fail_closed_policies": s.lim.Snapshot().HasFailClosed(), "requires_store": s.needStore}
	if draining {
		out["draining"] = true
	}
	if rlsErr != nil {
		out["rls"] = rlsErr.Error()
	}
	if s.breakers != nil {
		out["breakers"] = s.breakers.States()
	}
	if b, ok := s.lim.Guard().Breakers(); ok {
		out["store_breaker"] = b
	}
	if s.warning != nil {
		if w := s.warning(); w != "" {
			out["store_warning"] = w
		}
	}
	status := http.StatusOK
	if !ready {
		status = http.StatusServiceUnavailable
	}
	writeJSON(w, status, out)
}

// Ready reports what /readyz answers: true (200) unless the server drains
// or, with Config.ReadyRequiresStore, the store is down.
func (s *Server) Ready() bool {
	return !s.draining.Load() && (!s.needStore || s.StoreUp()) && s.rlsErr() == nil
}

// rlsErr is why the Envoy rate limit service cannot answer as configured
// (Config.RLSReady), or nil.
func (s *Server) rlsErr() error {
	if s.rlsReady == nil {
		return nil
	}
	return s.rlsReady()
}

// StoreUp reports whether the store answers: it has been reached
// (Config.StoreConnected) and the limiter's breakers are closed.
func (s *Server) StoreUp() bool {
	return s.lim.StoreUp() && (s.conn == nil || s.conn())
}

// openAPI is the OpenAPI description of every endpoint (docs/openapi.json).
var openAPI = docs.OpenAPI()

// serveOpenAPI serves the OpenAPI description. It is documentation, as
// public as the repository's: no token.
func serveOpenAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "max-age=300")
	w.Write(openAPI)
}

// Drain makes /readyz answer 503 from now on, so that load balancers stop
// sending new requests while the ones they send meanwhile are still
// served: the first step of a graceful shutdown.
func (s *Server) Drain() { s.draining.Store(true) }
