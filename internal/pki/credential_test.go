package pki

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
)

func TestNewSecret(t *testing.T) {
	seen := make(map[string]bool)
	for range 100 {
		s, err := NewSecret()
		if err != nil {
			t.Fatalf("NewSecret() error = %v", err)
		}
		b, err := base64.RawURLEncoding.DecodeString(s)
		if err != nil {
			t.Fatalf("NewSecret() = %q, not URL-safe base64: %v", s, err)
		}
		if len(b) < 32 {
			t.Errorf("NewSecret() holds %d bytes, want at least 32", len(b))
		}
		if seen[s] {
			t.Fatalf("NewSecret() = %q twice", s)
		}
		seen[s] = true
	}
}

func TestVerifySecret(t *testing.T) {
	secret := mustNewSecret(t)
	other := mustNewSecret(t)
	hash := HashSecret(secret)
	if !strings.HasPrefix(hash, "sha256:") {
		t.Errorf("HashSecret() = %q, want a sha256: prefix", hash)
	}
	if strings.Contains(hash, secret) {
		t.Errorf("HashSecret(%q) = %q, contains the secret", secret, hash)
	}
	if again := HashSecret(secret); again != hash {
		t.Errorf("HashSecret() = %q then %q, want the same", hash, again)
	}

	flip := func(s string, i int) string {
		b := []byte(s)
		if b[i] == 'A' {
			b[i] = 'B'
		} else {
			b[i] = 'A'
		}
		return string(b)
	}
	short := base64.RawURLEncoding.EncodeToString([]byte("sixteen byte key"))

	for _, tc := range []struct {
		name   string
		secret string
		hash   string
		want   bool
	}{
		{"right secret", secret, hash, true},
		{"wrong secret", other, hash, false},
		{"secret with one character changed", flip(secret, 5), hash, false},
		{"empty secret", "", hash, false},
		{"empty secret, its own hash", "", HashSecret(""), false},
		{"short secret, its own hash", short, HashSecret(short), false},
		{"not base64, its own hash", strings.Repeat("!", 43), HashSecret(strings.Repeat("!", 43)), false},
		{"empty hash", secret, "", false},
		{"hash with one character changed", secret, flip(hash, 20), false},
		{"hash of another secret", secret, HashSecret(other), false},
		{"truncated hash", secret, hash[:len(hash)-1], false},
		{"hash without prefix", secret, strings.TrimPrefix(hash, "sha256:"), false},
		{"hash with another prefix", secret, "sha512:" + strings.TrimPrefix(hash, "sha256:"), false},
		{"hash is the secret", secret, secret, false},
		{"hash is prefix only", secret, "sha256:", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := VerifySecret(tc.secret, tc.hash); got != tc.want {
				t.Errorf("VerifySecret(%q, %q) = %v, want %v", tc.secret, tc.hash, got, tc.want)
			}
		})
	}
}

func TestValidateHash(t *testing.T) {
	for _, tc := range []struct {
		hash    string
		wantErr bool
	}{
		{HashSecret(mustNewSecret(t)), false},
		{"", true},
		{"sha256:", true},
		{"sha256:abc", true},
		{"md5:" + strings.Repeat("A", 43), true},
	} {
		if err := ValidateHash(tc.hash); (err != nil) != tc.wantErr {
			t.Errorf("ValidateHash(%q) = %v, want error %v", tc.hash, err, tc.wantErr)
		}
	}
}

func TestNewCredential(t *testing.T) {
	cred, hash, err := NewCredential("machine-3")
	if err != nil {
		t.Fatalf("NewCredential(machine-3) error = %v", err)
	}
	if cred.Tag != "machine-3" {
		t.Errorf("NewCredential(machine-3).Tag = %q, want %q", cred.Tag, "machine-3")
	}
	if !VerifySecret(cred.Secret, hash) {
		t.Errorf("VerifySecret(NewCredential(machine-3)) = false, want true")
	}
	if err := cred.Validate(); err != nil {
		t.Errorf("NewCredential(machine-3).Validate() = %v, want nil", err)
	}
	if _, _, err := NewCredential("machine-x"); err == nil {
		t.Errorf("NewCredential(machine-x) error = nil, want an error")
	}
}

func TestCredentialDoesNotPrintSecret(t *testing.T) {
	cred := Credential{Tag: "unit-kv/0", Secret: mustNewSecret(t)}
	cfg := ClientConfig{Controllers: []string{"a:1"}, Tag: "admin", Secret: cred.Secret}
	for _, format := range []string{"%v", "%+v", "%s", "%#v"} {
		for _, v := range []any{cred, &cred, cfg, &cfg} {
			if got := fmt.Sprintf(format, v); strings.Contains(got, cred.Secret) {
				t.Errorf("Sprintf(%q, %T) = %q, shows the secret", format, v, got)
			}
		}
	}
	if got, want := fmt.Sprint(cred), "unit-kv/0"; got != want {
		t.Errorf("Sprint(credential) = %q, want %q", got, want)
	}
}

func TestCredentialMetadata(t *testing.T) {
	cred := Credential{Tag: "unit-kv/0", Secret: mustNewSecret(t)}
	if !cred.RequireTransportSecurity() {
		t.Errorf("RequireTransportSecurity() = false, want true")
	}
	md, err := cred.GetRequestMetadata(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	mdv := make(map[string][]string)
	for k, v := range md {
		if k != strings.ToLower(k) {
			t.Errorf("metadata key %q is not lowercase", k)
		}
		mdv[k] = []string{v}
	}
	got, err := CredentialFromMetadata(mdv)
	if err != nil || got != cred {
		t.Errorf("CredentialFromMetadata(GetRequestMetadata()) = %v, %v, want %v, nil", got, err, cred)
	}

	for _, tc := range []struct {
		name string
		md   map[string][]string
		want string
	}{
		{"nothing", nil, "no lifeline-tag"},
		{"no secret", map[string][]string{MetadataTag: {"admin"}}, "no lifeline-secret"},
		{"empty secret", map[string][]string{MetadataTag: {"admin"}, MetadataSecret: {""}}, "no lifeline-secret"},
		{"no tag", map[string][]string{MetadataSecret: {"x"}}, "no lifeline-tag"},
		{"bad tag", map[string][]string{MetadataTag: {"root"}, MetadataSecret: {"x"}}, `invalid tag "root"`},
		{"two tags", map[string][]string{MetadataTag: {"admin", "machine-1"}, MetadataSecret: {"x"}}, "2 values of lifeline-tag"},
		{"two secrets", map[string][]string{MetadataTag: {"admin"}, MetadataSecret: {"x", "y"}}, "2 values of lifeline-secret"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := CredentialFromMetadata(tc.md)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("CredentialFromMetadata(%v) error = %v, want one containing %q", tc.md, err, tc.want)
			}
		})
	}
}

func mustNewSecret(t *testing.T) string {
	t.Helper()
	s, err := NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	return s
}
