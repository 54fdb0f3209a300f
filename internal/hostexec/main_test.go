package hostexec

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// fakepkgPath is the fakepkg program TestMain builds for the tests of
// the exec: package manager.
var fakepkgPath string

// The test binary runs itself as a child (a job runner to SIGKILL) when
// childDirEnv names the test's directory; fakepkgEnv passes the built
// fakepkg on.
const (
	childDirEnv = "HOSTEXEC_TEST_CHILD_DIR"
	fakepkgEnv  = "HOSTEXEC_TEST_FAKEPKG"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(childDirEnv); dir != "" {
		fakepkgPath = os.Getenv(fakepkgEnv)
		if err := runChildJob(dir); err != nil {
			fmt.Fprintln(os.Stderr, "child job:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "hostexec-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	fakepkgPath = filepath.Join(dir, "fakepkg")
	build := exec.Command("go", "build", "-o", fakepkgPath, "./internal/fakepkg")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build fakepkg:", err)
		return 1
	}
	return m.Run()
}

// fakepkg returns the exec: package manager over a fresh fakepkg record
// of the test's, and the record's path.
func fakepkg(t *testing.T) (Exec, string) {
	t.Helper()
	db := filepath.Join(t.TempDir(), "fakepkg.json")
	t.Setenv("FAKEPKG_DB", db)
	t.Setenv("FAKEPKG_LOG", db+".log")
	t.Setenv("FAKEPKG_FAIL", "")
	t.Setenv("FAKEPKG_SLEEP", "")
	t.Setenv("FAKEPKG_SLOW", "")
	pm, err := ParsePackageManager("exec:" + fakepkgPath)
	if err != nil {
		t.Fatal(err)
	}
	return pm.(Exec), db
}
