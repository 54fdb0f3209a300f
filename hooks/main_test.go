package hooks_test

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/lifelinehq/lifeline/internal/testing/e2etest"
)

// lifelined is the real lifelined binary, built once for the package: the
// hook tools are symlinks to it.
var lifelined string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "ll-bin-")
	if err != nil {
		panic(err)
	}
	if lifelined, err = e2etest.BuildLifelined(dir); err != nil {
		fmt.Fprintf(os.Stderr, "build lifelined: %v\n", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// tempDir returns a short temporary directory (unix socket paths are at
// most 107 bytes), removed after the test.
func tempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ll-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// writeFile writes a file of the given mode, making its directory.
func writeFile(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

// logEntry is one line a logger received, with its key/values.
type logEntry struct {
	level hclog.Level
	msg   string
	kv    map[string]any
}

// logRecorder is an hclog sink that keeps every line.
type logRecorder struct {
	mu      sync.Mutex
	entries []logEntry
}

func newRecordingLogger() (hclog.Logger, *logRecorder) {
	l := hclog.NewInterceptLogger(&hclog.LoggerOptions{Level: hclog.Trace, Output: io.Discard})
	rec := &logRecorder{}
	l.RegisterSink(rec)
	return l, rec
}

func (r *logRecorder) Accept(_ string, level hclog.Level, msg string, args ...any) {
	kv := map[string]any{}
	for i := 0; i+1 < len(args); i += 2 {
		kv[fmt.Sprint(args[i])] = args[i+1]
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.entries = append(r.entries, logEntry{level, msg, kv})
}

func (r *logRecorder) all() []logEntry {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]logEntry(nil), r.entries...)
}
