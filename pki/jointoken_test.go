package pki

import (
	"strings"
	"testing"
	"time"
)

func TestJoinTokenRoundTrip(t *testing.T) {
	ca, err := NewCA("test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cred, _, err := NewCredential("machine-4")
	if err != nil {
		t.Fatal(err)
	}
	in := ClientConfig{Controllers: []string{"10.0.0.1:17070"}, CACert: string(ca.CertPEM()), Tag: cred.Tag, Secret: cred.Secret}
	token, err := EncodeJoinToken(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := DecodeJoinToken(" " + token + "\n")
	if err != nil {
		t.Fatalf("DecodeJoinToken = %v", err)
	}
	if out.Tag != in.Tag || out.Secret != in.Secret || out.Controllers[0] != in.Controllers[0] || out.CACert != in.CACert {
		t.Errorf("DecodeJoinToken(EncodeJoinToken(c)) = %#v, want %#v", out, in)
	}
	for _, bad := range []string{"", "hello", token[:len(token)-10], strings.Replace(token, "1.", "2.", 1)} {
		if _, err := DecodeJoinToken(bad); err == nil {
			t.Errorf("DecodeJoinToken(%.20q...) = nil, want an error", bad)
		}
	}
}
