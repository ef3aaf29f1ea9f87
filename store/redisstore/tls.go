package redisstore

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// tlsConfig is the TLS configuration the options ask for: the system's
// roots or the CA file's, a client certificate, a server name, or no
// verification at all when skip_verify says so.
func (o options) tlsConfig() (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: o.serverName, InsecureSkipVerify: o.skipVerify}
	if o.caFile != "" {
		pem, err := os.ReadFile(o.caFile)
		if err != nil {
			return nil, fmt.Errorf("tls_ca_file: %w", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls_ca_file %s: no PEM certificate in it", o.caFile)
		}
	}
	if (o.certFile == "") != (o.keyFile == "") {
		return nil, errors.New("tls_cert_file and tls_key_file go together: the client certificate and its key")
	}
	if o.certFile != "" {
		cert, err := tls.LoadX509KeyPair(o.certFile, o.keyFile)
		if err != nil {
			return nil, fmt.Errorf("tls_cert_file, tls_key_file: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	if o.skipHostname && !o.skipVerify {
		// The chain is still verified, against the CA given (or the
		// system's); only the name in the certificate is not compared.
		c.InsecureSkipVerify = true
		c.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("redisstore: the server sent no certificate")
			}
			opts := x509.VerifyOptions{Roots: c.RootCAs, Intermediates: x509.NewCertPool()}
			for _, ic := range cs.PeerCertificates[1:] {
				opts.Intermediates.AddCert(ic)
			}
			_, err := cs.PeerCertificates[0].Verify(opts)
			return err
		}
	}
	return c, nil
}
