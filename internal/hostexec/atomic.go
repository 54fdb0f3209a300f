package hostexec

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// maxRecord bounds every record file this package reads back (package
// claims, file records, daemon state, job journals): a larger one is
// refused rather than read whole.
const maxRecord = 4 << 20

// writeAtomic replaces path with data: a temporary file in the same
// directory, written, given mode, fsynced, renamed over path, and the
// directory fsynced, so that after a crash path holds the old content or
// the new, never a mix or nothing.
func writeAtomic(path string, data []byte, mode fs.FileMode) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	name := tmp.Name()
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(name)
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		return err
	}
	// Chmod, not the create mode: the umask must not change what a claim says.
	if err := tmp.Chmod(mode); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(name, path); err != nil {
		return err
	}
	ok = true
	return syncDir(dir)
}

// syncDir makes a rename or removal in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// writeRecord stores v as JSON at path, atomically (writeAtomic), making
// its directory if needed.
func writeRecord(path string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(data) > maxRecord {
		return fmt.Errorf("record %s: %d bytes, over the bound of %d", path, len(data), maxRecord)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return writeAtomic(path, data, 0o600)
}

// readRecord loads the JSON at path into v; an absent file leaves v as
// it is and reports false.
func readRecord(path string, v any) (bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxRecord+1))
	if err != nil {
		return false, err
	}
	if len(data) > maxRecord {
		return false, fmt.Errorf("record %s: over the bound of %d bytes", path, maxRecord)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return false, fmt.Errorf("record %s: %w", path, err)
	}
	return true, nil
}
