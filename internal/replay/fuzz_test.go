package replay

import (
	"strconv"
	"strings"
	"testing"

	"github.com/fairgate/fairgate/algo"
)

// FuzzParseLine: any line is a request or an error; a request has a
// method, a path starting with '/', and a time.
func FuzzParseLine(f *testing.F) {
	f.Add(genLine(1, false), "")
	f.Add(genLine(2, true), "")
	f.Add(genLine(3, true), "host")
	f.Add(`{"time":1.5e9,"org":"x","method":"GET","path":"/"}`, "org")
	f.Add(`- - - [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.1" 200 1`, "ident")
	f.Fuzz(func(t *testing.T, line, field string) {
		l, err := ParseLine([]byte(line), Options{TenantField: field})
		if err != nil {
			return
		}
		if l.Method == "" || !strings.HasPrefix(l.Path, "/") || l.Time.IsZero() {
			t.Fatalf("accepted %q as %+v", line, l)
		}
	})
}

// FuzzParseCost: whatever a line holds where its cost and estimate are
// read, a request's cost is a count from 0 to algo.MaxCount or a reason
// it has none (never both), and its estimate a count or none; the
// request itself is read as without the fields.
func FuzzParseCost(f *testing.F) {
	f.Add(`{"time":1,"tenant":"t","method":"POST","path":"/v1/completions","usage":{"total_tokens":9500},"max_tokens":6000}`, "usage.total_tokens", "max_tokens")
	f.Add(`{"time":1,"tenant":"t","method":"GET","path":"/","n":"  12 ","m":-1e400}`, "n", "m")
	f.Add(`{"time":1,"tenant":"t","method":"GET","path":"/","n":1e999,"m":[1]}`, "n", "m.x")
	f.Add(`{"time":1,"tenant":"t","method":"GET","path":"/","n":{"a":null}}`, "n.a", "")
	f.Add(`10.0.0.1 - alice [10/Oct/2000:13:55:36 -0700] "POST /v1/completions HTTP/1.1" 200 - "-" "curl/8" "512"`, "last", "bytes")
	f.Add(`10.0.0.1 - alice [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.1" 200 12 "`, "last", "")
	f.Add(`10.0.0.1 - alice [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.1"`, "bytes", "last")
	f.Fuzz(func(t *testing.T, line, costField, estimateField string) {
		if costField == "" {
			return
		}
		o := Options{CostField: costField, EstimateField: estimateField}
		l, err := ParseLine([]byte(line), o)
		if err != nil {
			return
		}
		switch {
		case l.CostErr == "" && (l.Cost < 0 || l.Cost > algo.MaxCount):
			t.Fatalf("cost %d out of range from %q", l.Cost, line)
		case l.CostErr != "" && l.Cost != 0:
			t.Fatalf("cost %d and the reason %q from %q", l.Cost, l.CostErr, line)
		case l.HasEstimate && (l.Estimate < 0 || l.Estimate > algo.MaxCount), !l.HasEstimate && l.Estimate != 0:
			t.Fatalf("estimate %d (%v) from %q", l.Estimate, l.HasEstimate, line)
		case len(l.CostErr) > 200+len(strconv.Quote(costField)):
			t.Fatalf("a reason of %d bytes: %q", len(l.CostErr), l.CostErr)
		}
		plain, err := ParseLine([]byte(line), Options{})
		if err != nil || !plain.Time.Equal(l.Time) || plain.Tenant != l.Tenant || plain.Path != l.Path || plain.Method != l.Method || plain.IP != l.IP {
			t.Fatalf("%q read as %+v with cost fields, %+v (%v) without", line, l, plain, err)
		}
	})
}
