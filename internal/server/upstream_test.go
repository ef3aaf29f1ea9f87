package server

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestUpstreamStats: Upstream reads the gate's numbers from its metrics'
// counters: the limit and the waiting, in flight by class, and the sheds;
// without a gate, none.
func TestUpstreamStats(t *testing.T) {
	up := newHeldUpstream(t)
	ts, s, _ := capacityProxy(t, up.Server, "upstream_capacity: {limit: 1, max_queue: 1, max_wait: 10s}")
	held := getKey(ts.URL, "key-acme", "/slow/a1")
	<-up.arrived
	queued := getKey(ts.URL, "key-acme", "/fast/a2")
	waitFor(t, "the second request to wait", func() bool { st, _ := s.Upstream(); return st.Waiting == 1 })
	wantShed(t, <-getKey(ts.URL, "key-acme", "/fast/a3"), "the third, over the queue")
	got, ok := s.Upstream()
	want := UpstreamStats{Limit: 1, Waiting: 1, InFlight: map[string]int64{"read": 1}, Shed: 1}
	if d := cmp.Diff(want, got); !ok || d != "" {
		t.Errorf("Upstream() = %v (-want +got):\n%s", ok, d)
	}
	up.release("a1")
	<-held
	<-queued
	s.SetCapacity(nil)
	if _, ok := s.Upstream(); ok {
		t.Error("Upstream() without a gate in force: ok, want none")
	}
}
