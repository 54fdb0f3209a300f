package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
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

// The sleeping action sleeps its seconds and exits 0; SIGTERM ends it at
// once.
func TestSleepProgram(t *testing.T) {
	prog := sleepProgram(1)
	if prog == nil {
		t.Skip("no sleeping program for this architecture")
	}
	path := filepath.Join(t.TempDir(), "sleep")
	if err := os.WriteFile(path, prog, 0o755); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if out, err := exec.Command(path).CombinedOutput(); err != nil || len(out) != 0 {
		t.Fatalf("run = %q, %v; want no output, exit 0", out, err)
	}
	if d := time.Since(start); d < time.Second {
		t.Fatalf("it slept %s, want 1s", d)
	}
	if err := os.WriteFile(path, sleepProgram(60), 0o755); err != nil {
		t.Fatal(err)
	}
	long := exec.Command(path)
	if err := long.Start(); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if err := long.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err := long.Wait()
	if ws, ok := long.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		t.Fatalf("after SIGTERM: %v, want ended by it", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("SIGTERM took %s to end it", d)
	}
}
