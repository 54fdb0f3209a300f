package charm

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// te is one entry of a hand-made archive.
type te struct {
	name string
	typ  byte
	body string // a file's content, a link's target
	mode int64
}

func file(name, body string) te { return te{name: name, typ: tar.TypeReg, body: body, mode: 0o644} }
func dirEntry(name string) te   { return te{name: name, typ: tar.TypeDir, mode: 0o755} }
func link(name, target string) te {
	return te{name: name, typ: tar.TypeSymlink, body: target, mode: 0o777}
}

// makeArchive writes entries, in order, as a gzip-compressed tar archive.
func makeArchive(t *testing.T, entries ...te) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		hdr := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode}
		switch e.typ {
		case tar.TypeReg:
			hdr.Size = int64(len(e.body))
		case tar.TypeSymlink, tar.TypeLink:
			hdr.Linkname = e.body
		case tar.TypeXGlobalHeader:
			hdr.PAXRecords = map[string]string{"comment": e.body}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatalf("write header %q: %v", e.name, err)
		}
		if e.typ == tar.TypeReg {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestExtractUnsafe(t *testing.T) {
	meta := file("metadata.yaml", okMeta)
	gz := func(b []byte) []byte {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		zw.Write(b)
		zw.Close()
		return buf.Bytes()
	}
	good := makeArchive(t, meta, file("hooks/install", "x"))
	tests := []struct {
		name string
		data []byte
		err  string
	}{
		{"absolute path", makeArchive(t, meta, file("/tmp/evil", "x")), `"/tmp/evil" is not a valid path inside a charm`},
		{"dot-dot", makeArchive(t, meta, file("../evil", "x")), `"../evil" is not a valid path inside a charm`},
		{"inner dot-dot", makeArchive(t, meta, file("hooks/../../evil", "x")), `"hooks/../../evil" is not a valid path inside a charm`},
		{"empty element", makeArchive(t, meta, file("a//b", "x")), `"a//b" is not a valid path inside a charm`},
		{"backslash", makeArchive(t, meta, file(`a\..\..\evil`, "x")), `"a\\..\\..\\evil" is not a valid path inside a charm`},
		{"absolute symlink", makeArchive(t, meta, link("etc", "/etc")), `symlink "etc" points outside the charm (to absolute path "/etc")`},
		{"escaping symlink", makeArchive(t, meta, link("hooks/x", "../../x")), `symlink "hooks/x": points outside the charm`},
		{"escaping through a symlink", makeArchive(t, meta, link("a/up", ".."), link("t", "a/up/../x")), `symlink "t": points outside the charm`},
		{"symlink loop", makeArchive(t, meta, link("a", "b"), link("b", "a")), "too many levels of symlinks"},
		{"file through a symlink", makeArchive(t, meta, link("d", "."), file("d/x", "x")), `"d/x" is inside "d", which is not a directory`},
		{"file then dir", makeArchive(t, meta, file("x", ""), file("x/y", "")), `"x/y" is inside "x", which is not a directory`},
		{"dir then file", makeArchive(t, meta, file("x/y", ""), file("x", "")), `"x" appears twice`},
		{"duplicate file", makeArchive(t, meta, file("x", "a"), file("x", "b")), `"x" appears twice`},
		{"duplicate metadata", makeArchive(t, meta, meta), `"metadata.yaml" appears twice`},
		{"hard link", makeArchive(t, meta, te{name: "h", typ: tar.TypeLink, body: "metadata.yaml"}), `"h" is not a regular file, directory or symlink (tar type '1')`},
		{"char device", makeArchive(t, meta, te{name: "null", typ: tar.TypeChar}), `"null" is not a regular file, directory or symlink (tar type '3')`},
		{"fifo", makeArchive(t, meta, te{name: "p", typ: tar.TypeFifo}), `"p" is not a regular file, directory or symlink (tar type '6')`},
		{"empty symlink", makeArchive(t, meta, link("l", "")), `symlink "l" has an empty or overlong target`},
		{"not gzip", []byte("metadata.yaml"), "not a gzip-compressed tar archive"},
		{"gzip of garbage", gz([]byte(strings.Repeat("garbage!", 200))), "bad archive"},
		{"truncated", good[:len(good)/2], "bad archive"},
		{"bad checksum", append(append([]byte{}, good[:len(good)-8]...), 1, 2, 3, 4, 5, 6, 7, 8), "bad archive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parent := t.TempDir()
			sentinel := filepath.Join(parent, "evil")
			dir := filepath.Join(parent, "charm", "x")
			err := Extract(tt.data, dir)
			if err == nil || !strings.Contains(err.Error(), tt.err) || !errors.Is(err, ErrInvalid) {
				t.Errorf("Extract(%s) = %v, want an invalid-charm error containing %q", tt.name, err, tt.err)
			}
			if _, err := os.Lstat(sentinel); err == nil {
				t.Errorf("Extract(%s) wrote %s", tt.name, sentinel)
			}
			if names, _ := os.ReadDir(dir); len(names) > 0 {
				t.Errorf("Extract(%s) wrote %d entries before failing, want none", tt.name, len(names))
			}
			if _, _, err := ReadArchive(bytes.NewReader(tt.data), MaxSize); err == nil || !errors.Is(err, ErrInvalid) {
				t.Errorf("ReadArchive(%s) = %v, want an invalid-charm error", tt.name, err)
			}
		})
	}
}

func TestReadArchive(t *testing.T) {
	tests := []struct {
		name  string
		data  []byte
		hooks []string
		err   string
	}{
		{"tar(1) style", makeArchive(t,
			dirEntry("./"), file("./metadata.yaml", okMeta), te{name: "./hooks/install", typ: tar.TypeReg, mode: 0o700},
			te{name: "g", typ: tar.TypeXGlobalHeader, body: "made by hand"}, dirEntry("./hooks/"),
		), []string{"install"}, ""},
		{"implied directories", makeArchive(t, file("metadata.yaml", okMeta), te{name: "hooks/start", typ: tar.TypeReg, mode: 0o755}), []string{"start"}, ""},
		{"metadata missing", makeArchive(t, file("config.yaml", "")), nil, "charm archive: metadata.yaml is missing"},
		{"metadata a directory", makeArchive(t, dirEntry("metadata.yaml/")), nil, "charm archive: metadata.yaml is not a regular file"},
		{"metadata invalid", makeArchive(t, file("metadata.yaml", "name: Bad\n")), nil, `charm archive: metadata.yaml: name: "Bad" is invalid: use lowercase letters, digits and hyphens, starting with a letter`},
		{"config invalid", makeArchive(t, file("metadata.yaml", okMeta), file("config.yaml", "options:\n  a: {type: int, default: 1.5}\n")), nil, `charm archive: config.yaml: options.a.default: want an int, got "1.5"`},
		{"metadata too big", makeArchive(t, file("metadata.yaml", okMeta+"#"+strings.Repeat("x", maxYAMLSize))), nil, "charm archive: metadata.yaml is over the 1 MiB limit"},
		{"incompatible lifeline-info", makeArchive(t, file("metadata.yaml", okMeta+"requires:\n  lifeline-info: lifeline-info\n")), nil, "charm archive: metadata.yaml: requires.lifeline-info: is reserved for the provider endpoint every principal charm has"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _, err := ReadArchive(bytes.NewReader(tt.data), 0)
			if tt.err != "" {
				if err == nil || err.Error() != tt.err || !errors.Is(err, ErrInvalid) {
					t.Errorf("ReadArchive(%s) = %v, want %q", tt.name, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ReadArchive(%s) = %v, want no error", tt.name, err)
			}
			if strings.Join(c.Hooks, " ") != strings.Join(tt.hooks, " ") {
				t.Errorf("ReadArchive(%s).Hooks = %q, want %q", tt.name, c.Hooks, tt.hooks)
			}
			dir := filepath.Join(t.TempDir(), "x")
			if err := Extract(tt.data, dir); err != nil {
				t.Errorf("Extract(%s) = %v, want no error", tt.name, err)
			}
		})
	}
}

// TestUnpackedLimit feeds an archive that unpacks to more than maxUnpacked:
// one file of zeros, written as concatenated gzip members so that the test
// compresses only 1 MiB.
func TestUnpackedLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("unpacks 512 MiB")
	}
	var hdr bytes.Buffer
	tw := tar.NewWriter(&hdr)
	tw.WriteHeader(&tar.Header{Name: "metadata.yaml", Typeflag: tar.TypeReg, Size: okMetaSize})
	tw.Write([]byte(okMeta))
	tw.Flush()
	tw.WriteHeader(&tar.Header{Name: "blob", Typeflag: tar.TypeReg, Mode: 0o644, Size: maxUnpacked + 1<<20})
	tw.Flush()
	member := func(b []byte) []byte {
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		zw.Write(b)
		zw.Close()
		return buf.Bytes()
	}
	data := member(hdr.Bytes())
	chunk := member(make([]byte, 1<<20))
	for range maxUnpacked>>20 + 2 {
		data = append(data, chunk...)
	}
	want := "charm unpacks to over 512 MiB"
	if _, _, err := ReadArchive(bytes.NewReader(data), MaxSize); err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, ErrTooLarge) {
		t.Errorf("ReadArchive(zip bomb) = %v, want %q", err, want)
	}
	dir := t.TempDir()
	if err := Extract(data, dir); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Extract(zip bomb) = %v, want %q", err, want)
	}
	if names, _ := os.ReadDir(dir); len(names) > 0 {
		t.Errorf("Extract(zip bomb) wrote %d entries, want none", len(names))
	}
}

const okMetaSize = int64(len(okMeta))
