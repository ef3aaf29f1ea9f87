// Package tlsfiles serves a listener's TLS from files: a certificate and
// its key, and optionally a CA that clients must present a certificate of
// (mTLS), and optionally a name such a certificate must carry. The files
// are read again at most once a second as handshakes come, and a change
// of their content is loaded, so that a renewed certificate takes effect
// without a restart. Content, not size and modification time: a
// Kubernetes Secret or ConfigMap swap (a new `..data` generation) can
// bring files of the same size and time. A change that does not load (a
// half-written file) keeps the last good one.
package tlsfiles

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"time"
)

// Files are one listener's TLS files.
type Files struct {
	cert, key, ca, san string

	mu      sync.Mutex
	checked time.Time
	content []byte // the files' content as last loaded
	cfg     *tls.Config
	now     func() time.Time
}

// Load reads the files (ca may be empty: no client certificates asked
// for) and fails if they do not make a certificate. With a ca, san (may
// be empty: any) is a name a client's certificate must carry: a DNS name
// of its subject alternative names, equal but for case, or an IP address
// of them. A wildcard name in the certificate does not match: a
// certificate the CA issued for *.example.com is some other service's,
// not the one named (envoyproxy/ratelimit's GRPC_CLIENT_TLS_SAN lets it
// match, as a server's name would).
func Load(cert, key, ca, san string) (*Files, error) {
	if cert == "" || key == "" {
		return nil, errors.New("tls: a certificate file and a key file are both needed")
	}
	if san != "" && ca == "" {
		return nil, fmt.Errorf("tls: the client certificate name %q needs a client CA to check certificates against", san)
	}
	f := &Files{cert: cert, key: key, ca: ca, san: san, now: time.Now}
	files, err := f.read()
	if err != nil {
		return nil, err
	}
	cfg, err := f.load(files)
	if err != nil {
		return nil, err
	}
	f.cfg, f.content, f.checked = cfg, bytes.Join(files[:], []byte{0}), f.now()
	return f, nil
}

// Config is the listener's TLS configuration: each handshake gets the
// files' current certificate and client CA.
func (f *Files) Config() *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS12,
		NextProtos:         []string{"h2", "http/1.1"},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) { return f.current(), nil },
		// ServeTLS wants to see a certificate source of its own.
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &f.current().Certificates[0], nil },
	}
}

// current returns the configuration of the files as they are, reloading
// them if they changed since they were last looked at (a second ago or
// more).
func (f *Files) current() *tls.Config {
	f.mu.Lock()
	defer f.mu.Unlock()
	if now := f.now(); now.Sub(f.checked) >= time.Second {
		f.checked = now
		if files, err := f.read(); err == nil {
			if content := bytes.Join(files[:], []byte{0}); !bytes.Equal(content, f.content) {
				if cfg, err := f.load(files); err == nil {
					f.cfg, f.content = cfg, content
				}
			}
		}
	}
	return f.cfg
}

// read reads the certificate, key and CA files (the CA's is nil without
// one). Each is small: reading them once a second costs less than the
// handshakes that ask.
func (f *Files) read() (files [3][]byte, err error) {
	for i, p := range []string{f.cert, f.key, f.ca} {
		if p == "" {
			continue
		}
		if files[i], err = os.ReadFile(p); err != nil {
			return files, fmt.Errorf("tls: %w", err)
		}
	}
	return files, nil
}

// load makes a configuration of the files' content.
func (f *Files) load(files [3][]byte) (*tls.Config, error) {
	cert, err := tls.X509KeyPair(files[0], files[1])
	if err != nil {
		return nil, fmt.Errorf("tls: certificate %s and key %s: %w", f.cert, f.key, err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}, Certificates: []tls.Certificate{cert}}
	if f.ca != "" {
		cfg.ClientCAs = x509.NewCertPool()
		if !cfg.ClientCAs.AppendCertsFromPEM(files[2]) {
			return nil, fmt.Errorf("tls: client CA %s: no PEM certificate in it", f.ca)
		}
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
		if san := f.san; san != "" {
			cfg.VerifyConnection = func(cs tls.ConnectionState) error {
				if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
					return errors.New("tls: no verified client certificate")
				}
				if !carries(cs.VerifiedChains[0][0], san) {
					return fmt.Errorf("tls: the client certificate does not carry the name %q the listener requires", san)
				}
				return nil
			}
		}
	}
	return cfg, nil
}

// carries reports whether cert names san among its subject alternative
// names: a DNS name equal to it but for case and a final dot, no
// wildcard; or, for an IP address, that address.
func carries(cert *x509.Certificate, san string) bool {
	if ip := net.ParseIP(san); ip != nil {
		for _, a := range cert.IPAddresses {
			if a.Equal(ip) {
				return true
			}
		}
		return false
	}
	want := strings.TrimSuffix(san, ".")
	for _, n := range cert.DNSNames {
		if !strings.Contains(n, "*") && strings.EqualFold(strings.TrimSuffix(n, "."), want) {
			return true
		}
	}
	return false
}
