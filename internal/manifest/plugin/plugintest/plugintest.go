// Package plugintest gives tests the plugins of examples/plugins, built,
// and a broken plugin whose state stays STALE after its actions. Only
// tests import it.
package plugintest

import (
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
)

// The example plugins, as Go commands.
const (
	// File ensures a file with a content and mode.
	File = "github.com/lifelinehq/lifeline/examples/plugins/file"
	// DNSRecord keeps DNS records in a JSON file under its writable plug
	// "zone".
	DNSRecord = "github.com/lifelinehq/lifeline/examples/plugins/dns-record"
)

//go:embed testdata/stuck
var stuck []byte

// Build compiles each Go command into dir, named by the last element of
// its import path ("dns-record"), with the go command on PATH.
func Build(dir string, pkgs ...string) error {
	if len(pkgs) == 0 {
		return nil
	}
	args := append([]string{"build", "-o", dir + string(filepath.Separator)}, pkgs...)
	cmd := exec.Command("go", args...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	for _, p := range pkgs {
		if _, err := os.Stat(filepath.Join(dir, path.Base(p))); err != nil {
			return err
		}
	}
	return nil
}

// WriteStuck writes the stuck plugin (a POSIX shell script) into dir as
// name and returns its path. Its init accepts any config object; its
// state is always STALE with one action, "fix", that succeeds and
// changes nothing.
func WriteStuck(dir, name string) (string, error) {
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, stuck, 0o755); err != nil {
		return "", err
	}
	return p, nil
}
