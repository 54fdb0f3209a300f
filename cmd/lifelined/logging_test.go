package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lifelinehq/lifeline/internal/testing/poll"
)

// --log-format json writes one JSON object a line, with the level, the
// message, the logger's name and the fields.
func TestLogFormatJSON(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lifelined.log")
	l, out, err := newLogger("controller", logFlags{level: "info", format: "json", file: path, maxSizeMiB: 1})
	if err != nil {
		t.Fatal(err)
	}
	l.Named("provisioner").Info("machine started", "machine", "3")
	l.Debug("not written")
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 1 {
		t.Fatalf("log = %q, want one line", data)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &got); err != nil {
		t.Fatalf("log line %q: %v", lines[0], err)
	}
	want := map[string]any{"@level": "info", "@message": "machine started", "@module": "controller.provisioner", "machine": "3"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("log line %s = %v, want %v", k, got[k], v)
		}
	}
	if _, ok := got["@timestamp"]; !ok {
		t.Errorf("log line %q has no @timestamp", lines[0])
	}
}

// A log file rotates once it holds --log-max-size, keeping --log-backups
// old files.
func TestLogFileRotates(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "lifelined.log")
	l, out, err := newLogger("machine-agent", logFlags{level: "info", format: "text", file: path, maxSizeMiB: 1, backups: 2})
	if err != nil {
		t.Fatal(err)
	}
	pad := strings.Repeat("x", 1000)
	for i := range 4000 { // about 4 MiB: three rotations
		l.Info("line", "i", i, "pad", pad)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	// lumberjack prunes the old files in the background: poll.
	var names []string
	poll.UntilSays(t, "the log and 2 rotated files", func() (bool, string) {
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		names = names[:0]
		for _, e := range ents {
			names = append(names, e.Name())
			info, err := e.Info()
			if err != nil {
				continue // pruned meanwhile
			}
			if info.Size() > 1<<20 {
				t.Fatalf("%s holds %d bytes, want at most 1 MiB", e.Name(), info.Size())
			}
		}
		return len(names) == 3, fmt.Sprintf("log directory = %v", names)
	})
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	var last string
	for sc.Scan() {
		last = sc.Text()
	}
	if !strings.Contains(last, "i=3999") {
		t.Errorf("the log's last line = %.80q, want line 3999", last)
	}
}

func TestLogFlagsRefused(t *testing.T) {
	for _, f := range []logFlags{
		{level: "loud", format: "text", maxSizeMiB: 1},
		{level: "info", format: "xml", maxSizeMiB: 1},
		{level: "info", format: "text", maxSizeMiB: 0},
		{level: "info", format: "text", maxSizeMiB: 1, backups: -1},
	} {
		if err := f.check(); err == nil {
			t.Errorf("check(%+v) = nil, want a usage error", f)
		}
	}
}

// The controller's debug-log bounds: refused before anything starts
// when malformed, passed to the controller as given.
func TestDebugLogFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--debug-log-size", "12parsecs"},
		{"--debug-log-size", "0"},
		{"--debug-log-lines", "0"},
	} {
		cmd := controllerCommand()
		cmd.SetArgs(append([]string{"--data-dir", t.TempDir()}, args...))
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		err := cmd.Execute()
		var u usageError
		if !errors.As(err, &u) || !strings.Contains(err.Error(), args[0]) {
			t.Errorf("controller %v = %v, want a usage error naming %s", args, err, args[0])
		}
	}
	f := controllerFlags{debugLogLines: 1000, debugLogSize: "4MiB"}
	if got := f.logRing(); got.Lines != 1000 || got.Bytes != 4<<20 {
		t.Errorf("logRing() = %+v, want 1000 lines, 4 MiB", got)
	}
}
