package sim

import (
	"bytes"
	"encoding/xml"
	"testing"
	"time"
)

// FuzzSimulate: any policy and traffic text is refused with an error or
// simulated, and the chart always parses as XML.
func FuzzSimulate(f *testing.F) {
	f.Add(exPolicy, exTraffic)
	f.Add("limit=5,period=1s,algorithm=sliding_log", "every 100ms from 0s to 3s\n# comment\nburst 3 at 2s")
	f.Add("limit=1,period=7d,burst=1", "steady 1e-9/s from 1s to 2s")
	f.Add("concurrency=3", "steady 10/s from 0s to 2s hold 450ms; burst 5 at 1s hold 1s")
	f.Add("limit=10,period=1s,concurrency=2", "every 50ms from 0s to 1s hold 120ms")
	f.Fuzz(func(t *testing.T, policy, traffic string) {
		p, err := ParsePolicy(policy)
		if err != nil {
			return
		}
		reqs, err := ParseTraffic(traffic)
		if err != nil {
			return
		}
		if len(reqs) > MaxRequests {
			t.Fatalf("%d requests from %q", len(reqs), traffic)
		}
		if len(reqs) > 20_000 || reqs[len(reqs)-1].At > 24*time.Hour {
			return // valid, but too slow to draw in a fuzz run
		}
		end := reqs[len(reqs)-1].At + time.Second
		r := Simulate(p, reqs, end, max(end/500, time.Millisecond))
		if r.Admitted+r.Rejected != len(reqs) {
			t.Fatalf("%d + %d decisions for %d requests", r.Admitted, r.Rejected, len(reqs))
		}
		for _, s := range r.Samples {
			if p.Concurrency > 0 && (s.InFlight < 0 || s.InFlight > p.Concurrency) {
				t.Fatalf("%d in flight at %v under a limit of %d", s.InFlight, s.At, p.Concurrency)
			}
		}
		var buf bytes.Buffer
		if err := SVG(&buf, []Run{r}, end); err != nil {
			t.Fatal(err)
		}
		if err := xml.Unmarshal(buf.Bytes(), new(struct{})); err != nil {
			t.Fatalf("the chart for %q does not parse: %v", policy, err)
		}
	})
}
