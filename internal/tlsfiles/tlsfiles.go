// Package tlsfiles serves a listener's TLS from files: a certificate and
// its key, and optionally a CA that clients must present a certificate of
// (mTLS). The files are looked at again at most once a second as
// handshakes come, and a change is loaded, so that a renewed certificate
// takes effect without a restart; a change that does not load (a
// half-written file) keeps the last good one.
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// Files are one listener's TLS files.
type Files struct {
	cert, key, ca string

	mu      sync.Mutex
	checked time.Time
	stamp   string // the files' sizes and modification times
	cfg     *tls.Config
	now     func() time.Time
}

// Load reads the files (ca may be empty: no client certificates asked
// for) and fails if they do not make a certificate.
func Load(cert, key, ca string) (*Files, error) {
	if cert == "" || key == "" {
		return nil, errors.New("tls: a certificate file and a key file are both needed")
	}
	f := &Files{cert: cert, key: key, ca: ca, now: time.Now}
	stamp, err := f.stampNow()
	if err != nil {
		return nil, err
	}
	cfg, err := f.load()
	if err != nil {
		return nil, err
	}
	f.cfg, f.stamp, f.checked = cfg, stamp, f.now()
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
		if stamp, err := f.stampNow(); err == nil && stamp != f.stamp {
			if cfg, err := f.load(); err == nil {
				f.cfg, f.stamp = cfg, stamp
			}
		}
	}
	return f.cfg
}

// stampNow describes the files' sizes and modification times.
func (f *Files) stampNow() (string, error) {
	s := ""
	for _, p := range []string{f.cert, f.key, f.ca} {
		if p == "" {
			continue
		}
		fi, err := os.Stat(p)
		if err != nil {
			return "", fmt.Errorf("tls: %w", err)
		}
		s += fmt.Sprintf("%s:%d:%d;", p, fi.Size(), fi.ModTime().UnixNano())
	}
	return s, nil
}

// load reads the files into a configuration.
func (f *Files) load() (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(f.cert, f.key)
	if err != nil {
		return nil, fmt.Errorf("tls: certificate %s and key %s: %w", f.cert, f.key, err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}, Certificates: []tls.Certificate{cert}}
	if f.ca != "" {
		pem, err := os.ReadFile(f.ca)
		if err != nil {
			return nil, fmt.Errorf("tls: client CA: %w", err)
		}
		cfg.ClientCAs = x509.NewCertPool()
		if !cfg.ClientCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls: client CA %s: no PEM certificate in it", f.ca)
		}
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}
