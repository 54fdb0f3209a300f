package e2etest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// EtcdTLS names the files of an etcd cluster's TLS material that a client
// needs: the CA certificate and a client certificate with its key (the
// controller's --etcd-cacert, --etcd-cert and --etcd-key).
type EtcdTLS struct {
	CACert     string
	ClientCert string
	ClientKey  string
	// MemberCert and MemberKey serve the members' client and peer
	// listeners, and authenticate each member to the others.
	MemberCert string
	MemberKey  string
}

// writeEtcdTLS makes a CA, a member certificate for 127.0.0.1 and
// localhost (server and client use: members dial each other with it) and a
// client certificate, and writes them into dir.
func writeEtcdTLS(dir string) (EtcdTLS, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return EtcdTLS{}, err
	}
	files := EtcdTLS{
		CACert:     filepath.Join(dir, "ca.pem"),
		ClientCert: filepath.Join(dir, "client.pem"), ClientKey: filepath.Join(dir, "client-key.pem"),
		MemberCert: filepath.Join(dir, "member.pem"), MemberKey: filepath.Join(dir, "member-key.pem"),
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return EtcdTLS{}, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "lifeline test etcd CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(7 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true, IsCA: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return EtcdTLS{}, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return EtcdTLS{}, err
	}
	if err := writePEM(files.CACert, "CERTIFICATE", caDER, 0o644); err != nil {
		return EtcdTLS{}, err
	}
	issue := func(serial int64, cn string, usages []x509.ExtKeyUsage, certPath, keyPath string) error {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(7 * 24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: usages,
			DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
		if err != nil {
			return fmt.Errorf("issue %s: %w", cn, err)
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return err
		}
		if err := writePEM(keyPath, "PRIVATE KEY", keyDER, 0o600); err != nil {
			return err
		}
		return writePEM(certPath, "CERTIFICATE", der, 0o644)
	}
	both := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	if err := issue(2, "etcd member", both, files.MemberCert, files.MemberKey); err != nil {
		return EtcdTLS{}, err
	}
	if err := issue(3, "lifeline", []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, files.ClientCert, files.ClientKey); err != nil {
		return EtcdTLS{}, err
	}
	return files, nil
}

func writePEM(path, kind string, der []byte, mode os.FileMode) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), mode)
}
