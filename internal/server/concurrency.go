package server

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/fairgate/fairgate/httplimit"
	"github.com/fairgate/fairgate/httplimit/problem"
	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/store"
)

// slotBody is the body of POST /v1/concurrency/acquire and /release: the
// tenant (verified by the caller, as for /v1/check), its route or class,
// and the lease's length or ID.
type slotBody struct {
	Tenant  opt[string] `json:"tenant"`
	Route   opt[string] `json:"route"`
	Class   opt[string] `json:"class"`
	LeaseMs opt[int64]  `json:"lease_ms"`
	LeaseID opt[string] `json:"lease_id"`
}

// slotView is one concurrency layer in an answer.
type slotView struct {
	Policy    string `json:"policy"`
	Limit     int64  `json:"limit"`
	InUse     int64  `json:"in_use"`
	Remaining int64  `json:"remaining"`
}

func slotViews(ds []limiter.SlotDecision) []slotView {
	out := make([]slotView, 0, len(ds))
	for _, d := range ds {
		out = append(out, slotView{d.Policy, d.Limit, d.InUse, d.Remaining})
	}
	return out
}

// readSlot reads a slot body: the body, and the request its tenant and
// route or class make; or a detail naming the field at fault. It writes
// the answer itself when the body cannot be read.
func readSlot(w http.ResponseWriter, r *http.Request) (b slotBody, lr policy.Request, detail string, ok bool) {
	if !readJSON(w, r, &b, nil) {
		return b, lr, "", false
	}
	if !b.Tenant.ok || b.Tenant.v == "" {
		return b, lr, "tenant: required: concurrency limits are a tenant's", true
	}
	lr, detail = parseCheck(&checkBody{Tenant: b.Tenant, Route: b.Route, Class: b.Class})
	return b, lr, detail, true
}

// handleSlotAcquire serves POST /v1/concurrency/acquire: a worker takes
// its tenant's concurrency slots around a job (no rate tokens), and gives
// them back with /v1/concurrency/release and the lease ID, or lets the
// lease run out.
func (s *Server) handleSlotAcquire(w http.ResponseWriter, r *http.Request) {
	b, lr, detail, ok := readSlot(w, r)
	if !ok {
		return
	}
	var lease time.Duration
	switch {
	case detail != "":
	case b.LeaseID.ok:
		detail = "lease_id: given on release, not on acquire"
	case b.LeaseMs.ok && (b.LeaseMs.v < 1000 || b.LeaseMs.v > store.MaxSlotTTL.Milliseconds()):
		detail = fmt.Sprintf("lease_ms: %d is outside 1000..%d", b.LeaseMs.v, store.MaxSlotTTL.Milliseconds())
	case b.LeaseMs.ok:
		lease = time.Duration(b.LeaseMs.v) * time.Millisecond
	}
	if detail != "" {
		problem.BadRequest(w, detail)
		return
	}
	d, err := s.lim.AcquireSlots(r.Context(), lr, lease)
	if err != nil {
		problem.BadRequest(w, checkError(err, lr))
		return
	}
	if !d.Allowed {
		httplimit.WriteRejection(w, s.form, d)
		return
	}
	out := map[string]any{"acquired": true, "lease_id": "", "lease_ms": 0, "concurrency": slotViews(d.Concurrency)}
	if d.Slots != nil {
		out["lease_id"], out["lease_ms"] = d.Slots.ID(), d.Slots.Lease().Milliseconds()
	}
	writeJSON(w, http.StatusOK, out)
}

// handleSlotRelease serves POST /v1/concurrency/release.
func (s *Server) handleSlotRelease(w http.ResponseWriter, r *http.Request) {
	b, lr, detail, ok := readSlot(w, r)
	if !ok {
		return
	}
	switch {
	case detail != "":
	case !b.LeaseID.ok || b.LeaseID.v == "" || len(b.LeaseID.v) > store.MaxSlotID:
		detail = fmt.Sprintf("lease_id: required, the acquire's lease_id (at most %d bytes)", store.MaxSlotID)
	case b.LeaseMs.ok:
		detail = "lease_ms: given on acquire, not on release"
	}
	if detail != "" {
		problem.BadRequest(w, detail)
		return
	}
	if err := s.lim.ReleaseSlots(r.Context(), lr, b.LeaseID.v); err != nil {
		if errors.Is(err, store.ErrUnavailable) {
			w.Header().Set("Retry-After", "1")
			problem.Write(w, problem.Details{Status: http.StatusServiceUnavailable, Detail: "the slot could not be released now (its lease frees it): " + err.Error()})
			return
		}
		problem.BadRequest(w, checkError(err, lr))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"released": true})
}
