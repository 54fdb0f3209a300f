package controller_test

import (
	"strings"

	"github.com/lifelinehq/lifeline/internal/pki"
)

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func pkiCredential(t interface{ Fatal(...any) }, tag string) pki.Credential {
	cred, _, err := pki.NewCredential(tag)
	if err != nil {
		t.Fatal(err)
	}
	return cred
}
