package pki

import (
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestJoinTokenRoundTrip(t *testing.T) {
	ca, err := NewCA("test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	expires := time.Now().Add(time.Hour).Round(0)
	in, hash, err := NewJoinToken([]string{"10.0.0.1:17070"}, ca.CertPEM(), "4", expires)
	if err != nil {
		t.Fatal(err)
	}
	if !VerifySecret(in.Secret, hash) {
		t.Errorf("NewJoinToken's hash does not verify its secret")
	}
	token, err := EncodeJoinToken(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := DecodeJoinToken(" " + token + "\n")
	if err != nil {
		t.Fatalf("DecodeJoinToken = %v", err)
	}
	if out.Machine != "4" || out.Secret != in.Secret || out.Controllers[0] != in.Controllers[0] || out.CACert != in.CACert || !out.Expires.Equal(expires) {
		t.Errorf("DecodeJoinToken(EncodeJoinToken(t)) = %#v, want %#v", out, in)
	}
	if s := fmt.Sprintf("%v %#v %s", out, out, out); strings.Contains(s, in.Secret) {
		t.Errorf("a join token formats with its secret: %s", s)
	}
	for _, bad := range []string{"", "hello", token[:len(token)-10], strings.Replace(token, "2.", "3.", 1)} {
		if _, err := DecodeJoinToken(bad); err == nil {
			t.Errorf("DecodeJoinToken(%.20q...) = nil, want an error", bad)
		}
	}
	// A token of the kind that carried the machine's credential is
	// refused, naming the command that makes a new one.
	old := oldJoinPrefix + base64.RawURLEncoding.EncodeToString([]byte(`{"controllers":["10.0.0.1:17070"],"tag":"machine-4","secret":"x"}`))
	if _, err := DecodeJoinToken(old); err == nil || !strings.Contains(err.Error(), "ctl join-token 4") {
		t.Errorf("DecodeJoinToken(an earlier kind of token) = %v, want a refusal naming ctl join-token 4", err)
	}
}
