package limitview

import (
	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/limiter"
)

// Layer is one layer of a tenant's limits with its state now.
type Layer struct {
	Policy string `json:"policy"`
	// Class is "" for the tenant's layers.
	Class string `json:"class,omitempty"`
	// Unit is what Limit, Burst and Remaining count (see
	// [limiter.LayerState].Unit).
	Unit         string `json:"unit"`
	Limit        int64  `json:"limit"`
	Burst        int64  `json:"burst"`
	PeriodMs     int64  `json:"period_ms"`
	Remaining    int64  `json:"remaining"`
	ResetAfterMs int64  `json:"reset_after_ms"`
	Shadow       bool   `json:"shadow,omitempty"`
}

// Layers returns ls in their JSON form: never nil, so that none encodes
// as an empty array.
func Layers(ls []limiter.LayerState) []Layer {
	out := make([]Layer, len(ls))
	for i, l := range ls {
		out[i] = Layer{Policy: l.Policy, Class: l.Class, Unit: l.Unit, Limit: l.Limit, Burst: l.Burst,
			PeriodMs: l.Period.Milliseconds(), Remaining: l.Remaining, ResetAfterMs: algo.CeilMillis(l.ResetAfter), Shadow: l.Shadow}
	}
	return out
}
