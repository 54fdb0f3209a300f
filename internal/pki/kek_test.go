package pki

import (
	"bytes"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A sealed CA key opens with its key-encryption key only, as the key of its
// own certificate only, and holds nothing of the key in clear.
func TestSealKey(t *testing.T) {
	ca, err := NewCA("test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewCA("other", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	kek, err := NewKEK()
	if err != nil {
		t.Fatal(err)
	}
	wrong, err := NewKEK()
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := ca.SealKey(kek)
	if err != nil {
		t.Fatal(err)
	}
	if !IsSealedKey(sealed) {
		t.Errorf("IsSealedKey(SealKey()) = false, want true")
	}
	clear, _ := ca.KeyPEM()
	if IsSealedKey(clear) {
		t.Errorf("IsSealedKey(a key in clear) = true, want false")
	}
	if bytes.Contains(sealed, []byte("PRIVATE KEY")) {
		t.Errorf("SealKey() = %s, which looks like a key in clear", sealed)
	}
	der, _ := pem.Decode(clear)
	if bytes.Contains(sealed, der.Bytes[len(der.Bytes)-32:]) {
		t.Errorf("SealKey() holds the key's bytes")
	}
	again, _ := ca.SealKey(kek)
	if bytes.Equal(again, sealed) {
		t.Errorf("SealKey() twice gave the same bytes: the nonce is not random")
	}

	opened, err := OpenCA(ca.CertPEM(), sealed, kek)
	if err != nil {
		t.Fatalf("OpenCA(sealed, its KEK) = %v", err)
	}
	if k, _ := opened.KeyPEM(); !bytes.Equal(k, clear) {
		t.Errorf("OpenCA(sealed, its KEK) gave another key")
	}

	block, _ := pem.Decode(sealed)
	tampered := bytes.Clone(block.Bytes)
	tampered[len(tampered)-1] ^= 1
	for _, tc := range []struct {
		name     string
		cert     []byte
		sealed   []byte
		kek      KEK
		wrongKEK bool
	}{
		{"another KEK", ca.CertPEM(), sealed, wrong, true},
		{"no KEK", ca.CertPEM(), sealed, KEK{}, true},
		{"altered", ca.CertPEM(), encodePEM(SealedKeyPEMType, tampered), kek, true},
		{"another certificate", other.CertPEM(), sealed, kek, true},
		{"a key in clear", ca.CertPEM(), clear, kek, false},
		{"truncated", ca.CertPEM(), encodePEM(SealedKeyPEMType, block.Bytes[:20]), kek, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := OpenCA(tc.cert, tc.sealed, tc.kek)
			if err == nil {
				t.Fatalf("OpenCA() = nil error, want one")
			}
			if got := errors.Is(err, ErrWrongKEK); got != tc.wrongKEK {
				t.Errorf("OpenCA() = %v: errors.Is(ErrWrongKEK) = %t, want %t", err, got, tc.wrongKEK)
			}
		})
	}
}

// A KEK is saved private, loads back as itself, and never prints.
func TestKEKFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	if _, ok, err := LoadKEK(dir); ok || err != nil {
		t.Fatalf("LoadKEK(empty) = %t, %v; want false, nil", ok, err)
	}
	k, err := NewKEK()
	if err != nil {
		t.Fatal(err)
	}
	if err := SaveKEK(dir, k); err != nil {
		t.Fatal(err)
	}
	assertMode(t, filepath.Join(dir, KEKFile), 0o600)
	got, ok, err := LoadKEK(dir)
	if err != nil || !ok || got != k {
		t.Fatalf("LoadKEK(SaveKEK(k)) = %t, %v; want k", ok, err)
	}
	for _, s := range []string{fmt.Sprint(k), k.String(), fmt.Sprintf("%#v", k), fmt.Sprintf("%v", &k)} {
		if strings.Contains(s, fmt.Sprint(k.b[:4])) || len(s) > 40 {
			t.Errorf("a KEK formats as %q", s)
		}
	}
	if err := os.Chmod(filepath.Join(dir, KEKFile), 0o640); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadKEK(dir); err == nil || !strings.Contains(err.Error(), "readable by others") {
		t.Errorf("LoadKEK(mode 0640) = %v, want readable by others", err)
	}
	if err := os.WriteFile(filepath.Join(dir, KEKFile), []byte("hello\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadKEK(dir); err == nil {
		t.Errorf("LoadKEK(not a KEK) = nil error, want one")
	}
	if err := RemoveKEK(dir); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := LoadKEK(dir); ok || err != nil {
		t.Errorf("LoadKEK after RemoveKEK = %t, %v; want false, nil", ok, err)
	}
	if _, err := KEKFromBytes(make([]byte, 16)); err == nil {
		t.Errorf("KEKFromBytes(16 bytes) = nil error, want one")
	}
}

func TestControllerJoinRoundTrip(t *testing.T) {
	ca, err := NewCA("test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	expires := time.Now().Add(time.Hour).Truncate(time.Second)
	in, hash, err := NewControllerJoin([]string{"10.0.0.1:17070", "10.0.0.2:17070"}, ca.CertPEM(), expires)
	if err != nil {
		t.Fatal(err)
	}
	if !VerifySecret(in.Secret, hash) {
		t.Errorf("NewControllerJoin's hash does not verify its secret")
	}
	if !ValidControllerJoinID(in.ID) {
		t.Errorf("NewControllerJoin's id %q is not valid", in.ID)
	}
	token, err := in.Encode()
	if err != nil {
		t.Fatal(err)
	}
	out, err := DecodeControllerJoin(" " + token + "\n")
	if err != nil {
		t.Fatalf("DecodeControllerJoin = %v", err)
	}
	if out.ID != in.ID || out.Secret != in.Secret || !out.Expires.Equal(expires) || out.CACert != in.CACert || len(out.Controllers) != 2 {
		t.Errorf("DecodeControllerJoin(Encode(j)) = %#v, want %#v", out, in)
	}
	for _, s := range []string{fmt.Sprint(in), fmt.Sprintf("%#v", in)} {
		if strings.Contains(s, in.Secret) {
			t.Errorf("a controller join token formats with its secret: %s", s)
		}
	}
	mtok, _, err := NewJoinToken([]string{"10.0.0.1:17070"}, ca.CertPEM(), "1", expires)
	if err != nil {
		t.Fatal(err)
	}
	machine, err := EncodeJoinToken(mtok)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeControllerJoin(machine); err == nil || !strings.Contains(err.Error(), "machine's join token") {
		t.Errorf("DecodeControllerJoin(a machine's token) = %v, want it named a machine's", err)
	}
	for _, bad := range []string{"", "hello", token[:len(token)-10]} {
		if _, err := DecodeControllerJoin(bad); err == nil {
			t.Errorf("DecodeControllerJoin(%.20q...) = nil, want an error", bad)
		}
	}
}
