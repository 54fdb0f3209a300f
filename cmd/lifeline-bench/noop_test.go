package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// The no-op hook runs and exits 0, whatever its arguments and environment.
func TestNoopProgramExitsZero(t *testing.T) {
	prog := noopProgram()
	if prog == nil {
		t.Skip("no no-op program for this architecture")
	}
	path := filepath.Join(t.TempDir(), "install")
	if err := os.WriteFile(path, prog, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(path, "an", "argument")
	cmd.Env = []string{"LIFELINE_HOOK_NAME=install"}
	out, err := cmd.CombinedOutput()
	if err != nil || len(out) != 0 {
		t.Fatalf("run = %q, %v; want no output, exit 0", out, err)
	}
}
