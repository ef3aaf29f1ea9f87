package httplimit

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/policy"
)

// FuzzHeaders: whatever the decision, every header written parses as what
// its draft says: structured fields as Structured Field lists, the others
// as non-negative integers.
func FuzzHeaders(f *testing.F) {
	f.Add("free.tenant.1m", int64(120), int64(30), int64(29), int64(500_000), int64(0), false)
	f.Add("enterprise.search.1m", int64(1), int64(1), int64(0), int64(60_000_000), int64(1_500_000), true)
	f.Add("weird \"policy\"\n", int64(-5), int64(0), int64(-1), int64(-1), int64(-1), true)
	f.Fuzz(func(t *testing.T, name string, limit, burst, remaining, resetUs, retryUs int64, rejected bool) {
		d := limiter.Decision{
			Allowed:    !rejected,
			Reason:     limiter.ReasonAllowed,
			RetryAfter: time.Duration(retryUs) * time.Microsecond,
			Tightest:   0,
			Layers: []limiter.LayerDecision{{
				Layer:      policy.Layer{Policy: name, Limit: algo.Limit{Limit: limit, Period: time.Minute, Burst: burst}},
				Remaining:  remaining,
				ResetAfter: time.Duration(resetUs) * time.Microsecond,
			}},
		}
		for _, form := range []Form{Draft, Structured, X} {
			h := http.Header{}
			d.Now = time.Unix(1_800_000_000, 0)
			SetHeaders(h, form, d)
			for name, vs := range h {
				for _, v := range vs {
					switch name {
					case "Ratelimit", "Ratelimit-Policy":
						if _, err := httpsfv.UnmarshalList([]string{v}); err != nil {
							t.Fatalf("%s: %q is not a structured field list: %v", name, v, err)
						}
					default:
						if n, err := strconv.ParseInt(v, 10, 64); err != nil || n < 0 {
							t.Fatalf("%s: %q is not a non-negative integer", name, v)
						}
					}
				}
			}
		}
	})
}
