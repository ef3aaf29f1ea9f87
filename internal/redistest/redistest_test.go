package redistest

import (
	"strings"
	"testing"
)

func TestServerRestartAndCluster(t *testing.T) {
	s, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := Do(s.Addr, "SET", "k", "v"); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if v, err := Do(s.Addr, "GET", "k"); err != nil || v != "" {
		t.Fatalf("after restart GET k = %q, %v; want empty (persistence is off)", v, err)
	}
	c, err := StartCluster(3, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	info, err := Do(c.Nodes[0].Addr, "CLUSTER", "INFO")
	if err != nil || !strings.Contains(info, "cluster_known_nodes:3") {
		t.Fatalf("CLUSTER INFO = %q, %v", info, err)
	}
}
