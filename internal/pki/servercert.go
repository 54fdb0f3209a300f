package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

const (
	// serverCertValidFor is how long a server certificate that
	// LoadOrCreateServerCert issues lasts.
	serverCertValidFor = 365 * 24 * time.Hour
	// serverCertRenewBefore is how long before its expiry
	// LoadOrCreateServerCert replaces a server certificate.
	serverCertRenewBefore = 30 * 24 * time.Hour
	// serverCommonName is the subject of server certificates; clients check
	// the subject alternative names, never this.
	serverCommonName = "lifeline controller"
)

// defaultServerHosts are in every server certificate, so that clients on the
// controller's own host can always connect.
var defaultServerHosts = []string{"localhost", "127.0.0.1", "::1"}

// dnsNameRE matches a DNS name (lowercase, no trailing dot), optionally a
// wildcard one.
var dnsNameRE = regexp.MustCompile(`^(\*\.)?[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$`)

// IssueServerCert issues a server certificate signed by ca with a new ECDSA
// P-256 key, valid from now (backdated by an hour for clock skew) for
// validFor, or until the CA expires if that is sooner. hosts are the DNS names
// and IP addresses clients dial; localhost, 127.0.0.1 and ::1 are always
// added. It returns the certificate and the key (PKCS #8), PEM-encoded.
func (ca *CA) IssueServerCert(hosts []string, validFor time.Duration) (certPEM, keyPEM []byte, err error) {
	if validFor <= 0 {
		return nil, nil, fmt.Errorf("issue server certificate: validity %s is not positive", validFor)
	}
	dnsNames, ips, err := serverSANs(hosts)
	if err != nil {
		return nil, nil, fmt.Errorf("issue server certificate: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("issue server certificate: generate key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, fmt.Errorf("issue server certificate: %w", err)
	}
	now := time.Now()
	notAfter := now.Add(validFor)
	if notAfter.After(ca.cert.NotAfter) {
		notAfter = ca.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: serverCommonName, Organization: []string{organization}},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		DNSNames:              dnsNames,
		IPAddresses:           ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("issue server certificate: %w", err)
	}
	keyPEM, err = marshalKeyPEM(key)
	if err != nil {
		return nil, nil, fmt.Errorf("issue server certificate: %w", err)
	}
	return encodePEM("CERTIFICATE", der), keyPEM, nil
}

// LoadOrCreateServerCert returns the server certificate kept in dir
// (ServerCertFile and ServerKeyFile) when it was issued by ca, is valid for
// more than 30 more days and covers every one of hosts (and localhost,
// 127.0.0.1 and ::1); otherwise it issues a new one, valid for a year, and
// writes it there (the key first, mode 0600, then the certificate, each
// atomically; a crash between the two leaves a pair that does not match,
// which the next call replaces). It creates dir (mode 0700) when missing.
//
// A kept certificate covering more hosts than asked for is kept. (While the
// CA itself has 30 days or less to live, every call issues a new
// certificate, which expires with the CA.) A key file
// that others may read is an error, not a reason to issue a new key: whoever
// read it can impersonate the controller until the old certificate expires,
// and the operator must know.
func LoadOrCreateServerCert(dir string, ca *CA, hosts []string) (tls.Certificate, error) {
	dnsNames, ips, err := serverSANs(hosts)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("server certificate: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return tls.Certificate{}, fmt.Errorf("create server certificate directory: %w", err)
	}
	certPath := filepath.Join(dir, ServerCertFile)
	keyPath := filepath.Join(dir, ServerKeyFile)

	cert, ok, err := loadServerCert(certPath, keyPath, ca, dnsNames, ips, time.Now())
	if err != nil {
		return tls.Certificate{}, err
	}
	if ok {
		return cert, nil
	}

	certPEM, keyPEM, err := ca.IssueServerCert(hosts, serverCertValidFor)
	if err != nil {
		return tls.Certificate{}, err
	}
	if err := WriteFileAtomic(keyPath, keyPEM, 0o600); err != nil {
		return tls.Certificate{}, fmt.Errorf("save server key: %w", err)
	}
	if err := WriteFileAtomic(certPath, certPEM, 0o644); err != nil {
		return tls.Certificate{}, fmt.Errorf("save server certificate: %w", err)
	}
	cert, err = tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("load new server certificate: %w", err)
	}
	return cert, nil
}

// loadServerCert loads the certificate kept in certPath and keyPath and
// reports whether it may still be used at now. Only failures that a new
// certificate would not cure are errors.
func loadServerCert(certPath, keyPath string, ca *CA, dnsNames []string, ips []net.IP, now time.Time) (tls.Certificate, bool, error) {
	certPEM, err := os.ReadFile(certPath)
	if errors.Is(err, fs.ErrNotExist) {
		return tls.Certificate{}, false, nil
	}
	if err != nil {
		return tls.Certificate{}, false, fmt.Errorf("read server certificate: %w", err)
	}
	keyPEM, err := readPrivateFile(keyPath, "server key")
	if errors.Is(err, fs.ErrNotExist) {
		return tls.Certificate{}, false, nil
	}
	if err != nil {
		return tls.Certificate{}, false, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM) // also checks that they match
	if err != nil {
		return tls.Certificate{}, false, nil
	}
	leaf := cert.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return tls.Certificate{}, false, nil
		}
		cert.Leaf = leaf
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	opts := x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	if _, err := leaf.Verify(opts); err != nil {
		return tls.Certificate{}, false, nil // another CA's, or expired
	}
	if leaf.NotAfter.Sub(now) <= serverCertRenewBefore {
		return tls.Certificate{}, false, nil
	}
	if !coversHosts(leaf, dnsNames, ips) {
		return tls.Certificate{}, false, nil
	}
	return cert, true, nil
}

// coversHosts reports whether every one of dnsNames and ips is among cert's
// subject alternative names (exactly: a wildcard name covers only itself).
func coversHosts(cert *x509.Certificate, dnsNames []string, ips []net.IP) bool {
	for _, name := range dnsNames {
		if !slices.ContainsFunc(cert.DNSNames, func(have string) bool { return strings.EqualFold(have, name) }) {
			return false
		}
	}
	for _, ip := range ips {
		if !slices.ContainsFunc(cert.IPAddresses, ip.Equal) {
			return false
		}
	}
	return true
}

// serverSANs splits hosts, plus the default hosts, into DNS names and IP
// addresses, normalized and without duplicates. An IPv6 address may be
// written in brackets; a name is lowercased and loses a trailing dot.
func serverSANs(hosts []string) (dnsNames []string, ips []net.IP, err error) {
	seen := make(map[string]bool)
	for _, h := range slices.Concat(hosts, defaultServerHosts) {
		if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
			h = h[1 : len(h)-1]
		}
		if ip := net.ParseIP(h); ip != nil {
			if ip4 := ip.To4(); ip4 != nil {
				ip = ip4
			}
			if key := ip.String(); !seen[key] {
				seen[key] = true
				ips = append(ips, ip)
			}
			continue
		}
		name := strings.TrimSuffix(strings.ToLower(h), ".")
		if len(name) > 253 || !dnsNameRE.MatchString(name) {
			if _, _, err := net.SplitHostPort(h); err == nil {
				return nil, nil, fmt.Errorf("invalid host %q: want a DNS name or an IP address, without a port", h)
			}
			return nil, nil, fmt.Errorf("invalid host %q: want a DNS name or an IP address", h)
		}
		if !seen[name] {
			seen[name] = true
			dnsNames = append(dnsNames, name)
		}
	}
	return dnsNames, ips, nil
}
