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
	f, err := Load(filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key"), filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	f.now = func() time.Time { return now }
	ln, err := tls.Listen("tcp", "127.0.0.1:0", f.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { c.(*tls.Conn).Handshake(); c.Close() }()
		}
	}()
	dial := func(roots string, client bool) (string, error) {
		cfg := &tls.Config{RootCAs: pool(t, roots), ServerName: "localhost"}
		if client {
			cert, err := tls.LoadX509KeyPair(filepath.Join(roots, "client.crt"), filepath.Join(roots, "client.key"))
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
		if err := c.Handshake(); err != nil {
			return "", err
		}
		// A refused client certificate shows on the first read.
		c.SetReadDeadline(time.Now().Add(time.Second))
		if _, err := c.Read(make([]byte, 1)); err != nil && strings.Contains(err.Error(), "certificate") {
			return "", err
		}
		return c.ConnectionState().PeerCertificates[0].Subject.CommonName, nil
	}
	if _, err := dial(a, false); err == nil {
		t.Fatal("a client without a certificate was let in")
	}
	if cn, err := dial(a, true); err != nil || cn != "first server" {
		t.Fatalf("first certificate: %q %v", cn, err)
	}
	// Renewed: the next handshake, a second on, gets the new one.
	for _, n := range []string{"server.crt", "server.key", "ca.crt"} {
		cp(b, n)
	}
	now = now.Add(time.Second)
	if cn, err := dial(b, true); err != nil || cn != "second server" {
		t.Fatalf("after the renewal: %q %v", cn, err)
	}
	// A broken file keeps the last good certificate.
	os.WriteFile(filepath.Join(dir, "server.crt"), []byte("half-writ"), 0o600)
	now = now.Add(time.Second)
	if cn, err := dial(b, true); err != nil || cn != "second server" {
		t.Fatalf("with a broken file: %q %v, want the last good certificate", cn, err)
	}
	if _, err := Load(filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key"), ""); err == nil {
		t.Fatal("a broken certificate file was loaded at start")
	}
}
