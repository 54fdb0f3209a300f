package pki

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestIssueServerCertSANs(t *testing.T) {
	ca := newTestCA(t)
	for _, tc := range []struct {
		name    string
		hosts   []string
		wantDNS []string
		wantIPs []string
	}{
		{"defaults only", nil, []string{"localhost"}, []string{"127.0.0.1", "::1"}},
		{
			"names and addresses",
			[]string{"ctl.example.com", "10.0.0.5", "[fd00::1]", "Node1.Example.com."},
			[]string{"ctl.example.com", "node1.example.com", "localhost"},
			[]string{"10.0.0.5", "fd00::1", "127.0.0.1", "::1"},
		},
		{"duplicates", []string{"localhost", "127.0.0.1", "LOCALHOST"}, []string{"localhost"}, []string{"127.0.0.1", "::1"}},
		{"wildcard", []string{"*.ctl.example.com"}, []string{"*.ctl.example.com", "localhost"}, []string{"127.0.0.1", "::1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			certPEM, _, err := ca.IssueServerCert(tc.hosts, time.Hour)
			if err != nil {
				t.Fatalf("IssueServerCert(%q) error = %v", tc.hosts, err)
			}
			cert, err := parseCertPEM(certPEM)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(cert.DNSNames, tc.wantDNS) {
				t.Errorf("IssueServerCert(%q) DNS names = %q, want %q", tc.hosts, cert.DNSNames, tc.wantDNS)
			}
			var ips []string
			for _, ip := range cert.IPAddresses {
				ips = append(ips, ip.String())
			}
			if !slices.Equal(ips, tc.wantIPs) {
				t.Errorf("IssueServerCert(%q) IP addresses = %q, want %q", tc.hosts, ips, tc.wantIPs)
			}
		})
	}
}

func TestIssueServerCertErrors(t *testing.T) {
	ca := newTestCA(t)
	for _, tc := range []struct {
		name     string
		hosts    []string
		validFor time.Duration
		want     string
	}{
		{"empty host", []string{""}, time.Hour, `invalid host ""`},
		{"host with port", []string{"ctl.example.com:17070"}, time.Hour, "without a port"},
		{"space", []string{"ctl example"}, time.Hour, "invalid host"},
		{"underscore", []string{"ctl_1.example.com"}, time.Hour, "invalid host"},
		{"zero validity", nil, 0, "not positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := ca.IssueServerCert(tc.hosts, tc.validFor)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("IssueServerCert(%q, %s) error = %v, want one containing %q", tc.hosts, tc.validFor, err, tc.want)
			}
		})
	}
}

func TestIssueServerCertCappedByCA(t *testing.T) {
	ca, err := NewCA("short", 48*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, _, err := ca.IssueServerCert(nil, 365*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := parseCertPEM(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := cert.NotAfter, ca.Certificate().NotAfter; got.After(want) {
		t.Errorf("IssueServerCert(_, 1 year) by a CA expiring %s expires %s, want no later", want, got)
	}
}

func TestLoadOrCreateServerCert(t *testing.T) {
	ca := newTestCA(t)
	otherCA := newTestCA(t)

	for _, tc := range []struct {
		name string
		// prepare leaves dir as a previous start would have, or did.
		prepare   func(t *testing.T, dir string)
		hosts     []string
		wantReuse bool
	}{
		{
			name: "same hosts",
			prepare: func(t *testing.T, dir string) {
				mustLoadOrCreateServerCert(t, dir, ca, []string{"ctl.example.com", "10.0.0.5"})
			},
			hosts:     []string{"ctl.example.com", "10.0.0.5"},
			wantReuse: true,
		},
		{
			name: "fewer hosts, and the defaults spelled out",
			prepare: func(t *testing.T, dir string) {
				mustLoadOrCreateServerCert(t, dir, ca, []string{"ctl.example.com", "10.0.0.5"})
			},
			hosts:     []string{"10.0.0.5", "localhost", "::1"},
			wantReuse: true,
		},
		{
			name:    "new host",
			prepare: func(t *testing.T, dir string) { mustLoadOrCreateServerCert(t, dir, ca, []string{"ctl.example.com"}) },
			hosts:   []string{"ctl.example.com", "10.0.0.6"},
		},
		{
			name:    "other host",
			prepare: func(t *testing.T, dir string) { mustLoadOrCreateServerCert(t, dir, ca, []string{"ctl.example.com"}) },
			hosts:   []string{"ctl2.example.com"},
		},
		{
			name:    "expires in 10 days",
			prepare: func(t *testing.T, dir string) { writeServerCert(t, dir, ca, nil, 10*24*time.Hour) },
		},
		{
			name:      "expires in 60 days",
			prepare:   func(t *testing.T, dir string) { writeServerCert(t, dir, ca, nil, 60*24*time.Hour) },
			wantReuse: true,
		},
		{
			name:    "issued by another CA",
			prepare: func(t *testing.T, dir string) { writeServerCert(t, dir, otherCA, nil, 365*24*time.Hour) },
		},
		{
			name: "key does not match",
			prepare: func(t *testing.T, dir string) {
				writeServerCert(t, dir, ca, nil, 365*24*time.Hour)
				_, keyPEM, err := ca.IssueServerCert(nil, time.Hour)
				if err != nil {
					t.Fatal(err)
				}
				writeFile(t, filepath.Join(dir, ServerKeyFile), keyPEM, 0o600)
			},
		},
		{
			name: "key missing",
			prepare: func(t *testing.T, dir string) {
				writeServerCert(t, dir, ca, nil, 365*24*time.Hour)
				os.Remove(filepath.Join(dir, ServerKeyFile))
			},
		},
		{
			name: "garbage certificate",
			prepare: func(t *testing.T, dir string) {
				writeServerCert(t, dir, ca, nil, 365*24*time.Hour)
				writeFile(t, filepath.Join(dir, ServerCertFile), []byte("garbage"), 0o644)
			},
		},
		{
			name:    "empty dir",
			prepare: func(t *testing.T, dir string) {},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.prepare(t, dir)
			before, _ := os.ReadFile(filepath.Join(dir, ServerCertFile))

			cert, err := LoadOrCreateServerCert(dir, ca, tc.hosts)
			if err != nil {
				t.Fatalf("LoadOrCreateServerCert(%q) error = %v", tc.hosts, err)
			}
			after, err := os.ReadFile(filepath.Join(dir, ServerCertFile))
			if err != nil {
				t.Fatal(err)
			}
			if reused := bytes.Equal(before, after); reused != tc.wantReuse {
				t.Errorf("LoadOrCreateServerCert(%q) kept the certificate = %v, want %v", tc.hosts, reused, tc.wantReuse)
			}
			if cert.Leaf == nil || !bytes.Equal(cert.Leaf.Raw, mustParseCertPEM(t, after).Raw) {
				t.Errorf("LoadOrCreateServerCert(%q) returned a certificate other than the one in %s", tc.hosts, ServerCertFile)
			}
			assertMode(t, filepath.Join(dir, ServerKeyFile), 0o600)
			if err := verifyServerPair(t, after, mustRead(t, filepath.Join(dir, ServerKeyFile)), ca); err != nil {
				t.Errorf("LoadOrCreateServerCert(%q) left an unusable certificate: %v", tc.hosts, err)
			}
			for _, h := range append(tc.hosts, "localhost", "127.0.0.1", "::1") {
				if err := cert.Leaf.VerifyHostname(strings.Trim(h, "[]")); err != nil {
					t.Errorf("LoadOrCreateServerCert(%q) certificate does not cover %q: %v", tc.hosts, h, err)
				}
			}

			// Idempotent: a second call keeps what the first left.
			again, err := LoadOrCreateServerCert(dir, ca, tc.hosts)
			if err != nil {
				t.Fatalf("LoadOrCreateServerCert(%q) second call error = %v", tc.hosts, err)
			}
			if !bytes.Equal(again.Certificate[0], cert.Certificate[0]) {
				t.Errorf("LoadOrCreateServerCert(%q) second call issued a new certificate, want the same", tc.hosts)
			}
		})
	}
}

func TestLoadOrCreateServerCertRefusesReadableKey(t *testing.T) {
	ca := newTestCA(t)
	dir := t.TempDir()
	mustLoadOrCreateServerCert(t, dir, ca, nil)
	chmod(t, filepath.Join(dir, ServerKeyFile), 0o640)
	_, err := LoadOrCreateServerCert(dir, ca, nil)
	if want := "is readable by others (mode 0640): chmod 600 it"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("LoadOrCreateServerCert(key mode 0640) error = %v, want one containing %q", err, want)
	}
}

func newTestCA(t *testing.T) *CA {
	t.Helper()
	ca, err := NewCA("test CA", 24*time.Hour*365)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func mustLoadOrCreateServerCert(t *testing.T, dir string, ca *CA, hosts []string) tls.Certificate {
	t.Helper()
	cert, err := LoadOrCreateServerCert(dir, ca, hosts)
	if err != nil {
		t.Fatalf("LoadOrCreateServerCert(%q) error = %v", hosts, err)
	}
	return cert
}

// writeServerCert puts in dir a server certificate issued by ca for validFor.
func writeServerCert(t *testing.T, dir string, ca *CA, hosts []string, validFor time.Duration) {
	t.Helper()
	certPEM, keyPEM, err := ca.IssueServerCert(hosts, validFor)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, ServerKeyFile), keyPEM, 0o600)
	writeFile(t, filepath.Join(dir, ServerCertFile), certPEM, 0o644)
}

// verifyServerPair checks that certPEM and keyPEM are a matching pair and
// that the certificate is a server certificate issued by ca.
func verifyServerPair(t *testing.T, certPEM, keyPEM []byte, ca *CA) error {
	t.Helper()
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Certificate())
	_, err = pair.Leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	return err
}

func mustParseCertPEM(t *testing.T, data []byte) *x509.Certificate {
	t.Helper()
	c, err := parseCertPEM(data)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
