package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/hooks"
)

func TestMain(m *testing.M) {
	// startHookSpawner runs this binary as the spawner.
	if len(os.Args) > 1 && os.Args[1] == "-hook-spawner-process" {
		if err := runHookSpawner(); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// writeHook writes an executable hook file in dir.
func writeHook(t *testing.T, dir, name, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "hooks"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "hooks", name), []byte(content), 0o755); err != nil {
		t.Fatal(err)
	}
}

// Hooks started by the spawner run as hooks.Run's own do: their output,
// exit codes, their kill at the timeout, a file that cannot be run, many
// at once; once the spawner is gone, starting one fails rather than hangs.
func TestHookSpawnerRunsHooks(t *testing.T) {
	s, err := startHookSpawner(os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			s.stop()
		}
	})
	charm := t.TempDir()
	writeHook(t, charm, "install", "#!/bin/sh\necho out \"$LIFELINE_UNIT_NAME\"\necho err >&2\nexit 3\n")
	writeHook(t, charm, "start", "#!/bin/sh\nexec sleep 30\n")
	writeHook(t, charm, "stop", "exit 0\n") // no #! line
	writeHook(t, charm, "config-changed", "#!/bin/sh\nexit 0\n")
	spec := func(hook string) hooks.Spec {
		return hooks.Spec{Unit: "kv/0", Hook: hook, Path: filepath.Join("hooks", hook), CharmDir: charm, ToolsDir: charm,
			Env: map[string]string{hooks.EnvUnitName: "kv/0"}, Starter: s, Timeout: 10 * time.Second, KillGrace: time.Second}
	}
	ctx := context.Background()

	res, err := hooks.Run(ctx, spec("install"))
	if err != nil || res.ExitCode != 3 || res.Killed {
		t.Fatalf("install: %+v, %v; want exit 3", res, err)
	}
	if want := []string{"out kv/0", "err"}; !slices.Equal(res.Tail, want) && !slices.Equal(res.Tail, []string{"err", "out kv/0"}) {
		t.Errorf("install's output %q, want %q", res.Tail, want)
	}

	sp := spec("start")
	sp.Timeout = 300 * time.Millisecond
	res, err = hooks.Run(ctx, sp)
	if err != nil || !res.TimedOut || !res.Killed || res.Signal != syscall.SIGTERM {
		t.Fatalf("start: %+v, %v; want killed at its timeout by SIGTERM", res, err)
	}

	if _, err := hooks.Run(ctx, spec("stop")); err == nil || !strings.Contains(err.Error(), "#! line") {
		t.Fatalf("stop without #!: %v, want the error to name the missing #! line", err)
	}

	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for range 20 {
		wg.Go(func() {
			res, err := hooks.Run(ctx, spec("config-changed"))
			if err == nil && !res.Succeeded() {
				err = os.ErrInvalid
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("config-changed, 20 at once: %v", err)
		}
	}

	stopped = true
	s.stop()
	done := make(chan error, 1)
	go func() {
		_, err := hooks.Run(ctx, spec("config-changed"))
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a hook ran after the spawner stopped")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a hook started after the spawner stopped hung")
	}
}
