package machineagent

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
)

// unitTree writes, under dir, what a dead unit leaves: its journal and
// snapshot, a socket, its charm directory of hard links with a hooks
// directory, a symbolic link to a directory outside (whose files must
// outlive the removal), and a deeper directory.
func unitTree(tb testing.TB, dir, outside string) {
	tb.Helper()
	for _, d := range []string{"charm/hooks", "charm/lib/a/b"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			tb.Fatal(err)
		}
	}
	for _, f := range []string{"state.log", "state.json", "charm/lib/a/b/c.txt"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o600); err != nil {
			tb.Fatal(err)
		}
	}
	if err := os.Link(filepath.Join(outside, "metadata.yaml"), filepath.Join(dir, "charm", "metadata.yaml")); err != nil {
		tb.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "charm", "shared")); err != nil {
		tb.Fatal(err)
	}
}

// sharedCharm writes, under root, a machine's cached charm file that a
// unit's tree links to (unitTree), and returns its directory.
func sharedCharm(t *testing.T, root string) string {
	t.Helper()
	outside := filepath.Join(root, "cache")
	if err := os.Mkdir(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "metadata.yaml"), []byte("name: x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return outside
}

func TestRemoveTreeRemovesAUnitsFilesAndNothingElse(t *testing.T) {
	root := t.TempDir()
	outside := sharedCharm(t, root)
	unit := filepath.Join(root, "units", "web-0")
	unitTree(t, unit, outside)
	// A socket, as a unit agent's tools socket would be (a short path:
	// a socket's is limited to about a hundred bytes).
	sockDir, err := os.MkdirTemp("", "rt")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(sockDir)
	l, err := net.Listen("unix", filepath.Join(sockDir, "s"))
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	if err := os.Rename(filepath.Join(sockDir, "s"), filepath.Join(unit, "agent.sock")); err != nil {
		t.Fatal(err)
	}

	if err := removeTree(unit); err != nil {
		t.Fatalf("removeTree: %v", err)
	}
	if _, err := os.Lstat(unit); !os.IsNotExist(err) {
		t.Fatalf("unit directory still there: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(outside, "metadata.yaml")); err != nil || string(b) != "name: x\n" {
		t.Fatalf("the linked file outside went too: %q, %v", b, err)
	}
	if err := removeTree(unit); err != nil {
		t.Fatalf("removeTree of a directory not there: %v", err)
	}
}

// With the names of the files the directory usually holds, it is removed
// whatever it holds: those files alone, more (a charm directory), a known
// name that is a directory, or nothing at all.
func TestRemoveTreeKnownFiles(t *testing.T) {
	root := t.TempDir()
	outside := sharedCharm(t, root)
	known := []string{"state.log", "state.json", "state.json.tmp"}
	for name, fill := range map[string]func(dir string){
		"journal alone": func(dir string) { writeFiles(t, dir, "state.log") },
		"both files":    func(dir string) { writeFiles(t, dir, "state.json", "state.log") },
		"snapshot only": func(dir string) { writeFiles(t, dir, "state.json") },
		"a unit's tree": func(dir string) { unitTree(t, dir, outside) },
		"a known name a directory": func(dir string) {
			writeFiles(t, dir, "state.log", "state.json/inside")
		},
		"empty": func(string) {},
	} {
		dir := filepath.Join(root, "units", "u")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		fill(dir)
		if err := removeTree(dir, known...); err != nil {
			t.Fatalf("%s: removeTree: %v", name, err)
		}
		if _, err := os.Lstat(dir); !os.IsNotExist(err) {
			t.Fatalf("%s: directory still there: %v", name, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(outside, "metadata.yaml")); err != nil || string(b) != "name: x\n" {
		t.Fatalf("the linked file outside went too: %q, %v", b, err)
	}
	if err := removeTree(filepath.Join(root, "units", "u"), known...); err != nil {
		t.Fatalf("removeTree of a directory not there: %v", err)
	}
}

// writeFiles writes each of names (slash-separated, under dir), making
// their directories.
func writeFiles(t *testing.T, dir string, names ...string) {
	t.Helper()
	for _, n := range names {
		p := filepath.Join(dir, filepath.FromSlash(n))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRemoveTreeFallsBackOnAFile(t *testing.T) {
	// Not a directory: os.RemoveAll's way removes it all the same.
	f := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := removeTree(f); err != nil {
		t.Fatalf("removeTree: %v", err)
	}
	if _, err := os.Lstat(f); !os.IsNotExist(err) {
		t.Fatalf("file still there: %v", err)
	}
}

// BenchmarkRemoveUnitDir compares the two ways of removing a unit's
// directory as the harness's charm leaves it (a journal, the charm's
// metadata linked, an empty hooks directory), on the disk of TMPDIR.
func BenchmarkRemoveUnitDir(b *testing.B) {
	for _, way := range []struct {
		name string
		rm   func(string) error
	}{{"os.RemoveAll", os.RemoveAll}, {"removeTree", func(dir string) error { return removeTree(dir) }}} {
		b.Run(way.name, func(b *testing.B) {
			root := b.TempDir()
			if err := os.WriteFile(filepath.Join(root, "metadata.yaml"), []byte("name: x\n"), 0o644); err != nil {
				b.Fatal(err)
			}
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				dir := filepath.Join(root, fmt.Sprint(i))
				for _, d := range []string{dir, filepath.Join(dir, "charm"), filepath.Join(dir, "charm", "hooks")} {
					if err := os.Mkdir(d, 0o755); err != nil {
						b.Fatal(err)
					}
				}
				if err := os.WriteFile(filepath.Join(dir, "state.log"), []byte("x"), 0o600); err != nil {
					b.Fatal(err)
				}
				if err := os.Link(filepath.Join(root, "metadata.yaml"), filepath.Join(dir, "charm", "metadata.yaml")); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if err := way.rm(dir); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRemoveJournalDir compares removing a unit's directory that
// holds its journal alone, or nothing (units of a charm without hooks), by
// reading it and by the names of the files it usually holds, on the disk
// of TMPDIR.
func BenchmarkRemoveJournalDir(b *testing.B) {
	for _, way := range []struct {
		name    string
		known   []string
		journal bool
	}{
		{"journal/read", nil, true}, {"journal/known", []string{"state.log", "state.json", "state.json.tmp"}, true},
		{"empty/read", nil, false}, {"empty/known", []string{"state.log", "state.json", "state.json.tmp"}, false},
	} {
		b.Run(way.name, func(b *testing.B) {
			root := b.TempDir()
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				dir := filepath.Join(root, fmt.Sprint(i))
				if err := os.Mkdir(dir, 0o700); err != nil {
					b.Fatal(err)
				}
				if way.journal {
					if err := os.WriteFile(filepath.Join(dir, "state.log"), []byte("x"), 0o600); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
				if err := removeTree(dir, way.known...); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
