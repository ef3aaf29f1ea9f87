package redistest

import (
	"net"
	"strconv"
	"strings"
	"testing"
)

func TestServerRestartAndCluster(t *testing.T) {
	Need(t)
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

// TestStartIsNotFooledByAnotherServer: a server started on a port another
// redis-server holds is not up, though the port answers: it exits, failing
// to bind, and the start says so (answering PING was taken for up).
func TestStartIsNotFooledByAnotherServer(t *testing.T) {
	Need(t)
	other, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	bin, err := binary("redis-server")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Addr: other.Addr, Port: other.Port, dir: t.TempDir(),
		args: []string{"--port", strconv.Itoa(other.Port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"}}
	if err := s.start(bin); err == nil {
		s.Kill()
		t.Fatal("a server that could not bind its port was taken for up")
	}
}

// TestFreePortsAreNeverReused: no port is given twice in a process, and a
// cluster node's bus port is a port.
func TestFreePortsAreNeverReused(t *testing.T) {
	seen := map[int]bool{}
	for i := range 200 {
		p, err := freePort(i%2 == 0)
		if err != nil {
			t.Fatal(err)
		}
		if seen[p] {
			t.Fatalf("port %d given twice", p)
		}
		seen[p] = true
		if i%2 == 0 {
			if p+10000 > 65535 {
				t.Fatalf("cluster port %d: its bus port %d is no port", p, p+10000)
			}
			seen[p+10000] = true
		}
		if l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p))); err != nil {
			t.Fatalf("port %d given but not free: %v", p, err)
		} else {
			l.Close()
		}
	}
}

// TestShortStartsNothing: under -short every starter refuses, saying to
// call Need.
func TestShortStartsNothing(t *testing.T) {
	if !testing.Short() {
		t.Skip("checks -short's refusal")
	}
	if _, err := Start(); err != errShort {
		t.Fatalf("Start under -short: %v, want %v", err, errShort)
	}
	if _, err := StartCluster(3, 0); err != errShort {
		t.Fatalf("StartCluster under -short: %v", err)
	}
	if _, err := StartSentinels(0); err != errShort {
		t.Fatalf("StartSentinels under -short: %v", err)
	}
}
