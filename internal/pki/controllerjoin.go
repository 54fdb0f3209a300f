package pki

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
)

// controllerJoinPrefix starts every controller join token, so that it is
// never mistaken for a machine's (EncodeJoinToken).
const controllerJoinPrefix = "lifeline-controller-join-1."

// controllerJoinIDBytes is how many random bytes a token's id holds.
const controllerJoinIDBytes = 8

// ControllerJoin is a one-time token with which a controller joins a
// model's controllers: where they are and the CA they present (the joining
// controller trusts nothing else), and the token's id and secret, which it
// presents once, over TLS, to receive the key-encryption key of the
// model's CA key. The controllers store only the secret's hash. It formats
// (%v, %#v) with its secret redacted.
type ControllerJoin struct {
	Controllers []string  `json:"controllers"`
	CACert      string    `json:"ca_cert"`
	ID          string    `json:"id"`
	Secret      string    `json:"secret"`
	Expires     time.Time `json:"expires"`
}

// NewControllerJoin returns a token for a controller to join the
// controllers at addrs, whose CA is caPEM, until expires; and the hash of
// its secret, which is what the controllers store under its id.
func NewControllerJoin(addrs []string, caPEM []byte, expires time.Time) (ControllerJoin, string, error) {
	b := make([]byte, controllerJoinIDBytes)
	if _, err := rand.Read(b); err != nil {
		return ControllerJoin{}, "", fmt.Errorf("new controller join token: %w", err)
	}
	secret, err := NewSecret()
	if err != nil {
		return ControllerJoin{}, "", fmt.Errorf("new controller join token: %w", err)
	}
	j := ControllerJoin{Controllers: addrs, CACert: string(caPEM), ID: hex.EncodeToString(b), Secret: secret, Expires: expires.UTC()}
	if err := j.Validate(); err != nil {
		return ControllerJoin{}, "", fmt.Errorf("new controller join token: %w", err)
	}
	return j, HashSecret(secret), nil
}

// ValidControllerJoinID says whether id has the form of a controller join
// token's id: 16 lowercase hex digits.
func ValidControllerJoinID(id string) bool {
	if len(id) != 2*controllerJoinIDBytes {
		return false
	}
	for _, c := range id {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// Validate checks that j names at least one controller, each as
// host:port, holds a CA certificate, a well-formed id and secret and an
// expiry.
func (j ControllerJoin) Validate() error {
	if len(j.Controllers) == 0 {
		return errors.New("no controller addresses")
	}
	for _, addr := range j.Controllers {
		if err := checkHostPort(addr); err != nil {
			return err
		}
	}
	if _, err := caPool([]byte(j.CACert)); err != nil {
		return err
	}
	switch {
	case !ValidControllerJoinID(j.ID):
		return fmt.Errorf("malformed token id %q", j.ID)
	case !validSecret(j.Secret):
		return errors.New("malformed secret")
	case j.Expires.IsZero():
		return errors.New("no expiry")
	}
	return nil
}

// String returns j with its secret redacted.
func (j ControllerJoin) String() string {
	return fmt.Sprintf("{Controllers:%v ID:%s Expires:%s Secret:<redacted>}", j.Controllers, j.ID, j.Expires.Format(time.RFC3339))
}

// GoString returns j with its secret redacted.
func (j ControllerJoin) GoString() string {
	return fmt.Sprintf("pki.ControllerJoin{Controllers:%#v, ID:%q, Expires:%q, Secret:<redacted>}", j.Controllers, j.ID, j.Expires.Format(time.RFC3339))
}

// Encode packs j into one line of text, to keep in a file (mode 0600) and
// hand to the new controller's host privately.
func (j ControllerJoin) Encode() (string, error) {
	if err := j.Validate(); err != nil {
		return "", fmt.Errorf("controller join token: %w", err)
	}
	token, err := packToken(controllerJoinPrefix, j)
	if err != nil {
		return "", fmt.Errorf("controller join token: %w", err)
	}
	return token, nil
}

// DecodeControllerJoin unpacks a token made by Encode (surrounding space
// ignored).
func DecodeControllerJoin(token string) (ControllerJoin, error) {
	var j ControllerJoin
	rest, ok := strings.CutPrefix(strings.TrimSpace(token), controllerJoinPrefix)
	if !ok {
		if strings.HasPrefix(strings.TrimSpace(token), joinPrefix) {
			return j, errors.New("this is a machine's join token (for lifelined machine-agent), not a controller's: make one with ctl add-controller")
		}
		return j, fmt.Errorf("not a controller join token: it should start with %q (ctl add-controller makes one)", controllerJoinPrefix)
	}
	if err := unpackToken(rest, &j); err != nil {
		return j, fmt.Errorf("controller join token is damaged: %w", err)
	}
	if err := j.Validate(); err != nil {
		return j, fmt.Errorf("controller join token: %w", err)
	}
	return j, nil
}
