package rls

import (
	"io"
	"net/http"
	"strconv"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/fairgate/fairgate/store/guard"
)

// ServeJSON is envoyproxy/ratelimit's HTTP endpoint /json: a
// RateLimitRequest in proto3 JSON, its RateLimitResponse back, with the
// status 200 (OK) or 429 (OVER_LIMIT); a body that is not a request, or
// a request the service refuses, is 400 Bad Request, as there. One
// difference: a fail-closed domain whose store does not answer is 503
// with Retry-After (there, a Redis error is 400). The body is read up to
// MaxMessage bytes.
func (s *Service) ServeJSON(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		http.Error(w, http.StatusText(http.StatusMethodNotAllowed), http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxMessage))
	var req rlspb.RateLimitRequest
	if err == nil {
		err = protojson.Unmarshal(body, &req)
	}
	if err != nil {
		http.Error(w, http.StatusText(http.StatusBadRequest), http.StatusBadRequest)
		return
	}
	resp, err := s.ShouldRateLimit(r.Context(), &req)
	if status.Code(err) == codes.Unavailable {
		w.Header().Set("Retry-After", strconv.Itoa(int(guard.UnavailableRetryAfter.Seconds())))
		http.Error(w, http.StatusText(http.StatusServiceUnavailable), http.StatusServiceUnavailable)
		return
	}
	if err != nil {
		http.Error(w, http.StatusText(http.StatusBadRequest), http.StatusBadRequest)
		return
	}
	out, err := protojson.Marshal(resp)
	if err != nil {
		http.Error(w, http.StatusText(http.StatusInternalServerError), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if resp.OverallCode == rlspb.RateLimitResponse_OVER_LIMIT {
		w.WriteHeader(http.StatusTooManyRequests)
	}
	w.Write(out)
}
