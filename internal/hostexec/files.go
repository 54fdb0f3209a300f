package hostexec

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
)

// A File is a file a unit claims: its path (relative: under the unit's
// directory; absolute: anywhere on the host), its content and its
// permission bits (0 is 0644).
type File struct {
	Path    string
	Content []byte
	Mode    fs.FileMode
}

// Bounds on a unit's files.
const (
	maxFileContent = 1 << 20
	maxFilePath    = 1024
	maxUnitFiles   = 1000
)

// FilesRecord is the name, in a unit's directory, of the record of the
// files the unit wrote.
const FilesRecord = "host-files.json"

type filesRecord struct {
	// Files maps each path the unit wrote (absolute) to the digests of
	// the contents it may hold as the unit's: the one written last, and
	// while a write is under way the one before as well.
	Files map[string][]string `json:"files"`
}

// paths returns the paths the unit wrote, sorted.
func (r *filesRecord) paths() []string {
	paths := make([]string, 0, len(r.Files))
	for p := range r.Files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	return paths
}

// resolvePath returns a file's path on the host; unitDir must be
// absolute, and the unit's record of its files is no file of its.
func resolvePath(unitDir, p string) (string, error) {
	if !filepath.IsAbs(unitDir) {
		return "", fmt.Errorf("unit directory %q: not absolute", unitDir)
	}
	if p == "" || len(p) > maxFilePath {
		return "", fmt.Errorf("file path %q: want 1 to %d characters", p, maxFilePath)
	}
	if filepath.IsAbs(p) {
		clean := filepath.Clean(p)
		if clean == "/" {
			return "", fmt.Errorf("file path %q: not a file", p)
		}
		return clean, nil
	}
	if !filepath.IsLocal(p) {
		return "", fmt.Errorf("file path %q: a relative path must stay under the unit's directory", p)
	}
	abs := filepath.Join(unitDir, p)
	if abs == filepath.Join(unitDir, FilesRecord) {
		return "", fmt.Errorf("file path %q: the unit's record of its files", p)
	}
	return abs, nil
}

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func loadFiles(unitDir string) (*filesRecord, error) {
	rec := &filesRecord{}
	if _, err := readRecord(filepath.Join(unitDir, FilesRecord), rec); err != nil {
		return nil, err
	}
	if rec.Files == nil {
		rec.Files = map[string][]string{}
	}
	return rec, nil
}

func saveFiles(unitDir string, rec *filesRecord) error {
	p := filepath.Join(unitDir, FilesRecord)
	if len(rec.Files) == 0 {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	return writeRecord(p, rec)
}

// readCurrent returns the content and permission bits of the regular
// file at path; ok is false when there is none (absent, or something
// else, such as a directory or a link).
func readCurrent(path string, limit int64) (content []byte, mode fs.FileMode, ok bool, err error) {
	st, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, false, nil
	}
	if err != nil {
		return nil, 0, false, err
	}
	if !st.Mode().IsRegular() || st.Size() > limit {
		return nil, 0, false, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, false, err
	}
	defer f.Close()
	content, err = io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, 0, false, err
	}
	return content, st.Mode().Perm(), int64(len(content)) <= limit, nil
}

// WriteFile makes f's path hold f's content and mode, for the unit whose
// directory is unitDir, and reports whether it changed anything: a file
// already so is left alone. The write is atomic (a temporary file in
// the same directory, fsynced, renamed over the path) and makes missing
// directories (0755). The path joins the unit's record of the files it
// wrote before the write, with the digest of both the old content and
// the new, so that a crash at any point leaves the file removable by
// RemoveFile. Calls for one unit must not run concurrently.
func WriteFile(unitDir string, f File) (changed bool, err error) {
	path, err := resolvePath(unitDir, f.Path)
	if err != nil {
		return false, err
	}
	if len(f.Content) > maxFileContent {
		return false, fmt.Errorf("file %s: %d bytes, at most %d", f.Path, len(f.Content), maxFileContent)
	}
	if f.Mode&^fs.ModePerm != 0 {
		return false, fmt.Errorf("file %s: mode %v: only permission bits", f.Path, f.Mode)
	}
	mode := f.Mode
	if mode == 0 {
		mode = 0o644
	}
	rec, err := loadFiles(unitDir)
	if err != nil {
		return false, err
	}
	want := digest(f.Content)
	cur, curMode, ok, err := readCurrent(path, maxFileContent)
	if err != nil {
		return false, fmt.Errorf("file %s: %w", f.Path, err)
	}
	known := rec.Files[path]
	if ok && curMode == mode && bytes.Equal(cur, f.Content) {
		if len(known) == 1 && known[0] == want {
			return false, nil
		}
		rec.Files[path] = []string{want}
		return false, saveFiles(unitDir, rec)
	}
	if known == nil && len(rec.Files) >= maxUnitFiles {
		return false, fmt.Errorf("file %s: the unit has written %d files, at most %d", f.Path, len(rec.Files), maxUnitFiles)
	}
	// Before the write: either content may be there after a crash.
	before := []string{want}
	if ok && len(known) > 0 {
		before = append(before, digest(cur))
	}
	rec.Files[path] = before
	if err := saveFiles(unitDir, rec); err != nil {
		return false, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return false, fmt.Errorf("file %s: %w", f.Path, err)
	}
	if err := writeAtomic(path, f.Content, mode); err != nil {
		return false, fmt.Errorf("file %s: %w", f.Path, err)
	}
	if len(before) > 1 {
		rec.Files[path] = []string{want}
		if err := saveFiles(unitDir, rec); err != nil {
			return true, err
		}
	}
	return true, nil
}

// A RemoveResult is what RemoveFile did with a path.
type RemoveResult int

const (
	// NotWritten: the unit never wrote the path (or has forgotten it);
	// nothing was done.
	NotWritten RemoveResult = iota
	// Removed: the file held what the unit wrote and is gone.
	Removed
	// Absent: the unit wrote the file but it was gone already.
	Absent
	// Kept: the file was changed (or replaced) since the unit wrote it,
	// so it is someone else's now and stays.
	Kept
)

func (r RemoveResult) String() string {
	return [...]string{"not written", "removed", "absent", "kept: changed since written"}[r]
}

// RemoveFile removes the file at path (as in File.Path) if the unit
// wrote it and it still holds what the unit wrote; a file changed since
// is kept. Either way the path leaves the unit's record. Directories
// WriteFile made stay.
func RemoveFile(unitDir, path string) (RemoveResult, error) {
	abs, err := resolvePath(unitDir, path)
	if err != nil {
		return NotWritten, err
	}
	rec, err := loadFiles(unitDir)
	if err != nil {
		return NotWritten, err
	}
	return removeRecorded(unitDir, rec, abs)
}

func removeRecorded(unitDir string, rec *filesRecord, abs string) (RemoveResult, error) {
	digests, ok := rec.Files[abs]
	if !ok {
		return NotWritten, nil
	}
	cur, _, isFile, err := readCurrent(abs, maxFileContent)
	if err != nil {
		return NotWritten, err
	}
	res := Kept
	switch {
	case !isFile:
		if _, err := os.Lstat(abs); errors.Is(err, fs.ErrNotExist) {
			res = Absent
		}
	case slices.Contains(digests, digest(cur)):
		if err := os.Remove(abs); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return NotWritten, err
		}
		if err := syncDir(filepath.Dir(abs)); err != nil {
			return NotWritten, err
		}
		res = Removed
	}
	delete(rec.Files, abs)
	return res, saveFiles(unitDir, rec)
}

// A FileRemoval is one path RemoveFiles dealt with.
type FileRemoval struct {
	Path   string
	Result RemoveResult
}

// RemoveFiles removes every file the unit wrote, as RemoveFile does,
// and nothing else.
func RemoveFiles(unitDir string) ([]FileRemoval, error) {
	rec, err := loadFiles(unitDir)
	if err != nil {
		return nil, err
	}
	var done []FileRemoval
	for _, p := range rec.paths() {
		res, err := removeRecorded(unitDir, rec, p)
		if err != nil {
			return done, fmt.Errorf("remove %s: %w", p, err)
		}
		done = append(done, FileRemoval{Path: p, Result: res})
	}
	return done, nil
}

// WrittenFiles returns the paths (absolute) of the files the unit wrote.
func WrittenFiles(unitDir string) ([]string, error) {
	rec, err := loadFiles(unitDir)
	if err != nil {
		return nil, err
	}
	return rec.paths(), nil
}
