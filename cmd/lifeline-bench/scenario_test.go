package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// binaries builds lifelined and ctl once for the package's scenario
// tests, into a directory removed when the test binary ends (TestMain).
var binaries = struct {
	once sync.Once
	dir  string
	err  error
	out  []byte
}{}

// runScenario runs the harness as c says, at small scale, against
// lifelined and ctl built from this tree, failing t unless it completes
// within timeout. c's binaries and directory are filled in.
func runScenario(t *testing.T, c config, timeout time.Duration) *results {
	t.Helper()
	if testing.Short() {
		t.Skip("builds lifelined and ctl and runs a controller")
	}
	binaries.once.Do(func() {
		if binaries.dir, binaries.err = os.MkdirTemp("", "ll-bench-bin-"); binaries.err != nil {
			return
		}
		build := exec.Command("go", "build", "-o", binaries.dir+string(filepath.Separator),
			"github.com/lifelinehq/lifeline/cmd/lifelined", "github.com/lifelinehq/lifeline/cmd/ctl")
		binaries.out, binaries.err = build.CombinedOutput()
	})
	if binaries.err != nil {
		t.Fatalf("go build: %v\n%s", binaries.err, binaries.out)
	}
	c.lifelined, c.ctl, c.dir = filepath.Join(binaries.dir, "lifelined"), filepath.Join(binaries.dir, "ctl"), t.TempDir()
	if err := c.validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	res, err := run(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	return res
}
