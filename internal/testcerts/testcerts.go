// Package testcerts makes a CA, a server certificate (127.0.0.1,
// localhost and redis.test) and a client certificate for tests, written to
// a directory as PEM files: ca.crt, server.crt, server.key, client.crt,
// client.key.
package testcerts

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Write makes the CA and the two certificates, named after cn (so that
// two sets tell apart), and writes them to dir.
func Write(dir, cn string) error {
	write := func(name, typ string, der []byte) error {
		return os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
	}
	key := func(name string) (*ecdsa.PrivateKey, error) {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, err
		}
		der, _ := x509.MarshalECPrivateKey(k)
		return k, write(name, "EC PRIVATE KEY", der)
	}
	now := time.Now()
	caKey, err := key("ca.key")
	if err != nil {
		return err
	}
	ca := &x509.Certificate{SerialNumber: big.NewInt(now.UnixNano()), Subject: pkix.Name{CommonName: cn + " CA"}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	if err := write("ca.crt", "CERTIFICATE", caDER); err != nil {
		return err
	}
	ca, _ = x509.ParseCertificate(caDER)
	for i, leaf := range []struct {
		name string
		tmpl x509.Certificate
	}{
		{"server", x509.Certificate{DNSNames: []string{"localhost", "redis.test"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}},
		{"client", x509.Certificate{DNSNames: []string{"envoy.test"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}},
		{"other-client", x509.Certificate{DNSNames: []string{"other.test"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}},
		{"wildcard-client", x509.Certificate{DNSNames: []string{"*.test"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}},
	} {
		k, err := key(leaf.name + ".key")
		if err != nil {
			return err
		}
		tmpl := leaf.tmpl
		tmpl.SerialNumber, tmpl.Subject = big.NewInt(now.UnixNano()+int64(1+i)), pkix.Name{CommonName: cn + " " + leaf.name}
		tmpl.NotBefore, tmpl.NotAfter, tmpl.KeyUsage = now.Add(-time.Hour), now.Add(time.Hour), x509.KeyUsageDigitalSignature
		der, err := x509.CreateCertificate(rand.Reader, &tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			return err
		}
		if err := write(leaf.name+".crt", "CERTIFICATE", der); err != nil {
			return err
		}
	}
	return nil
}
