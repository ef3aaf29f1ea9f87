package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/fairgate/fairgate/internal/testcerts"
	"github.com/fairgate/fairgate/internal/testwait"
)

// TestTLSListeners: with --tls-cert-file and --tls-key-file the decision
// API speaks only TLS, and serves a renewed certificate without a restart;
// the gRPC listener with --grpc-client-ca-file refuses a caller without a
// client certificate of that CA and serves one with it.
func TestTLSListeners(t *testing.T) {
	a, b, dir := t.TempDir(), t.TempDir(), t.TempDir()
	if err := testcerts.Write(a, "first"); err != nil {
		t.Fatal(err)
	}
	if err := testcerts.Write(b, "second"); err != nil {
		t.Fatal(err)
	}
	install := func(from string) {
		for _, n := range []string{"server.crt", "server.key", "ca.crt"} {
			data, _ := os.ReadFile(filepath.Join(from, n))
			os.WriteFile(filepath.Join(dir, n), data, 0o600)
		}
	}
	install(a)
	grpcAddr, internalAddr := freeAddr(t), freeAddr(t)
	sv := startServe(t, "--listen", "127.0.0.1:0", "--tls-cert-file", dir+"/server.crt", "--tls-key-file", dir+"/server.key",
		"--grpc-listen", grpcAddr, "--grpc-client-ca-file", dir+"/ca.crt",
		"--upstream", "http://127.0.0.1:1", "--internal-listen", internalAddr, "--internal-client-ca-file", dir+"/ca.crt")
	defer sv.stop()
	roots := func(d string) *x509.CertPool {
		p := x509.NewCertPool()
		pem, _ := os.ReadFile(filepath.Join(d, "ca.crt"))
		p.AppendCertsFromPEM(pem)
		return p
	}
	get := func(d string) (string, error) {
		c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots(d)}, DisableKeepAlives: true}}
		resp, err := c.Get("https://" + sv.addr + "/healthz")
		if err != nil {
			return "", err
		}
		resp.Body.Close()
		return resp.TLS.PeerCertificates[0].Subject.CommonName, nil
	}
	if cn, err := get(a); err != nil || cn != "first server" {
		t.Fatalf("https: %q %v", cn, err)
	}
	if resp, err := http.Get("http://" + sv.addr + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("plain HTTP on the TLS listener: %d, want 400", resp.StatusCode)
		}
	}
	// gRPC: no client certificate, refused; with one, served.
	health := func(withCert bool) error {
		client := ""
		if withCert {
			client = "client"
		}
		return grpcHealth(t, grpcAddr, a, client)
	}
	// The internal listener asks for a client certificate too.
	internal := func(withCert bool) error {
		cfg := &tls.Config{RootCAs: roots(a)}
		if withCert {
			cert, _ := tls.LoadX509KeyPair(filepath.Join(a, "client.crt"), filepath.Join(a, "client.key"))
			cfg.Certificates = []tls.Certificate{cert}
		}
		c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}}
		resp, err := c.Get("https://" + internalAddr + "/readyz")
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	if err := internal(false); err == nil {
		t.Fatal("the internal listener served a caller without a client certificate")
	}
	if err := internal(true); err != nil {
		t.Fatalf("the internal listener with a client certificate: %v", err)
	}
	if err := health(false); err == nil {
		t.Fatal("a gRPC caller without a client certificate was served")
	}
	if err := health(true); err != nil {
		t.Fatalf("a gRPC caller with a client certificate: %v", err)
	}
	// A renewed certificate is served from a second on, no restart.
	install(b)
	testwait.EventuallyNil(t, 30*time.Second, "the renewed certificate served", func() error {
		if cn, err := get(b); err != nil || cn != "second server" {
			return fmt.Errorf("served %q, %v", cn, err)
		}
		return nil
	})
}

// TestServeInternalTLSOnListen: without --upstream, --listen serves the
// internal endpoints, so --internal-tls-cert-file, --internal-tls-key-file
// and --internal-client-ca-file are its own: plain HTTP and a caller
// without a client certificate of that CA are refused; one with it is
// served.
func TestServeInternalTLSOnListen(t *testing.T) {
	dir := t.TempDir()
	if err := testcerts.Write(dir, "internal"); err != nil {
		t.Fatal(err)
	}
	sv := startServe(t, "--listen", "127.0.0.1:0", "--internal-tls-cert-file", dir+"/server.crt", "--internal-tls-key-file", dir+"/server.key",
		"--internal-client-ca-file", dir+"/ca.crt")
	defer sv.stop()
	pool := x509.NewCertPool()
	pem, _ := os.ReadFile(filepath.Join(dir, "ca.crt"))
	pool.AppendCertsFromPEM(pem)
	check := func(scheme string, withCert bool) (int, error) {
		cfg := &tls.Config{RootCAs: pool}
		if withCert {
			cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key"))
			if err != nil {
				t.Fatal(err)
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}}
		resp, err := c.Post(scheme+"://"+sv.addr+"/v1/check", "application/json", strings.NewReader(`{"tenant":"acme","class":"read"}`))
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	if code, err := check("http", false); err == nil && code == http.StatusOK {
		t.Fatal("plain HTTP, no client certificate: 200; --internal-* were ignored")
	}
	if code, err := check("https", false); err == nil {
		t.Fatalf("TLS without a client certificate: %d, want the handshake refused", code)
	}
	if code, err := check("https", true); err != nil || code != http.StatusOK {
		t.Fatalf("TLS with a client certificate: %d %v, want 200", code, err)
	}
}

// TestEnvoyGRPCClientSAN: started as envoyproxy/ratelimit is, with
// GRPC_SERVER_USE_TLS, its certificate files, GRPC_CLIENT_TLS_CACERT and
// GRPC_CLIENT_TLS_SAN, the gRPC listener serves a client certificate of
// the CA that carries the SAN and refuses one of the same CA that does
// not (fairgate used to serve it: any certificate of the CA was let in),
// as that service does; --grpc-client-san does the same without its
// environment.
func TestEnvoyGRPCClientSAN(t *testing.T) {
	dir := t.TempDir()
	if err := testcerts.Write(dir, "san"); err != nil {
		t.Fatal(err)
	}
	writeDomain(t, filepath.Join(dir, "rl", "ratelimit", "config"), "a.yaml", "a", 2)
	grpcAddr := freeAddr(t)
	_, grpcPort, _ := net.SplitHostPort(grpcAddr)
	for k, v := range map[string]string{
		"RUNTIME_ROOT": filepath.Join(dir, "rl"), "RUNTIME_SUBDIRECTORY": "ratelimit",
		"GRPC_HOST": "127.0.0.1", "GRPC_PORT": grpcPort,
		"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": dir + "/server.crt", "GRPC_SERVER_TLS_KEY": dir + "/server.key",
		"GRPC_CLIENT_TLS_CACERT": dir + "/ca.crt", "GRPC_CLIENT_TLS_SAN": "envoy.test",
	} {
		t.Setenv(k, v)
	}
	sv := startServe(t, "--listen", "127.0.0.1:0")
	defer sv.stop()
	for _, line := range strings.Split(sv.logs.String(), "\n") {
		if strings.Contains(line, "GRPC_CLIENT_TLS_SAN") && strings.Contains(line, "not support") {
			t.Errorf("GRPC_CLIENT_TLS_SAN is reported as not supported: %s", line)
		}
	}
	call := func(client string) error { return grpcHealth(t, grpcAddr, dir, client) }
	if err := call("client"); err != nil {
		t.Fatalf("a client certificate carrying GRPC_CLIENT_TLS_SAN: %v", err)
	}
	if err := call("other-client"); err == nil {
		t.Fatal("a client certificate of the CA without GRPC_CLIENT_TLS_SAN was served")
	}
}

// grpcHealth asks the gRPC health service at addr over TLS, trusting the
// CA in dir, with that directory's certificate named client (empty: none).
func grpcHealth(t *testing.T, addr, dir, client string) error {
	t.Helper()
	p := x509.NewCertPool()
	pem, _ := os.ReadFile(filepath.Join(dir, "ca.crt"))
	p.AppendCertsFromPEM(pem)
	cfg := &tls.Config{RootCAs: p, ServerName: "localhost"}
	if client != "" {
		cert, err := tls.LoadX509KeyPair(filepath.Join(dir, client+".crt"), filepath.Join(dir, client+".key"))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}
