package pki

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
)

// alpnH2 is the ALPN protocol of HTTP/2, which gRPC runs over.
const alpnH2 = "h2"

// ServerTLSConfig returns the controller's TLS configuration: cert, TLS 1.3
// at least, HTTP/2 (for gRPC) by ALPN. It asks for no client certificate:
// callers authenticate with the bearer credentials of Credential, over this
// connection.
func ServerTLSConfig(cert tls.Certificate) *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   tls.VersionTLS13,
		NextProtos:   []string{alpnH2},
	}
}

// ClientTLSConfig returns the TLS configuration of a client of the
// controller: it trusts the CA certificates in caPEM and nothing else (not
// the system roots), requires TLS 1.3 and offers HTTP/2 (for gRPC) by ALPN.
//
// serverName is the name (or IP address) the server's certificate must be
// valid for, without a port. Leave it empty to let the dialer fill it in from
// the address it dials, as gRPC's TLS credentials and tls.Dial do; set it
// when dialing an address that the certificate does not name.
func ClientTLSConfig(caPEM []byte, serverName string) (*tls.Config, error) {
	pool, err := caPool(caPEM)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		RootCAs:    pool,
		ServerName: serverName,
		MinVersion: tls.VersionTLS13,
		NextProtos: []string{alpnH2},
	}, nil
}

// caPool parses caPEM, which must hold CA certificates only.
func caPool(caPEM []byte) (*x509.CertPool, error) {
	certs, err := parseCertsPEM(caPEM)
	if err != nil {
		return nil, fmt.Errorf("parse CA certificate: %w", err)
	}
	pool := x509.NewCertPool()
	for _, cert := range certs {
		if !cert.IsCA {
			return nil, fmt.Errorf("parse CA certificate: %q is not a CA certificate", cert.Subject.CommonName)
		}
		pool.AddCert(cert)
	}
	return pool, nil
}
