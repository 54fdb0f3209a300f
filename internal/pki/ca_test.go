package pki

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestNewCA(t *testing.T) {
	ca, err := NewCA("test CA", 24*time.Hour)
	if err != nil {
		t.Fatalf("NewCA() error = %v", err)
	}
	cert := ca.Certificate()
	if !cert.IsCA {
		t.Errorf("NewCA().Certificate().IsCA = false, want true")
	}
	if got, want := cert.Subject.CommonName, "test CA"; got != want {
		t.Errorf("NewCA().Certificate().Subject.CommonName = %q, want %q", got, want)
	}
	if d := time.Until(cert.NotAfter); d < 23*time.Hour || d > 25*time.Hour {
		t.Errorf("NewCA(_, 24h) expires in %s, want about 24h", d)
	}
	if _, err := parseCertPEM(ca.CertPEM()); err != nil {
		t.Errorf("parse NewCA().CertPEM(): %v", err)
	}

	for _, tc := range []struct {
		name     string
		cn       string
		validFor time.Duration
	}{
		{"empty name", "", time.Hour},
		{"zero validity", "x", 0},
		{"negative validity", "x", -time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewCA(tc.cn, tc.validFor); err == nil {
				t.Errorf("NewCA(%q, %s) error = nil, want an error", tc.cn, tc.validFor)
			}
		})
	}
}

func TestLoadOrCreateCAIdempotent(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	ca1, created, err := LoadOrCreateCA(dir)
	if err != nil {
		t.Fatalf("LoadOrCreateCA() error = %v", err)
	}
	if !created {
		t.Errorf("LoadOrCreateCA(empty dir) created = false, want true")
	}
	assertMode(t, dir, 0o700)
	assertMode(t, filepath.Join(dir, CAKeyFile), 0o600)

	ca2, created, err := LoadOrCreateCA(dir)
	if err != nil {
		t.Fatalf("LoadOrCreateCA() second call error = %v", err)
	}
	if created {
		t.Errorf("LoadOrCreateCA() second call created = true, want false")
	}
	if !bytes.Equal(ca1.CertPEM(), ca2.CertPEM()) {
		t.Errorf("LoadOrCreateCA() second call loaded a different CA certificate")
	}
	// The loaded key signs for the same CA: a certificate issued by the
	// loaded CA verifies against the first one.
	certPEM, keyPEM, err := ca2.IssueServerCert(nil, time.Hour)
	if err != nil {
		t.Fatalf("IssueServerCert() with loaded CA error = %v", err)
	}
	if err := verifyServerPair(t, certPEM, keyPEM, ca1); err != nil {
		t.Errorf("certificate issued by the loaded CA does not verify against the created one: %v", err)
	}
}

func TestLoadOrCreateCAKeyWithoutCert(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, CAKeyFile), []byte("left over from a crash"), 0o600)
	_, created, err := LoadOrCreateCA(dir)
	if err != nil || !created {
		t.Fatalf("LoadOrCreateCA(dir with key only) = %v, %v, want true, nil", created, err)
	}
}

func TestLoadOrCreateCAErrors(t *testing.T) {
	other, err := NewCA("other", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	otherKey, err := other.keyPEM()
	if err != nil {
		t.Fatal(err)
	}
	expired, err := newCA("expired", time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	expiredKey, err := expired.keyPEM()
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T, dir string)
		want    string
	}{
		{
			name: "certificate without key",
			prepare: func(t *testing.T, dir string) {
				os.Remove(filepath.Join(dir, CAKeyFile))
			},
			want: "has no key",
		},
		{
			name: "key of another CA",
			prepare: func(t *testing.T, dir string) {
				writeFile(t, filepath.Join(dir, CAKeyFile), otherKey, 0o600)
			},
			want: "does not match",
		},
		{
			name: "key readable by others",
			prepare: func(t *testing.T, dir string) {
				chmod(t, filepath.Join(dir, CAKeyFile), 0o644)
			},
			want: "is readable by others (mode 0644): chmod 600 it",
		},
		{
			name: "garbage certificate",
			prepare: func(t *testing.T, dir string) {
				writeFile(t, filepath.Join(dir, CACertFile), []byte("not PEM"), 0o644)
			},
			want: "no PEM-encoded certificate",
		},
		{
			name: "expired",
			prepare: func(t *testing.T, dir string) {
				writeFile(t, filepath.Join(dir, CACertFile), expired.CertPEM(), 0o644)
				writeFile(t, filepath.Join(dir, CAKeyFile), expiredKey, 0o600)
			},
			want: "expired on",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if _, _, err := LoadOrCreateCA(dir); err != nil {
				t.Fatal(err)
			}
			tc.prepare(t, dir)
			_, _, err := LoadOrCreateCA(dir)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("LoadOrCreateCA() error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func writeFile(t *testing.T, path string, data []byte, perm os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, data, perm); err != nil {
		t.Fatal(err)
	}
	chmod(t, path, perm) // WriteFile keeps the mode of an existing file
}

func chmod(t *testing.T, path string, perm os.FileMode) {
	t.Helper()
	if err := os.Chmod(path, perm); err != nil {
		t.Fatal(err)
	}
}

func assertMode(t *testing.T, path string, want os.FileMode) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != want {
		t.Errorf("mode of %s = %04o, want %04o", path, got, want)
	}
}

// A CA survives the round trip through PEM (as controllers share it), and
// SaveCA writes what LoadOrCreateCA loads.
func TestParseAndSaveCA(t *testing.T) {
	ca, err := NewCA("test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := ca.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseCA(ca.CertPEM(), keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := NewCA("other", time.Hour)
	otherKey, _ := other.KeyPEM()
	if _, err := ParseCA(ca.CertPEM(), otherKey); err == nil || !strings.Contains(err.Error(), "does not match") {
		t.Fatalf("ParseCA with another CA's key: %v", err)
	}
	dir := t.TempDir()
	if err := SaveCA(dir, back); err != nil {
		t.Fatal(err)
	}
	loaded, created, err := LoadOrCreateCA(dir)
	if err != nil || created {
		t.Fatalf("LoadOrCreateCA after SaveCA: created %t, %v", created, err)
	}
	if !bytes.Equal(loaded.CertPEM(), ca.CertPEM()) {
		t.Fatal("SaveCA wrote another CA")
	}
}
