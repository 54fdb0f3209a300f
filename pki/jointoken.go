package pki

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
)

// joinPrefix starts every join token, so that a pasted token is recognised
// and a truncated one is not mistaken for something else.
const joinPrefix = "lifeline-join-1."

// EncodeJoinToken packs everything a manual machine's agent needs to reach
// the controller and prove who it is (the addresses, the CA, the machine's
// tag and secret) into one string to paste on the host.
func EncodeJoinToken(c ClientConfig) (string, error) {
	if err := c.Validate(); err != nil {
		return "", fmt.Errorf("join token: %w", err)
	}
	data, err := json.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("join token: %w", err)
	}
	return joinPrefix + base64.RawURLEncoding.EncodeToString(data), nil
}

// DecodeJoinToken unpacks a token made by EncodeJoinToken.
func DecodeJoinToken(token string) (ClientConfig, error) {
	var c ClientConfig
	rest, ok := strings.CutPrefix(strings.TrimSpace(token), joinPrefix)
	if !ok {
		return c, fmt.Errorf("not a join token: it should start with %q", joinPrefix)
	}
	data, err := base64.RawURLEncoding.DecodeString(rest)
	if err != nil {
		return c, fmt.Errorf("join token is damaged: %w", err)
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return c, fmt.Errorf("join token is damaged: %w", err)
	}
	if err := c.Validate(); err != nil {
		return c, fmt.Errorf("join token: %w", err)
	}
	return c, nil
}
