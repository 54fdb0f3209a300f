package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
)

// errNotInteger is incr's error for a key whose value is not an integer.
var errNotInteger = errors.New("value is not an integer")

// store is the key-value map, saved to one file after every change: a
// temporary file beside it, synced, renamed over it, and the directory
// synced, so the file always holds one complete state.
type store struct {
	path string

	mu   sync.Mutex
	data map[string][]byte
}

// fileFormat is the data file: {"keys": {"name": "<base64 value>"}}.
type fileFormat struct {
	Keys map[string][]byte `json:"keys"`
}

// openStore loads the store saved at path; a missing file is an empty
// store.
func openStore(path string) (*store, error) {
	s := &store{path: path, data: map[string][]byte{}}
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return s, nil
	case err != nil:
		return nil, err
	}
	var f fileFormat
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if f.Keys != nil {
		s.data = f.Keys
	}
	return s, nil
}

func (s *store) get(key string) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.data[key]
	return slices.Clone(v), ok
}

func (s *store) keys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.data))
}

func (s *store) put(key string, value []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.change(key, slices.Clone(value), true)
}

// remove deletes key, reporting whether it was there.
func (s *store) remove(key string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.data[key]; !ok {
		return false, nil
	}
	return true, s.change(key, nil, false)
}

// incr adds one to key's integer value (absent counts as 0) and returns
// the new value.
func (s *store) incr(key string) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	if v, ok := s.data[key]; ok {
		var err error
		if n, err = strconv.ParseInt(string(v), 10, 64); err != nil {
			return 0, fmt.Errorf("key %s: %w", key, errNotInteger)
		}
	}
	n++
	return n, s.change(key, []byte(strconv.FormatInt(n, 10)), true)
}

// change sets (or, when !present, deletes) key and saves the store,
// undoing the change if it cannot be saved. s.mu is held.
func (s *store) change(key string, value []byte, present bool) error {
	old, had := s.data[key]
	if present {
		s.data[key] = value
	} else {
		delete(s.data, key)
	}
	if err := s.save(); err != nil {
		if had {
			s.data[key] = old
		} else {
			delete(s.data, key)
		}
		return err
	}
	return nil
}

// save writes the store to its file atomically. s.mu is held.
func (s *store) save() error {
	b, err := json.Marshal(fileFormat{Keys: s.data})
	if err != nil {
		return err
	}
	dir := filepath.Dir(s.path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(s.path)+".*")
	if err != nil {
		return fmt.Errorf("save: %w", err)
	}
	defer os.Remove(tmp.Name()) // after the rename, there is nothing to remove
	_, err = tmp.Write(b)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), s.path)
	}
	if err != nil {
		return fmt.Errorf("save %s: %w", s.path, err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
