package pki

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// registerPrefix starts every registration token.
const registerPrefix = "lifeline-register-1."

// RegistrationToken is what ctl add-user hands to a new user: where the
// controllers are, the fingerprint of their CA (CAFingerprint), the user's
// name and the registration's one-time secret. It carries no credential:
// the user makes its own (ctl register) and binds it with the secret.
type RegistrationToken struct {
	Controllers   []string `json:"controllers"`
	CAFingerprint string   `json:"ca_sha256"`
	User          string   `json:"user"`
	Secret        string   `json:"secret"`
}

// Validate reports a token that cannot be used.
func (t RegistrationToken) Validate() error {
	switch {
	case len(t.Controllers) == 0:
		return errors.New("no controller addresses")
	case len(t.CAFingerprint) != 64:
		return errors.New("no CA fingerprint")
	case t.User == "":
		return errors.New("no user")
	case !validSecret(t.Secret):
		return errors.New("no valid secret")
	}
	for _, a := range t.Controllers {
		if err := checkHostPort(a); err != nil {
			return err
		}
	}
	return nil
}

// EncodeRegistrationToken packs t into one string to hand over.
func EncodeRegistrationToken(t RegistrationToken) (string, error) {
	if err := t.Validate(); err != nil {
		return "", fmt.Errorf("registration token: %w", err)
	}
	data, err := json.Marshal(t)
	if err != nil {
		return "", fmt.Errorf("registration token: %w", err)
	}
	return registerPrefix + base64.RawURLEncoding.EncodeToString(data), nil
}

// DecodeRegistrationToken unpacks a token made by EncodeRegistrationToken.
func DecodeRegistrationToken(token string) (RegistrationToken, error) {
	var t RegistrationToken
	rest, ok := strings.CutPrefix(strings.TrimSpace(token), registerPrefix)
	if !ok {
		return t, fmt.Errorf("not a registration token: it should start with %q", registerPrefix)
	}
	data, err := base64.RawURLEncoding.DecodeString(rest)
	if err != nil {
		return t, fmt.Errorf("registration token is damaged: %w", err)
	}
	if err := json.Unmarshal(data, &t); err != nil {
		return t, fmt.Errorf("registration token is damaged: %w", err)
	}
	if err := t.Validate(); err != nil {
		return t, fmt.Errorf("registration token: %w", err)
	}
	return t, nil
}

// CAFingerprint is the SHA-256 of the DER of the first certificate in
// caPEM, in hex: what a registration token pins.
func CAFingerprint(caPEM []byte) (string, error) {
	cert, err := parseCertPEM(caPEM)
	if err != nil {
		return "", fmt.Errorf("CA certificate: %w", err)
	}
	sum := sha256.Sum256(cert.Raw)
	return hex.EncodeToString(sum[:]), nil
}
