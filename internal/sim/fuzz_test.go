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
	f.Add("limit=200000,period=1m,burst=20000,unit=tokens", workedExample)
	f.Add("limit=20,period=1s,algorithm=sliding_log", "steady 20/s from 0s to 3s estimate 1..5 cost 0..40 hold 300ms; burst 4 at 1s cost 3")
	f.Add("limit=20,period=1s,algorithm=sliding_window,concurrency=3", "every 10ms from 0s to 2s estimate 2 cost 0..60 hold 50ms")
	f.Fuzz(func(t *testing.T, policy, traffic string) {
		p, err := ParsePolicy(policy)
		if err != nil {
			return
		}
		reqs, err := ParseTraffic(traffic, 1)
		if err != nil || p.CheckTraffic(reqs) != nil {
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
			// A debt is at most one burst.
			if s.Remaining < -p.capacity() || s.Remaining > p.capacity() {
				t.Fatalf("remaining %d at %v outside ±%d", s.Remaining, s.At, p.capacity())
			}
		}
		// Every admitted measured request is settled once, after it was
		// admitted, by at most what was asked.
		var measured, charged int64
		for _, q := range r.Requests {
			if q.Measured && q.Charged > 0 {
				measured++
			}
			if q.Charged != 0 && (!q.Allowed || q.Charged != q.Estimate) {
				t.Fatalf("request %+v charged %d", q, q.Charged)
			}
			charged += q.Charged
		}
		if int64(len(r.Settlements)) != measured {
			t.Fatalf("%d settlements of %d admitted measured requests", len(r.Settlements), measured)
		}
		seen := map[int]bool{}
		for _, s := range r.Settlements {
			q := r.Requests[s.Request]
			if seen[s.Request] || s.After <= s.Request || s.At < q.At || s.Delta != q.Cost-q.Estimate ||
				s.Delta >= 0 && (s.Applied < 0 || s.Applied > s.Delta) || s.Delta < 0 && (s.Applied > 0 || s.Applied < s.Delta) {
				t.Fatalf("settlement %+v of request %+v", s, q)
			}
			seen[s.Request] = true
		}
		if r.Totals().Charged != charged {
			t.Fatalf("totals charged %d, requests %d", r.Totals().Charged, charged)
		}
		var buf bytes.Buffer
		if err := Steps(&buf, []Run{r}); err != nil {
			t.Fatal(err)
		}
		buf.Reset()
		if err := SVG(&buf, []Run{r}, end); err != nil {
			t.Fatal(err)
		}
		if err := xml.Unmarshal(buf.Bytes(), new(struct{})); err != nil {
			t.Fatalf("the chart for %q does not parse: %v", policy, err)
		}
	})
}
