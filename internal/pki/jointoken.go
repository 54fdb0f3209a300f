package pki

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lifelinehq/lifeline/internal/names"
)

// joinPrefix starts every join token, so that a pasted token is recognised
// and a truncated one is not mistaken for something else.
const joinPrefix = "lifeline-join-2."

// oldJoinPrefix started the join tokens that carried the machine's
// credential itself, good for ever: they are refused, with a sentence.
const oldJoinPrefix = "lifeline-join-1."

// JoinToken is what a manual machine's host needs to join it: the
// controllers to dial and their CA, the machine, and a secret the
// controller takes once (MachineJoinService.JoinMachine), until Expires. It is not the
// machine's credential: the host makes that itself as it joins. It formats
// (%v, %#v) with its secret redacted.
type JoinToken struct {
	// Controllers are the controllers' addresses, host:port each.
	Controllers []string `json:"controllers"`
	// CACert is the controllers' CA certificate, PEM-encoded.
	CACert string `json:"ca_cert"`
	// Machine is the manual machine's id.
	Machine string `json:"machine"`
	// Secret is the token's secret, whose hash the controller keeps.
	Secret string `json:"secret"`
	// Expires is when the controller stops taking it.
	Expires time.Time `json:"expires"`
}

// NewJoinToken returns a join token for machine with a new secret, and the
// hash of that secret, which is what the controller stores.
func NewJoinToken(controllers []string, caCert []byte, machine string, expires time.Time) (tok JoinToken, hash string, err error) {
	secret, err := NewSecret()
	if err != nil {
		return JoinToken{}, "", fmt.Errorf("join token for machine %s: %w", machine, err)
	}
	tok = JoinToken{Controllers: controllers, CACert: string(caCert), Machine: machine, Secret: secret, Expires: expires.UTC()}
	if err := tok.Validate(); err != nil {
		return JoinToken{}, "", err
	}
	return tok, HashSecret(secret), nil
}

// Validate checks that t names at least one controller, each as
// host:port, holds a CA certificate, a machine id, a secret shaped like
// one NewSecret makes, and an expiry.
func (t JoinToken) Validate() error {
	if len(t.Controllers) == 0 {
		return errors.New("join token: no controller addresses")
	}
	for _, addr := range t.Controllers {
		if err := checkHostPort(addr); err != nil {
			return fmt.Errorf("join token: %w", err)
		}
	}
	if t.CACert == "" {
		return errors.New("join token: no CA certificate")
	}
	if _, err := caPool([]byte(t.CACert)); err != nil {
		return fmt.Errorf("join token: %w", err)
	}
	if !names.ValidMachine(t.Machine) {
		return fmt.Errorf("join token: invalid machine id %q", t.Machine)
	}
	if !validSecret(t.Secret) {
		return errors.New("join token: malformed secret")
	}
	if t.Expires.IsZero() {
		return errors.New("join token: no expiry")
	}
	return nil
}

// String returns t with its secret redacted.
func (t JoinToken) String() string {
	return fmt.Sprintf("{Controllers:%v Machine:%s Expires:%s Secret:<redacted>}", t.Controllers, t.Machine, t.Expires.Format(time.RFC3339))
}

// GoString returns t with its secret redacted.
func (t JoinToken) GoString() string {
	return fmt.Sprintf("pki.JoinToken{Controllers:%#v, Machine:%q, Expires:%s, Secret:<redacted>}", t.Controllers, t.Machine, t.Expires.Format(time.RFC3339))
}

// EncodeJoinToken packs t into one string to hand to the host.
func EncodeJoinToken(t JoinToken) (string, error) {
	if err := t.Validate(); err != nil {
		return "", err
	}
	token, err := packToken(joinPrefix, t)
	if err != nil {
		return "", fmt.Errorf("join token: %w", err)
	}
	return token, nil
}

// packToken is prefix, then v as JSON in URL-safe base64: one line of
// text to hand over privately.
func packToken(prefix string, v any) (string, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	return prefix + base64.RawURLEncoding.EncodeToString(data), nil
}

// unpackToken reads into v what packToken wrote after its prefix.
func unpackToken(rest string, v any) error {
	data, err := base64.RawURLEncoding.DecodeString(rest)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, v)
}

// DecodeJoinToken unpacks a token made by EncodeJoinToken, with the space
// around it (a file's newline) ignored.
func DecodeJoinToken(token string) (JoinToken, error) {
	var t JoinToken
	token = strings.TrimSpace(token)
	if rest, ok := strings.CutPrefix(token, oldJoinPrefix); ok {
		// The machine's credential itself: name the machine, if it can
		// be read, for the command that replaces it.
		var old struct {
			Tag string `json:"tag"`
		}
		data, _ := base64.RawURLEncoding.DecodeString(rest)
		if json.Unmarshal(data, &old) == nil {
			if kind, id, err := names.ParseTag(old.Tag); err == nil && kind == names.KindMachine {
				return t, fmt.Errorf("this join token is of an earlier kind, which joins no more: ask for a new one (ctl join-token %s)", id)
			}
		}
		return t, errors.New("this join token is of an earlier kind, which joins no more: ask for a new one (ctl join-token)")
	}
	rest, ok := strings.CutPrefix(token, joinPrefix)
	if !ok {
		return t, fmt.Errorf("not a join token: it should start with %q", joinPrefix)
	}
	if err := unpackToken(rest, &t); err != nil {
		return t, fmt.Errorf("join token is damaged: %w", err)
	}
	if err := t.Validate(); err != nil {
		return t, err
	}
	return t, nil
}
