package charm

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"
)

// copyDir copies the charm in src to a new temporary directory, keeping
// modes and symlinks.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), filepath.Base(src))
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		out := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.MkdirAll(out, 0o755)
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(target, out)
		default:
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(out, data, info.Mode().Perm())
		}
	})
	if err != nil {
		t.Fatalf("copy %s: %v", src, err)
	}
	return dst
}

// writeFiles creates a charm directory from name → content; a content
// starting with "->" makes a symlink, a name ending in "*" an executable.
func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		mode := os.FileMode(0o644)
		if strings.HasSuffix(name, "*") {
			name, mode = strings.TrimSuffix(name, "*"), 0o755
		}
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		switch {
		case strings.HasSuffix(name, "/"):
			err = os.MkdirAll(p, 0o755)
		case strings.HasPrefix(content, "->"):
			err = os.Symlink(strings.TrimPrefix(content, "->"), p)
		default:
			err = os.WriteFile(p, []byte(content), mode)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func packDir(t *testing.T, dir string) ([]byte, ArchiveInfo) {
	t.Helper()
	var buf bytes.Buffer
	info, err := Pack(dir, &buf)
	if err != nil {
		t.Fatalf("Pack(%s) = %v, want no error", dir, err)
	}
	return buf.Bytes(), info
}

func TestReadDir(t *testing.T) {
	tests := []struct {
		dir         string
		name        string
		subordinate bool
		options     int
		hooks       []string
	}{
		{"testdata/kv", "kv", false, 6, []string{"config-changed", "install", "start"}},
		{"testdata/logger", "logger", true, 0, []string{"install"}},
	}
	for _, tt := range tests {
		t.Run(tt.dir, func(t *testing.T) {
			c, err := ReadDir(tt.dir)
			if err != nil {
				t.Fatalf("ReadDir(%s) = %v, want no error", tt.dir, err)
			}
			if c.Meta.Name != tt.name || c.Meta.Subordinate != tt.subordinate {
				t.Errorf("ReadDir(%s).Meta = %+v, want name %s, subordinate %v", tt.dir, c.Meta, tt.name, tt.subordinate)
			}
			if c.Config == nil || len(c.Config.Options) != tt.options {
				t.Errorf("ReadDir(%s).Config = %+v, want %d options", tt.dir, c.Config, tt.options)
			}
			if !reflect.DeepEqual(c.Hooks, tt.hooks) {
				t.Errorf("ReadDir(%s).Hooks = %q, want %q", tt.dir, c.Hooks, tt.hooks)
			}
		})
	}
}

const okMeta = "name: app\n"

func TestReadDirTrees(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		hooks []string
		err   string // "" for success
	}{
		{name: "no hooks", files: map[string]string{"metadata.yaml": okMeta}},
		{name: "hooks", files: map[string]string{
			"metadata.yaml": okMeta, "hooks/install*": "#!/bin/sh\n", "hooks/notes.txt": "x",
			"hooks/sub/start*": "", "hooks/start": "->../lib/start", "lib/start*": "", "hooks/stop": "->../lib/missing",
			"hooks/remove": "->../lib", "hooks/config-changed": "->install",
		}, hooks: []string{"config-changed", "install", "start"}},
		{name: "hooks dir is a symlink", files: map[string]string{
			"metadata.yaml": okMeta, "hooks": "->lib/hooks", "lib/hooks/install*": "",
		}, hooks: []string{"install"}},
		{name: "metadata.yaml is a symlink inside", files: map[string]string{"metadata.yaml": "->meta/m.yaml", "meta/m.yaml": okMeta}},
		{name: "dangling symlink", files: map[string]string{"metadata.yaml": okMeta, "x": "->nowhere/at/all"}},
		{name: "symlink to the root", files: map[string]string{"metadata.yaml": okMeta, "a/up": "->..", "b": "->a/up/a/up/metadata.yaml"}},
		{name: "actions", files: map[string]string{"metadata.yaml": okMeta, "actions.yaml": "a: {}\nb: {}\n",
			"actions/a*": "", "actions/b": "->../lib/b", "lib/b*": "", "actions/README": "", "actions/lib/c*": ""}},
		{name: "actions.yaml malformed", files: map[string]string{"metadata.yaml": okMeta, "actions.yaml": "{{{ not yaml"}, err: "actions.yaml: invalid yaml: line 1"},
		{name: "actions.yaml too big", files: map[string]string{"metadata.yaml": okMeta, "actions.yaml": "#" + strings.Repeat("x", maxYAMLSize)}, err: "actions.yaml is over the 1 MiB limit"},
		{name: "action missing", files: map[string]string{"metadata.yaml": okMeta, "actions.yaml": "a: {}\nb: {}\n", "actions/a*": ""}, err: "actions.yaml: b: actions/b is missing"},
		{name: "action dangling", files: map[string]string{"metadata.yaml": okMeta, "actions.yaml": "a: {}\n", "actions/a": "->gone"}, err: "actions.yaml: a: actions/a is missing"},
		{name: "action not executable", files: map[string]string{"metadata.yaml": okMeta, "actions.yaml": "a: {}\n", "actions/a": "#!/bin/sh\n"}, err: "actions.yaml: a: actions/a is not an executable file"},
		{name: "action a directory", files: map[string]string{"metadata.yaml": okMeta, "actions.yaml": "a: {}\n", "actions/a/x*": ""}, err: "actions.yaml: a: actions/a is not an executable file"},
		{name: "action undeclared", files: map[string]string{"metadata.yaml": okMeta, "actions.yaml": "a: {}\n", "actions/a*": "", "actions/b*": ""}, err: "actions/b is executable but actions.yaml does not declare it"},
		{name: "actions without actions.yaml", files: map[string]string{"metadata.yaml": okMeta, "actions/a*": ""}, err: "actions/a is executable but actions.yaml does not declare it"},
		{name: "action escapes", files: map[string]string{"metadata.yaml": okMeta, "actions.yaml": "a: {}\n", "actions/a": "->../../a"}, err: `symlink "actions/a": points outside the charm`},
		{name: "metadata missing", files: map[string]string{"config.yaml": ""}, err: "metadata.yaml is missing"},
		{name: "metadata dangling", files: map[string]string{"metadata.yaml": "->gone"}, err: "metadata.yaml is missing"},
		{name: "metadata a directory", files: map[string]string{"metadata.yaml/x": ""}, err: "metadata.yaml is not a regular file"},
		{name: "metadata malformed", files: map[string]string{"metadata.yaml": "name: [\n"}, err: "metadata.yaml: invalid yaml: line 1: did not find expected node content"},
		{name: "metadata too big", files: map[string]string{"metadata.yaml": okMeta + "#" + strings.Repeat("x", maxYAMLSize)}, err: "metadata.yaml is over the 1 MiB limit"},
		{name: "config malformed", files: map[string]string{"metadata.yaml": okMeta, "config.yaml": "options: [\n"}, err: "config.yaml: invalid yaml: line 1: did not find expected node content"},
		{name: "config wrong type", files: map[string]string{"metadata.yaml": okMeta, "config.yaml": "options:\n  port: {type: int, default: x}\n"}, err: `config.yaml: options.port.default: want an int, got "x"`},
		{name: "absolute symlink", files: map[string]string{"metadata.yaml": okMeta, "hooks/install": "->/bin/true"}, err: `symlink "hooks/install" points outside the charm (to absolute path "/bin/true")`},
		{name: "escaping symlink", files: map[string]string{"metadata.yaml": okMeta, "hooks/install": "->../../bin/true"}, err: `symlink "hooks/install": points outside the charm`},
		{name: "escaping through a symlink", files: map[string]string{"metadata.yaml": okMeta, "a/up": "->..", "t": "->a/up/../x"}, err: `symlink "t": points outside the charm`},
		{name: "symlink loop", files: map[string]string{"metadata.yaml": okMeta, "a": "->b", "b": "->a"}, err: `too many levels of symlinks`},
		{name: "metadata escapes", files: map[string]string{"metadata.yaml": "->../metadata.yaml"}, err: `symlink "metadata.yaml": points outside the charm`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := writeFiles(t, tt.files)
			c, err := ReadDir(dir)
			if tt.err != "" {
				want := "charm " + dir + ": "
				if err == nil || !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), tt.err) || !errors.Is(err, ErrInvalid) {
					t.Errorf("ReadDir(%v) = %v, want an invalid-charm error %q", tt.files, err, want+tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ReadDir(%v) = %v, want no error", tt.files, err)
			}
			if !reflect.DeepEqual(c.Hooks, tt.hooks) {
				t.Errorf("ReadDir(%v).Hooks = %q, want %q", tt.files, c.Hooks, tt.hooks)
			}
			// What ReadDir accepts packs and reads back the same.
			data, _ := packDir(t, dir)
			back, _, err := ReadArchive(bytes.NewReader(data), MaxSize)
			if err != nil || !sameCharm(back, c) {
				t.Errorf("ReadArchive(Pack(%v)) = %+v, %v, want %+v", tt.files, back, err, c)
			}
		})
	}
}

func TestReadDirSpecialFiles(t *testing.T) {
	dir := writeFiles(t, map[string]string{"metadata.yaml": okMeta})
	if err := syscall.Mkfifo(filepath.Join(dir, "pipe"), 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	_, err := ReadDir(dir)
	if want := `"pipe" is not a regular file, directory or symlink`; err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, ErrInvalid) {
		t.Errorf("ReadDir(dir with a fifo) = %v, want %q", err, want)
	}
	if _, err := Pack(dir, io.Discard); err == nil || !errors.Is(err, ErrInvalid) {
		t.Errorf("Pack(dir with a fifo) = %v, want an invalid-charm error", err)
	}
	if _, err := ReadDir(filepath.Join(dir, "absent")); err == nil || errors.Is(err, ErrInvalid) {
		t.Errorf("ReadDir(absent dir) = %v, want a read error", err)
	}
}

func TestPackRoundTrip(t *testing.T) {
	for _, dir := range []string{"testdata/kv", "testdata/logger"} {
		t.Run(dir, func(t *testing.T) {
			want, err := ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			data, info := packDir(t, dir)
			sum := sha256.Sum256(data)
			if info.SHA256 != hex.EncodeToString(sum[:]) || info.Size != int64(len(data)) {
				t.Errorf("Pack(%s) = %s %d, want %x %d", dir, info.SHA256, info.Size, sum, len(data))
			}
			if !reflect.DeepEqual(info.Charm, want) {
				t.Errorf("Pack(%s).Charm = %+v, want %+v", dir, info.Charm, want)
			}
			got, raw, err := ReadArchive(bytes.NewReader(data), MaxSize)
			if err != nil {
				t.Fatalf("ReadArchive(Pack(%s)) = %v, want no error", dir, err)
			}
			if !bytes.Equal(raw, data) {
				t.Errorf("ReadArchive(Pack(%s)) returned other bytes than it read", dir)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("ReadArchive(Pack(%s)) = %+v, want %+v", dir, got, want)
			}

			// Packing again, a copy with other times and permissions, and
			// the extracted archive all give the same bytes.
			if _, again := packDir(t, dir); again.SHA256 != info.SHA256 {
				t.Errorf("Pack(%s) twice = %s then %s, want the same", dir, info.SHA256, again.SHA256)
			}
			cp := copyDir(t, dir)
			old := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
			filepath.WalkDir(cp, func(p string, d fs.DirEntry, err error) error {
				if err == nil && d.Type().IsRegular() {
					os.Chtimes(p, old, old)
					if info, err := d.Info(); err == nil && info.Mode()&0o111 == 0 {
						os.Chmod(p, 0o600)
					} else {
						os.Chmod(p, 0o700)
					}
				}
				return nil
			})
			if _, copied := packDir(t, cp); copied.SHA256 != info.SHA256 {
				t.Errorf("Pack(copy of %s) = %s, want %s", dir, copied.SHA256, info.SHA256)
			}
			out := filepath.Join(t.TempDir(), "extracted")
			if err := Extract(data, out); err != nil {
				t.Fatalf("Extract(Pack(%s)) = %v, want no error", dir, err)
			}
			if _, repacked := packDir(t, out); repacked.SHA256 != info.SHA256 {
				t.Errorf("Pack(Extract(Pack(%s))) = %s, want %s", dir, repacked.SHA256, info.SHA256)
			}
			if extracted, err := ReadDir(out); err != nil || !reflect.DeepEqual(extracted, want) {
				t.Errorf("ReadDir(Extract(Pack(%s))) = %+v, %v, want %+v", dir, extracted, err, want)
			}
		})
	}
}

func TestExtractKeepsModesAndLinks(t *testing.T) {
	data, _ := packDir(t, "testdata/kv")
	out := t.TempDir()
	if err := Extract(data, out); err != nil {
		t.Fatalf("Extract = %v", err)
	}
	for name, exec := range map[string]bool{"hooks/install": true, "bin/hook": true, "hooks/README": false, "metadata.yaml": false} {
		info, err := os.Stat(filepath.Join(out, name))
		if err != nil || (info.Mode()&0o100 != 0) != exec {
			t.Errorf("Extract: %s mode = %v, %v, want executable %v", name, info.Mode(), err, exec)
		}
	}
	if target, err := os.Readlink(filepath.Join(out, "hooks/config-changed")); err != nil || target != "../bin/hook" {
		t.Errorf("Extract: hooks/config-changed links to %q, %v, want ../bin/hook", target, err)
	}
	if info, err := os.Stat(filepath.Join(out, "data/empty")); err != nil || !info.IsDir() {
		t.Errorf("Extract: data/empty = %v, %v, want a directory", info, err)
	}
	if err := Extract(data, out); err == nil || !strings.Contains(err.Error(), "is not empty") {
		t.Errorf("Extract(into a non-empty dir) = %v, want an error", err)
	}
}

func TestSizeLimit(t *testing.T) {
	data, _ := packDir(t, "testdata/kv")
	limit := int64(len(data))
	if _, _, err := ReadArchive(bytes.NewReader(data), limit); err != nil {
		t.Errorf("ReadArchive(%d bytes, limit %d) = %v, want no error", len(data), limit, err)
	}
	_, _, err := ReadArchive(bytes.NewReader(data), limit-1)
	if want := "charm archive is over the " + sizeString(limit-1) + " limit"; err == nil || err.Error() != want || !errors.Is(err, ErrTooLarge) || !errors.Is(err, ErrInvalid) {
		t.Errorf("ReadArchive(%d bytes, limit %d) = %v, want %q", len(data), limit-1, err, want)
	}
	huge := io.LimitReader(zeros{}, MaxSize+1)
	_, _, err = ReadArchive(huge, MaxSize)
	if want := "charm archive is over the 32 MiB limit"; err == nil || err.Error() != want || !errors.Is(err, ErrTooLarge) {
		t.Errorf("ReadArchive(32 MiB + 1 byte) = %v, want %q", err, want)
	}

	// Incompressible content over the limit fails to pack (with a small
	// limit, to keep the test fast).
	dir := writeFiles(t, map[string]string{"metadata.yaml": okMeta})
	noise := make([]byte, 64<<10)
	rand.NewChaCha8([32]byte{1}).Read(noise)
	if err := os.WriteFile(filepath.Join(dir, "blob"), noise, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = pack(dir, io.Discard, 32<<10)
	if want := "charm archive is over the 32768 bytes limit"; err == nil || !strings.HasSuffix(err.Error(), want) || !errors.Is(err, ErrTooLarge) {
		t.Errorf("pack(64 KiB of noise, limit 32 KiB) = %v, want %q", err, want)
	}
	if _, err := pack(dir, io.Discard, 128<<10); err != nil {
		t.Errorf("pack(64 KiB of noise, limit 128 KiB) = %v, want no error", err)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
