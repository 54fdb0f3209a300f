// Command file is an example Lifeline plugin: the resource type "a file
// with this content and mode". Its config is {path, content, mode}; it is
// VALID when the file at path holds content with mode, and STALE with a
// "write" action otherwise. The write replaces the file atomically.
//
// It speaks the plugin protocol of docs/MANIFESTS.md: with no argument it
// answers init, with "state" it answers the state action, with "write" it
// runs the action. Each run reads the same JSON message on stdin.
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
)

// schema is the config a resource of this type takes.
const schema = `{
  "type": "object",
  "additionalProperties": false,
  "required": ["path", "content"],
  "properties": {
    "path": {"type": "string", "pattern": "^/", "description": "absolute path of the file"},
    "content": {"type": "string", "maxLength": 65536},
    "mode": {"type": "string", "pattern": "^0?[0-7]{3}$", "default": "0644"}
  }
}`

// message is what each run reads on stdin.
type message struct {
	Name    string `json:"name"`
	Type    string `json:"type"`
	Version string `json:"version"`
	Verbose bool   `json:"verbose"`
	Config  config `json:"config"`
}

type config struct {
	Path    string `json:"path"`
	Content string `json:"content"`
	Mode    string `json:"mode"`
}

func main() {
	if err := run(os.Args[1:], os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "file:", err)
		os.Exit(1)
	}
}

func run(args []string, stdin io.Reader, stdout io.Writer) error {
	var m message
	if err := json.NewDecoder(stdin).Decode(&m); err != nil {
		return fmt.Errorf("read stdin: %w", err)
	}
	if len(args) == 0 {
		return answer(stdout, map[string]any{
			"config_schema": json.RawMessage(schema),
			"state_action":  map[string]any{"args": []string{"state"}},
		})
	}
	mode, err := parseMode(m.Config.Mode)
	if err != nil {
		return err
	}
	switch args[0] {
	case "state":
		return answer(stdout, state(m.Config, mode))
	case "write":
		if err := write(m.Config.Path, []byte(m.Config.Content), mode); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "wrote %s (%d bytes, mode %04o)\n", m.Config.Path, len(m.Config.Content), mode)
		return nil
	}
	return fmt.Errorf("unknown action %q", args[0])
}

func parseMode(s string) (fs.FileMode, error) {
	if s == "" {
		return 0o644, nil
	}
	n, err := strconv.ParseUint(s, 8, 32)
	if err != nil || n > 0o777 {
		return 0, fmt.Errorf("mode %q: want three octal digits", s)
	}
	return fs.FileMode(n), nil
}

// state compares the file with the config: VALID with what it holds, or
// STALE with one write action (and what it holds now, when it exists).
func state(c config, mode fs.FileMode) map[string]any {
	want := map[string]any{"path": c.Path, "mode": fmt.Sprintf("%04o", mode), "content": c.Content, "sha256": digest([]byte(c.Content))}
	write := []map[string]any{{
		"name":        "write",
		"description": fmt.Sprintf("write %s (%d bytes, mode %04o)", c.Path, len(c.Content), mode),
		"args":        []string{"write"},
	}}
	fi, err := os.Lstat(c.Path)
	if err != nil || !fi.Mode().IsRegular() {
		return map[string]any{"status": "STALE", "actions": write}
	}
	got, err := os.ReadFile(c.Path)
	if err != nil {
		return map[string]any{"status": "STALE", "actions": write}
	}
	if string(got) == c.Content && fi.Mode().Perm() == mode {
		return map[string]any{"status": "VALID", "state": want}
	}
	now := map[string]any{"path": c.Path, "mode": fmt.Sprintf("%04o", fi.Mode().Perm()), "size": len(got), "sha256": digest(got)}
	return map[string]any{"status": "STALE", "staleState": now, "actions": write}
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// write replaces path with content and mode: a temporary file in the same
// directory, renamed over it, so that a reader never sees half a file.
func write(path string, content []byte, mode fs.FileMode) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(content)
	err = errors.Join(err, tmp.Chmod(mode), tmp.Sync(), tmp.Close())
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	return nil
}

func answer(w io.Writer, v any) error {
	return json.NewEncoder(w).Encode(v)
}
