package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fairgate/fairgate/internal/testcerts"
)

func pool(t *testing.T, dir string) *x509.CertPool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	p := x509.NewCertPool()
	p.AppendCertsFromPEM(b)
	return p
}

// TestReloadAndClientCertificates: a renewed certificate is served from
// the next handshake a second on, a broken one keeps the last good; with a
// client CA, a client without a certificate is refused and one with a
// certificate of that CA is let in.
func TestReloadAndClientCertificates(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	if err := testcerts.Write(a, "first"); err != nil {
		t.Fatal(err)
	}
	if err := testcerts.Write(b, "second"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cp := func(from, name string) {
		data, _ := os.ReadFile(filepath.Join(from, name))
		os.WriteFile(filepath.Join(dir, name), data, 0o600)
	}
	for _, n := range []string{"server.crt", "server.key", "ca.crt"} {
		cp(a, n)
	}
	f, err := Load(filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key"), filepath.Join(dir, "ca.crt"), "")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	f.now = func() time.Time { return now }
	dial := serve(t, f)
	if _, err := dial(a, ""); err == nil {
		t.Fatal("a client without a certificate was let in")
	}
	if cn, err := dial(a, "client"); err != nil || cn != "first server" {
		t.Fatalf("first certificate: %q %v", cn, err)
	}
	// Renewed: the next handshake, a second on, gets the new one.
	for _, n := range []string{"server.crt", "server.key", "ca.crt"} {
		cp(b, n)
	}
	now = now.Add(time.Second)
	if cn, err := dial(b, "client"); err != nil || cn != "second server" {
		t.Fatalf("after the renewal: %q %v", cn, err)
	}
	// A broken file keeps the last good certificate.
	os.WriteFile(filepath.Join(dir, "server.crt"), []byte("half-writ"), 0o600)
	now = now.Add(time.Second)
	if cn, err := dial(b, "client"); err != nil || cn != "second server" {
		t.Fatalf("with a broken file: %q %v, want the last good certificate", cn, err)
	}
	if _, err := Load(filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key"), "", ""); err == nil {
		t.Fatal("a broken certificate file was loaded at start")
	}
}

// serve listens with f's configuration and returns a dialer: it shakes
// hands trusting the CA in roots, with that directory's certificate named
// client (empty: none), and returns the server's name or the error.
func serve(t *testing.T, f *Files) func(roots, client string) (string, error) {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", f.Config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { c.(*tls.Conn).Handshake(); c.Close() }()
		}
	}()
	return func(roots, client string) (string, error) {
		cfg := &tls.Config{RootCAs: pool(t, roots), ServerName: "localhost"}
		if client != "" {
			cert, err := tls.LoadX509KeyPair(filepath.Join(roots, client+".crt"), filepath.Join(roots, client+".key"))
			if err != nil {
				t.Fatal(err)
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		c, err := tls.Dial("tcp", ln.Addr().String(), cfg)
		if err != nil {
			return "", err
		}
		defer c.Close()
		// A refused client certificate shows on the first read (TLS 1.3).
		c.SetReadDeadline(time.Now().Add(time.Second))
		if _, err := c.Read(make([]byte, 1)); err != nil && strings.Contains(err.Error(), "certificate") {
			return "", err
		}
		return c.ConnectionState().PeerCertificates[0].Subject.CommonName, nil
	}
}

// TestClientSAN: with a client SAN, a certificate of the client CA that
// does not carry the name is refused (as envoyproxy/ratelimit's
// GRPC_CLIENT_TLS_SAN refuses it), nor one whose only name is a wildcard
// covering it (the attacker review's *.test: that service lets it in),
// one that carries it is let in, and a SAN without a CA does not load.
func TestClientSAN(t *testing.T) {
	dir := t.TempDir()
	if err := testcerts.Write(dir, "san"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		san, client string
		ok          bool
	}{
		{"envoy.test", "client", true},
		{"envoy.test", "other-client", false},
		{"envoy.test", "wildcard-client", false}, // some other service's certificate
		{"ENVOY.test", "client", true},
		{"", "other-client", true},
		{"envoy.test", "", false},
	} {
		f, err := Load(filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key"), filepath.Join(dir, "ca.crt"), tc.san)
		if err != nil {
			t.Fatal(err)
		}
		_, err = serve(t, f)(dir, tc.client)
		if (err == nil) != tc.ok {
			t.Errorf("SAN %q, client certificate %q: %v, want let in %v", tc.san, tc.client, err, tc.ok)
		}
	}
	if _, err := Load(filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key"), "", "envoy.test"); err == nil || !strings.Contains(err.Error(), "client CA") {
		t.Errorf("a client SAN without a client CA: %v, want an error naming the CA", err)
	}
}

// TestReloadKubernetesSwap: the files as a Kubernetes Secret volume holds
// them (name -> ..data/name, ..data -> a generation directory), swapped to
// a new generation whose files have the same sizes and modification
// times as the old (only content and inode differ, as in
// envoyproxy/ratelimit's TestReloadGRPCServerCerts): the next handshake a
// second on gets the new certificate and trusts only the new client CA.
func TestReloadKubernetesSwap(t *testing.T) {
	vol := t.TempDir()
	var gens [2]string
	for i, cn := range []string{"first", "second"} {
		gens[i] = filepath.Join(vol, "..2026_12_04_10_00_0"+string(rune('0'+i)))
		if err := os.Mkdir(gens[i], 0o700); err != nil {
			t.Fatal(err)
		}
		if err := testcerts.Write(gens[i], cn); err != nil {
			t.Fatal(err)
		}
	}
	// Same sizes (PEM ignores what follows its blocks) and times.
	stamp := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	for _, n := range []string{"server.crt", "server.key", "ca.crt"} {
		var data [2][]byte
		for i := range gens {
			data[i], _ = os.ReadFile(filepath.Join(gens[i], n))
		}
		size := max(len(data[0]), len(data[1])) + 16
		for i := range gens {
			p := filepath.Join(gens[i], n)
			if err := os.WriteFile(p, append(data[i], []byte(strings.Repeat("\n", size-len(data[i])))...), 0o600); err != nil {
				t.Fatal(err)
			}
			os.Chtimes(p, stamp, stamp)
		}
	}
	link := func(gen string) {
		tmp := filepath.Join(vol, "..data_tmp")
		if err := os.Symlink(filepath.Base(gen), tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(vol, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	link(gens[0])
	for _, n := range []string{"server.crt", "server.key", "ca.crt"} {
		if err := os.Symlink(filepath.Join("..data", n), filepath.Join(vol, n)); err != nil {
			t.Fatal(err)
		}
	}
	f, err := Load(filepath.Join(vol, "server.crt"), filepath.Join(vol, "server.key"), filepath.Join(vol, "ca.crt"), "")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	f.now = func() time.Time { return now }
	dial := serve(t, f)
	if cn, err := dial(gens[0], "client"); err != nil || cn != "first server" {
		t.Fatalf("first generation: %q %v", cn, err)
	}
	link(gens[1])
	now = now.Add(time.Second)
	if cn, err := dial(gens[1], "client"); err != nil || cn != "second server" {
		t.Fatalf("after the swap: %q %v, want the second generation's certificate", cn, err)
	}
	if _, err := dial(gens[1], "client"); err != nil {
		t.Fatal(err)
	}
	if _, err := dial(gens[0], "client"); err == nil {
		t.Fatal("after the swap a client trusting only the old CA still connects")
	}
}
