package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// Files of a controller's data directory that this package owns.
const (
	CACertFile     = "ca.pem"
	CAKeyFile      = "ca-key.pem"
	ServerCertFile = "server.pem"
	ServerKeyFile  = "server-key.pem"
)

const (
	// caCommonName names the CA that LoadOrCreateCA creates.
	caCommonName = "Lifeline CA"
	// caValidFor is how long that CA lasts. Clients pin it, so replacing it
	// means handing every client and agent a new CA certificate: it is made
	// to outlive the installation.
	caValidFor = 10 * 365 * 24 * time.Hour
	// clockSkew backdates certificates, so that a host whose clock is a
	// little behind the controller's accepts a certificate just issued.
	clockSkew = time.Hour
	// organization is the subject organization of every certificate.
	organization = "Lifeline"
)

// CA is a certificate authority: a self-signed CA certificate and its
// private key. Its methods are safe for concurrent use.
type CA struct {
	cert    *x509.Certificate
	key     crypto.Signer
	certPEM []byte
}

// NewCA makes a CA with a new ECDSA P-256 key, named commonName and valid
// from now (backdated by an hour for clock skew) for validFor.
func NewCA(commonName string, validFor time.Duration) (*CA, error) {
	if commonName == "" {
		return nil, errors.New("new CA: empty common name")
	}
	if validFor <= 0 {
		return nil, fmt.Errorf("new CA: validity %s is not positive", validFor)
	}
	now := time.Now()
	ca, err := newCA(commonName, now.Add(-clockSkew), now.Add(validFor))
	if err != nil {
		return nil, fmt.Errorf("new CA: %w", err)
	}
	return ca, nil
}

func newCA(commonName string, notBefore, notAfter time.Time) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName, Organization: []string{organization}},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true, // it signs leaf certificates only
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("create certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse new certificate: %w", err)
	}
	return &CA{cert: cert, key: key, certPEM: encodePEM("CERTIFICATE", der)}, nil
}

// CertPEM returns the CA certificate, PEM-encoded: what clients pin (the
// CACert of a ClientConfig, the caPEM of ClientTLSConfig). The caller must
// not modify it.
func (ca *CA) CertPEM() []byte { return ca.certPEM }

// Certificate returns the parsed CA certificate (to show its expiry, say).
// The caller must not modify it.
func (ca *CA) Certificate() *x509.Certificate { return ca.cert }

// KeyPEM returns the CA's private key, PEM-encoded: for the controllers of
// one model to share the CA (through etcd), never for clients.
func (ca *CA) KeyPEM() ([]byte, error) { return ca.keyPEM() }

func (ca *CA) keyPEM() ([]byte, error) {
	key, ok := ca.key.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("marshal CA key: unsupported key type %T", ca.key)
	}
	return marshalKeyPEM(key)
}

// LoadOrCreateCA loads the CA kept in dir (CACertFile and CAKeyFile), or,
// when dir holds no CA certificate, creates one valid for ten years and
// writes it there; created says which. It creates dir (mode 0700) when
// missing.
//
// The key is written first (mode 0600), then the certificate, each
// atomically, so a crash between the two leaves a key without a certificate:
// no client can have pinned that CA, and the next call replaces the key. A
// certificate without its key, a key that does not match, a key readable by
// others or an expired CA is an error, never silently replaced: clients pin
// the CA, so a new one locks every one of them out.
func LoadOrCreateCA(dir string) (ca *CA, created bool, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, false, fmt.Errorf("create CA directory: %w", err)
	}
	certPath := filepath.Join(dir, CACertFile)
	keyPath := filepath.Join(dir, CAKeyFile)

	certPEM, err := os.ReadFile(certPath)
	switch {
	case err == nil:
		ca, err := loadCA(certPath, certPEM, keyPath, time.Now())
		if err != nil {
			return nil, false, err
		}
		return ca, false, nil
	case !errors.Is(err, fs.ErrNotExist):
		return nil, false, fmt.Errorf("read CA certificate: %w", err)
	}

	ca, err = NewCA(caCommonName, caValidFor)
	if err != nil {
		return nil, false, err
	}
	keyPEM, err := ca.keyPEM()
	if err != nil {
		return nil, false, err
	}
	if err := WriteFileAtomic(keyPath, keyPEM, 0o600); err != nil {
		return nil, false, fmt.Errorf("save CA key: %w", err)
	}
	if err := WriteFileAtomic(certPath, ca.certPEM, 0o644); err != nil {
		return nil, false, fmt.Errorf("save CA certificate: %w", err)
	}
	return ca, true, nil
}

// LoadCA loads the CA kept in dir, checked as LoadOrCreateCA checks it;
// the error matches fs.ErrNotExist when dir holds no CA certificate.
func LoadCA(dir string) (*CA, error) {
	certPath := filepath.Join(dir, CACertFile)
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return nil, fmt.Errorf("read CA certificate: %w", err)
	}
	return loadCA(certPath, certPEM, filepath.Join(dir, CAKeyFile), time.Now())
}

// loadCA parses a CA from its certificate (already read) and its key file,
// and checks that they belong together and that the CA is usable at now.
func loadCA(certPath string, certPEM []byte, keyPath string, now time.Time) (*CA, error) {
	cert, err := parseCertPEM(certPEM)
	if err != nil {
		return nil, fmt.Errorf("load CA certificate %s: %w", certPath, err)
	}
	if !cert.IsCA || cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, fmt.Errorf("load CA certificate %s: not a CA certificate", certPath)
	}
	if now.After(cert.NotAfter) {
		return nil, fmt.Errorf("CA certificate %s expired on %s: a new CA means new client configs and agent CA certificates everywhere",
			certPath, cert.NotAfter.UTC().Format(time.DateOnly))
	}
	keyPEM, err := readPrivateFile(keyPath, "CA key")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("CA certificate %s has no key %s: restore the key from a backup", certPath, keyPath)
	}
	if err != nil {
		return nil, err
	}
	key, err := parseKeyPEM(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("load CA key %s: %w", keyPath, err)
	}
	if !keyMatches(cert, key) {
		return nil, fmt.Errorf("CA key %s does not match certificate %s", keyPath, certPath)
	}
	return &CA{cert: cert, key: key, certPEM: certPEM}, nil
}

// ParseCA returns the CA of a certificate and its key, PEM-encoded, checking
// what LoadOrCreateCA checks: a CA certificate, not expired, with its key.
func ParseCA(certPEM, keyPEM []byte) (*CA, error) {
	cert, err := parseCertPEM(certPEM)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	if !cert.IsCA || cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, errors.New("CA certificate: not a CA certificate")
	}
	if time.Now().After(cert.NotAfter) {
		return nil, fmt.Errorf("CA certificate expired on %s", cert.NotAfter.UTC().Format(time.DateOnly))
	}
	key, err := parseKeyPEM(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	if !keyMatches(cert, key) {
		return nil, errors.New("CA key does not match its certificate")
	}
	return &CA{cert: cert, key: key, certPEM: certPEM}, nil
}

// SaveCA writes ca into dir as LoadOrCreateCA keeps it, replacing the CA
// there: the key first, then the certificate, each atomically.
func SaveCA(dir string, ca *CA) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create CA directory: %w", err)
	}
	keyPEM, err := ca.keyPEM()
	if err != nil {
		return err
	}
	if err := WriteFileAtomic(filepath.Join(dir, CAKeyFile), keyPEM, 0o600); err != nil {
		return fmt.Errorf("save CA key: %w", err)
	}
	if err := WriteFileAtomic(filepath.Join(dir, CACertFile), ca.certPEM, 0o644); err != nil {
		return fmt.Errorf("save CA certificate: %w", err)
	}
	return nil
}
