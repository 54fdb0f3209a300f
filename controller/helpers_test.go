package controller_test

import (
	"crypto/tls"
	"strings"

	"github.com/lifelinehq/lifeline/pki"
)

func tlsKeyPair(certPEM, keyPEM []byte) (tls.Certificate, error) {
	return tls.X509KeyPair(certPEM, keyPEM)
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func pkiCredential(t interface{ Fatal(...any) }, tag string) pki.Credential {
	cred, _, err := pki.NewCredential(tag)
	if err != nil {
		t.Fatal(err)
	}
	return cred
}
