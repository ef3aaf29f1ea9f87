package rls

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// names is a Sink that keeps the names it was given.
type names struct {
	mu sync.Mutex
	n  map[string]uint64
}

func (s *names) Add(name string, n uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n[name] += n
}

// TestNotFoundDomainsBounded: a caller that names 1,500 unknown domains,
// long ones too, makes at most maxNotFoundDomains statistics names of
// them; the rest are counted, under "overflow", not lost, and no name
// passes the statistics' length bound.
func TestNotFoundDomainsBounded(t *testing.T) {
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	sink := &names{n: map[string]uint64{}}
	m.sink = sink
	for i := range 1500 {
		m.domainNotFound(fmt.Sprintf("attacker-%d-%s", i, strings.Repeat("x", 600)), 2)
	}
	if len(m.notFound) > maxNotFoundDomains || len(sink.n) > maxNotFoundDomains+1 {
		t.Fatalf("%d domains kept, %d names sent; want at most %d and one overflow", len(m.notFound), len(sink.n), maxNotFoundDomains)
	}
	var total uint64
	for name, n := range sink.n {
		total += n
		if len(name) > 400 {
			t.Errorf("a name of %d bytes: %.80s…", len(name), name)
		}
	}
	if total != 3000 || sink.n["ratelimit.service.rate_limit.overflow.domain_not_found"] != 1000 {
		t.Errorf("counted %d (want 3000), overflow %d (want 1000)", total, sink.n["ratelimit.service.rate_limit.overflow.domain_not_found"])
	}
}
