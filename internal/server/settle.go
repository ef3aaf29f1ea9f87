package server

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/httplimit/problem"
	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/store"
)

// A settlement handle is what /v1/check (in its body) and /v1/authz (in
// SettlementHeader) answer for an admitted request of a measured-cost
// class, and what POST /v1/settle takes back with the true cost:
//
//	fg1.<payload>.<mac>
//
// payload is the base64url (unpadded) JSON of handlePayload: the
// settlement's ID (random, made by fairgate), the charged cost, the
// store's time of the take, the expiry, and each charged layer's policy,
// key and limit. mac is the base64url HMAC-SHA256 of "fg1.<payload>"
// under the settle key, which every instance shares (Config.SettleKey),
// so a handle made on one instance settles on any. A handle cannot be
// forged or changed without the key; it settles exactly the keys and
// limits its decision charged, once (the store's record of the ID), and
// only until it expires.

// handleVersion starts every handle.
const handleVersion = "fg1."

// SettleHandleLifetime is how long a settlement handle can be settled
// after its decision: 100 s, within the store's 2-minute record of a
// settlement's ID (store.SettleIDLifetime, counted from the first
// settle, which comes after the decision) with 20 s for instances'
// clocks to disagree. A settle after it is refused (410) and counted; the
// estimate then stands.
const SettleHandleLifetime = 100 * time.Second

// maxHandle bounds a handle's length.
const maxHandle = 8 << 10

// MinSettleKey is the fewest bytes a settle key may have.
const MinSettleKey = 16

// handlePayload is a handle's content.
type handlePayload struct {
	ID      string        `json:"i"`
	Cost    int64         `json:"c"`
	TakenUs int64         `json:"t"`
	Expires int64         `json:"e"` // µs since the epoch
	Layers  []handleLayer `json:"l"`
}

// handleLayer is one layer of a handle.
type handleLayer struct {
	Policy   string `json:"p"`
	Key      string `json:"k"`
	Alg      string `json:"a"`
	Limit    int64  `json:"n"`
	PeriodUs int64  `json:"d"`
	Burst    int64  `json:"b"`
	OffsetUs int64  `json:"o,omitempty"`
}

// settleKey returns the HMAC key of handles: key, or a random one of this
// instance's own when key is empty (handles then settle only here).
func settleKey(key []byte) ([]byte, error) {
	if len(key) == 0 {
		k := make([]byte, 32)
		_, _ = rand.Read(k) // never fails (crypto/rand)
		return k, nil
	}
	if len(key) < MinSettleKey {
		return nil, fmt.Errorf("server: the settle key is %d bytes: it must be at least %d (openssl rand -hex 32)", len(key), MinSettleKey)
	}
	return key, nil
}

// handleOf returns the settlement handle of d, expiring
// SettleHandleLifetime after its decision; "" when d has nothing to
// settle (not admitted, not of a measured-cost class, or degraded).
func (s *Server) handleOf(d *limiter.Decision) string {
	if d.Settlement == nil {
		return ""
	}
	return sealHandle(s.settleKey, d.Settlement, d.Now.Add(SettleHandleLifetime))
}

// sealHandle returns the handle of s, expiring at expires.
func sealHandle(key []byte, s *limiter.Settlement, expires time.Time) string {
	p := handlePayload{ID: s.ID, Cost: s.Cost, TakenUs: s.TakenAt.UnixMicro(), Expires: expires.UnixMicro()}
	for _, ly := range s.Layers {
		l := ly.Limit
		p.Layers = append(p.Layers, handleLayer{Policy: ly.Policy, Key: ly.Key, Alg: l.Algorithm.String(), Limit: l.Limit,
			PeriodUs: l.Period.Microseconds(), Burst: l.Burst, OffsetUs: l.Offset.Microseconds()})
	}
	body, _ := json.Marshal(p) // strings, numbers: never fails
	msg := handleVersion + base64.RawURLEncoding.EncodeToString(body)
	return msg + "." + base64.RawURLEncoding.EncodeToString(handleMAC(key, msg))
}

func handleMAC(key []byte, msg string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(msg))
	return m.Sum(nil)
}

// Why a handle is refused.
var (
	errHandleInvalid = errors.New("not a settlement handle of this deployment (malformed, changed, or signed with another settle key): settle with the handle /v1/check or /v1/authz answered, unchanged, on an instance sharing its FAIRGATE_SETTLE_TOKEN")
	errHandleExpired = errors.New("the handle has expired: a handle settles within 100 s of its decision; the estimate it charged stands")
)

// openHandle verifies h at now and returns its settlement. The error is
// errHandleInvalid or errHandleExpired.
func openHandle(key []byte, h string, now time.Time) (*limiter.Settlement, error) {
	if len(h) > maxHandle || !strings.HasPrefix(h, handleVersion) {
		return nil, errHandleInvalid
	}
	// One spelling: base64's decoders skip CR and LF, even strict, so a
	// handle with them in its mac would pass as itself.
	for i := range len(h) {
		if c := h[i]; !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return nil, errHandleInvalid
		}
	}
	i := strings.LastIndexByte(h, '.')
	mac, err := base64.RawURLEncoding.Strict().DecodeString(h[i+1:])
	if err != nil || !hmac.Equal(mac, handleMAC(key, h[:i])) {
		return nil, errHandleInvalid
	}
	body, err := base64.RawURLEncoding.Strict().DecodeString(h[len(handleVersion):i])
	if err != nil {
		return nil, errHandleInvalid
	}
	var p handlePayload
	if err := json.Unmarshal(body, &p); err != nil {
		return nil, errHandleInvalid
	}
	if now.UnixMicro() >= p.Expires {
		return nil, errHandleExpired
	}
	s := &limiter.Settlement{ID: p.ID, Cost: p.Cost, TakenAt: time.UnixMicro(p.TakenUs)}
	for _, l := range p.Layers {
		alg, err := algo.ParseAlgorithm(l.Alg)
		if err != nil {
			return nil, errHandleInvalid
		}
		s.Layers = append(s.Layers, limiter.SettleLayer{Policy: l.Policy, Key: l.Key, Limit: algo.Limit{Algorithm: alg, Limit: l.Limit, Burst: l.Burst,
			Period: time.Duration(l.PeriodUs) * time.Microsecond, Offset: time.Duration(l.OffsetUs) * time.Microsecond}})
	}
	return s, nil
}

// settleBody is the body of POST /v1/settle.
type settleBody struct {
	Handle opt[string] `json:"handle"`
	Cost   opt[int64]  `json:"cost"`
}

// settledLayerJSON is one layer of a /v1/settle answer.
type settledLayerJSON struct {
	Policy       string `json:"policy"`
	Applied      int64  `json:"applied"`
	Remaining    int64  `json:"remaining"`
	ResetAfterMs int64  `json:"reset_after_ms"`
}

// settleResponse is the answer of POST /v1/settle.
type settleResponse struct {
	Repeated  bool               `json:"repeated"`
	Delta     int64              `json:"delta"`
	Decisions []settledLayerJSON `json:"decisions"`
}

// handleSettle serves POST /v1/settle: the true cost of a request
// /v1/check or /v1/authz admitted with a settlement handle.
func (s *Server) handleSettle(w http.ResponseWriter, r *http.Request) {
	var req settleBody
	if !readJSON(w, r, &req, nil) {
		return
	}
	switch {
	case !req.Handle.ok || req.Handle.v == "":
		problem.BadRequest(w, "handle: required: the settlement handle /v1/check or /v1/authz answered")
		return
	case !req.Cost.ok:
		problem.BadRequest(w, "cost: required: the request's true cost, in the class's unit")
		return
	case req.Cost.v < 0 || req.Cost.v > algo.MaxCount:
		problem.BadRequest(w, fmt.Sprintf("cost: %d is outside 0..%d", req.Cost.v, algo.MaxCount))
		return
	}
	st, err := openHandle(s.settleKey, req.Handle.v, time.Now())
	switch {
	case errors.Is(err, errHandleExpired):
		s.metrics.settleRefused.WithLabelValues("expired").Inc()
		problem.Write(w, problem.Details{Status: http.StatusGone, Detail: "handle: " + err.Error()})
		return
	case err != nil:
		s.metrics.settleRefused.WithLabelValues("invalid").Inc()
		problem.BadRequest(w, "handle: "+err.Error())
		return
	}
	out, err := s.lim.SettleTake(r.Context(), st, req.Cost.v)
	switch {
	case errors.Is(err, store.ErrInvalidCheck) || errors.Is(err, limiter.ErrSettleCost):
		problem.BadRequest(w, err.Error())
		return
	case err != nil:
		w.Header().Set("Retry-After", "1")
		problem.Write(w, problem.Details{Status: http.StatusServiceUnavailable,
			Detail: "the store could not settle it (" + err.Error() + "): nothing was applied; send the same handle again, within its lifetime"})
		return
	}
	resp := settleResponse{Repeated: out.Repeated, Delta: out.Delta, Decisions: make([]settledLayerJSON, len(out.Layers))}
	for i, x := range out.Layers {
		resp.Decisions[i] = settledLayerJSON{Policy: x.Policy, Applied: x.Applied, Remaining: x.Remaining, ResetAfterMs: algo.CeilMillis(x.ResetAfter)}
	}
	writeJSON(w, http.StatusOK, resp)
}
