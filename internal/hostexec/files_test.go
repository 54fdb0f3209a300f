package hostexec

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Sys().(*syscall.Stat_t).Ino
}

func TestWriteFile(t *testing.T) {
	unit := t.TempDir()
	write := func(f File, want bool) {
		t.Helper()
		if changed, err := WriteFile(unit, f); err != nil || changed != want {
			t.Fatalf("WriteFile(%s, %q, %v) = %v, %v; want %v, nil", f.Path, f.Content, f.Mode, changed, err, want)
		}
	}
	check := func(path, content string, mode fs.FileMode) {
		t.Helper()
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := os.ReadFile(path)
		if string(got) != content || st.Mode().Perm() != mode {
			t.Fatalf("%s = %q %v, want %q %v", path, got, st.Mode().Perm(), content, mode)
		}
	}
	p := filepath.Join(unit, "etc/app/app.conf")
	write(File{Path: "etc/app/app.conf", Content: []byte("a=1\n"), Mode: 0o600}, true)
	check(p, "a=1\n", 0o600)
	ino := inode(t, p)
	write(File{Path: "etc/app/app.conf", Content: []byte("a=1\n"), Mode: 0o600}, false)
	if inode(t, p) != ino {
		t.Errorf("an unchanged file was rewritten")
	}
	write(File{Path: "etc/app/app.conf", Content: []byte("a=2\n"), Mode: 0o600}, true)
	check(p, "a=2\n", 0o600)
	if inode(t, p) == ino {
		t.Errorf("a changed file kept its inode: not replaced by rename")
	}
	write(File{Path: "etc/app/app.conf", Content: []byte("a=2\n"), Mode: 0o640}, true)
	check(p, "a=2\n", 0o640)
	write(File{Path: "run.sh", Content: []byte("#!/bin/sh\n")}, true)
	check(filepath.Join(unit, "run.sh"), "#!/bin/sh\n", 0o644)
	entries, _ := os.ReadDir(filepath.Dir(p))
	if len(entries) != 1 {
		t.Errorf("%s holds %d entries, want only app.conf (no temporary files left)", filepath.Dir(p), len(entries))
	}
	for _, bad := range []File{{Path: ""}, {Path: "../escape"}, {Path: "/"}, {Path: FilesRecord}, {Path: "x", Mode: fs.ModeSetuid | 0o755}} {
		if _, err := WriteFile(unit, bad); err == nil {
			t.Errorf("WriteFile(%q, mode %v) = nil error, want one", bad.Path, bad.Mode)
		}
	}
	if _, err := WriteFile("relative", File{Path: "x"}); err == nil {
		t.Errorf("WriteFile with a relative unit directory = nil error, want one")
	}
}

// TestRemoveFiles: only what the unit wrote goes, and of that only what
// still holds what it wrote.
func TestRemoveFiles(t *testing.T) {
	unit := t.TempDir()
	host := t.TempDir()
	abs := filepath.Join(host, "abs.conf")
	for _, f := range []File{
		{Path: "a", Content: []byte("a")},
		{Path: "dir/b", Content: []byte("b")},
		{Path: abs, Content: []byte("c")},
		{Path: "gone", Content: []byte("g")},
	} {
		if _, err := WriteFile(unit, f); err != nil {
			t.Fatal(err)
		}
	}
	other := filepath.Join(unit, "other")
	if err := os.WriteFile(other, []byte("not the unit's"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(unit, "dir/b"), []byte("edited by hand"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(unit, "gone"))
	if res, err := RemoveFile(unit, "other"); err != nil || res != NotWritten {
		t.Errorf("RemoveFile(other) = %v, %v; want %v", res, err, NotWritten)
	}
	got, err := RemoveFiles(unit)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]RemoveResult{
		abs:                          Removed,
		filepath.Join(unit, "a"):     Removed,
		filepath.Join(unit, "dir/b"): Kept,
		filepath.Join(unit, "gone"):  Absent,
	}
	if len(got) != len(want) {
		t.Fatalf("RemoveFiles = %v, want %v", got, want)
	}
	for _, r := range got {
		if want[r.Path] != r.Result {
			t.Errorf("RemoveFiles: %s %v, want %v", r.Path, r.Result, want[r.Path])
		}
	}
	for path, exists := range map[string]bool{abs: false, filepath.Join(unit, "a"): false, filepath.Join(unit, "dir/b"): true, other: true, filepath.Join(unit, FilesRecord): false} {
		if _, err := os.Stat(path); (err == nil) != exists {
			t.Errorf("after RemoveFiles, %s exists = %v, want %v", path, err == nil, exists)
		}
	}
	if again, err := RemoveFiles(unit); err != nil || len(again) != 0 {
		t.Errorf("RemoveFiles again = %v, %v; want nothing", again, err)
	}
}

// TestWriteFileCrash: a crash after the record names the new content and
// before the rename leaves the old content, which is still the unit's.
func TestWriteFileCrash(t *testing.T) {
	unit := t.TempDir()
	if _, err := WriteFile(unit, File{Path: "f", Content: []byte("old")}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(unit, "f")
	rec := &filesRecord{Files: map[string][]string{path: {digest([]byte("new")), digest([]byte("old"))}}}
	if err := saveFiles(unit, rec); err != nil {
		t.Fatal(err)
	}
	if res, err := RemoveFile(unit, "f"); err != nil || res != Removed {
		t.Fatalf("RemoveFile after a crash mid-write = %v, %v; want %v", res, err, Removed)
	}
	// A file that was there before the unit claimed it, overwritten, is
	// the unit's; after a crash before its write it is not.
	if err := os.WriteFile(path, []byte("the host's"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := saveFiles(unit, &filesRecord{Files: map[string][]string{path: {digest([]byte("new"))}}}); err != nil {
		t.Fatal(err)
	}
	if res, err := RemoveFile(unit, "f"); err != nil || res != Kept {
		t.Fatalf("RemoveFile of a file the unit never wrote = %v, %v; want %v", res, err, Kept)
	}
}
