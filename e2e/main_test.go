package e2e

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/lifelinehq/lifeline/internal/testing/e2etest"
)

// What TestMain builds once for the package: the tests run these as an
// operator would, and never write into the repository.
var (
	bins      e2etest.Binaries
	charmsDir string // copies of examples/charms/{kv,app,logger} with their servers built in
	charmsErr error  // why the charms could not be built, if they could not
	// etcdBin is an etcd server (tools/etcd) for the tests that put the
	// controller on an etcd of their own (startOnEtcd), and etcdErr why
	// it could not be built, if it could not.
	etcdBin string
	etcdErr error
)

// parallel is how many of the package's parallel tests run at once
// unless go test's -parallel says otherwise. They spend their time
// waiting on hooks, agents and timeouts, not on the CPU, so more of them
// run at once than go test's default (GOMAXPROCS, 2 on a small CI
// machine).
const parallel = 4

func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		if err := flag.Set("test.parallel", strconv.Itoa(parallel)); err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			os.Exit(1)
		}
	}
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "ll-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	if bins, err = e2etest.BuildBinaries(filepath.Join(dir, "bin")); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	charmsDir = filepath.Join(dir, "charms")
	charmsErr = e2etest.BuildDemoCharms(charmsDir)
	etcdBin, etcdErr = e2etest.BuildEtcd(dir)
	return m.Run()
}

// newSandbox is a sandbox with the package's binaries.
func newSandbox(t *testing.T) *e2etest.Sandbox { return e2etest.NewSandbox(t, bins) }

// needCharms fails the test when the demo charms could not be built.
func needCharms(t *testing.T) {
	t.Helper()
	if charmsErr != nil {
		t.Fatalf("the demo charms could not be built: %v", charmsErr)
	}
}

// charmPath is the path of a built demo charm; the test fails when the
// charms could not be built.
func charmPath(t *testing.T, name string) string {
	t.Helper()
	needCharms(t)
	return filepath.Join(charmsDir, name)
}
