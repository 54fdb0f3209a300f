package pki

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/names"
)

func validClientConfig(t *testing.T) ClientConfig {
	t.Helper()
	return ClientConfig{
		Controllers: []string{"10.0.0.5:17070", "[fd00::1]:17070", "ctl.example.com:17070"},
		CACert:      string(newTestCA(t).CertPEM()),
		Tag:         names.AdminTag,
		Secret:      mustNewSecret(t),
	}
}

func TestClientConfigRoundTrip(t *testing.T) {
	want := validClientConfig(t)
	path := filepath.Join(t.TempDir(), "home", ".config", "lifeline", "client.json")
	if err := WriteClientConfig(path, want); err != nil {
		t.Fatalf("WriteClientConfig() error = %v", err)
	}
	assertMode(t, path, 0o600)
	assertMode(t, filepath.Dir(path), 0o700)
	got, err := ReadClientConfig(path)
	if err != nil {
		t.Fatalf("ReadClientConfig() error = %v", err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ReadClientConfig(WriteClientConfig(c)) = %#v, want %#v", got, want)
	}
	if _, err := ClientTLSConfig([]byte(got.CACert), ""); err != nil {
		t.Errorf("ClientTLSConfig(read CA certificate) error = %v", err)
	}
}

func TestWriteClientConfigReplaces(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "client.json")
	writeFile(t, path, []byte("old and world-readable"), 0o644)

	first := validClientConfig(t)
	second := validClientConfig(t)
	second.Tag = "machine-3"
	for _, c := range []ClientConfig{first, second} {
		if err := WriteClientConfig(path, c); err != nil {
			t.Fatalf("WriteClientConfig() error = %v", err)
		}
	}
	assertMode(t, path, 0o600)
	got, err := ReadClientConfig(path)
	if err != nil {
		t.Fatalf("ReadClientConfig() error = %v", err)
	}
	if !reflect.DeepEqual(got, second) {
		t.Errorf("ReadClientConfig() after two writes = %#v, want the second, %#v", got, second)
	}
	assertDirHolds(t, dir, "client.json")
}

func TestWriteClientConfigFailureLeavesNoTempFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "client.json")
	if err := os.Mkdir(path, 0o700); err != nil { // renaming a file over it fails
		t.Fatal(err)
	}
	if err := WriteClientConfig(path, validClientConfig(t)); err == nil {
		t.Fatalf("WriteClientConfig(over a directory) error = nil, want an error")
	}
	assertDirHolds(t, dir, "client.json")
}

func TestWriteClientConfigValidates(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "client.json")
	c := validClientConfig(t)
	c.Controllers = nil
	if err := WriteClientConfig(path, c); err == nil || !strings.Contains(err.Error(), "no controller addresses") {
		t.Errorf("WriteClientConfig(no controllers) error = %v, want one containing %q", err, "no controller addresses")
	}
	assertDirHolds(t, dir)
}

func TestReadClientConfigRefusesSharedFile(t *testing.T) {
	for _, tc := range []struct {
		mode os.FileMode
		want string
	}{
		{0o644, "is readable by others (mode 0644): chmod 600 it"},
		{0o640, "is readable by others (mode 0640): chmod 600 it"},
		{0o604, "is readable by others (mode 0604): chmod 600 it"},
		{0o620, "is writable by others (mode 0620): chmod 600 it"},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "client.json")
			if err := WriteClientConfig(path, validClientConfig(t)); err != nil {
				t.Fatal(err)
			}
			chmod(t, path, tc.mode)
			_, err := ReadClientConfig(path)
			want := "client config " + path + " " + tc.want
			if err == nil || err.Error() != want {
				t.Errorf("ReadClientConfig(mode %04o) error = %v, want %q", tc.mode, err, want)
			}
		})
	}
}

func TestReadClientConfigErrors(t *testing.T) {
	ca := newTestCA(t)
	caJSON := strings.ReplaceAll(string(ca.CertPEM()), "\n", `\n`)
	secret := mustNewSecret(t)
	leafPEM, _, err := ca.IssueServerCert(nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	leafJSON := strings.ReplaceAll(string(leafPEM), "\n", `\n`)
	config := func(controllers, caCert, tag, secret string) string {
		return `{"controllers": ` + controllers + `, "ca_cert": "` + caCert + `", "tag": "` + tag + `", "secret": "` + secret + `"}`
	}

	for _, tc := range []struct {
		name    string
		content string
		want    string
	}{
		{"empty file", "", "unexpected end of JSON input"},
		{"not JSON", "controllers: [a:1]", "line 1, column 1: invalid character 'c'"},
		{"syntax error on line 3", "{\n  \"controllers\": [\"a:1\"],\n  \"tag\": admin\n}", "line 3, column 10: invalid character 'a'"},
		{"wrong type", `{"controllers": "a:1"}`, "line 1, column 21: json: cannot unmarshal string"},
		{"trailing garbage", config(`["a:1"]`, caJSON, "admin", secret) + " x", "invalid character 'x' after top-level value"},
		{"no controllers", config(`[]`, caJSON, "admin", secret), "no controller addresses"},
		{"controller without port", config(`["10.0.0.5"]`, caJSON, "admin", secret), `invalid controller address "10.0.0.5": want host:port`},
		{"controller without host", config(`[":17070"]`, caJSON, "admin", secret), `invalid controller address ":17070": want host:port`},
		{"controller with bad port", config(`["a:http"]`, caJSON, "admin", secret), `port "http" is not a number`},
		{"controller with port 0", config(`["a:0"]`, caJSON, "admin", secret), `port "0" is not a number from 1 to 65535`},
		{"no CA", config(`["a:1"]`, "", "admin", secret), "no CA certificate"},
		{"CA not PEM", config(`["a:1"]`, "MIIB...", "admin", secret), "parse CA certificate: no PEM-encoded certificate found"},
		{"CA is a leaf", config(`["a:1"]`, leafJSON, "admin", secret), "is not a CA certificate"},
		{"CA corrupt", config(`["a:1"]`, strings.Replace(caJSON, "MII", "MIX", 1), "admin", secret), "parse CA certificate: parse certificate 1"},
		{"bad tag", config(`["a:1"]`, caJSON, "root", secret), `invalid tag "root"`},
		{"no secret", config(`["a:1"]`, caJSON, "admin", ""), "credential admin: empty secret"},
		{"short secret", config(`["a:1"]`, caJSON, "admin", "hunter2"), "credential admin: malformed secret"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "client.json")
			writeFile(t, path, []byte(tc.content), 0o600)
			_, err := ReadClientConfig(path)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
				t.Errorf("ReadClientConfig(%s) error = %v, want one naming the file and containing %q", tc.name, err, tc.want)
			}
		})
	}

	t.Run("missing file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "client.json")
		_, err := ReadClientConfig(path)
		if err == nil || !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), path) {
			t.Errorf("ReadClientConfig(missing) error = %v, want a not-exist error naming the file", err)
		}
	})
	t.Run("directory", func(t *testing.T) {
		path := t.TempDir()
		_, err := ReadClientConfig(path)
		if want := "is not a regular file"; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ReadClientConfig(directory) error = %v, want one containing %q", err, want)
		}
	})
}

func TestDefaultClientConfigPath(t *testing.T) {
	t.Setenv("LIFELINE_CONFIG", "/etc/lifeline/ops.json")
	if got, err := DefaultClientConfigPath(); err != nil || got != "/etc/lifeline/ops.json" {
		t.Errorf("DefaultClientConfigPath() with LIFELINE_CONFIG = %q, %v, want %q, nil", got, err, "/etc/lifeline/ops.json")
	}

	t.Setenv("LIFELINE_CONFIG", "")
	userDir, err := os.UserConfigDir()
	if err != nil {
		t.Skipf("no user config directory: %v", err)
	}
	want := filepath.Join(userDir, "lifeline", "client.json")
	if got, err := DefaultClientConfigPath(); err != nil || got != want {
		t.Errorf("DefaultClientConfigPath() = %q, %v, want %q, nil", got, err, want)
	}
}

// assertDirHolds checks that dir holds exactly the named entries: no
// temporary files left behind.
func assertDirHolds(t *testing.T, dir string, names ...string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	if strings.Join(got, " ") != strings.Join(names, " ") {
		t.Errorf("%s holds %q, want %q", dir, got, names)
	}
}
