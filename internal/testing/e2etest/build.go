package e2etest

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Binaries are the programs a test package builds once, in TestMain.
type Binaries struct {
	Ctl       string
	Lifelined string
	// Reaper ends a sandbox's processes if the test binary dies without
	// its cleanup (e2etest/reaper); none is started when it is empty.
	Reaper string
	// Fakepkg is hostexec's test package manager, for machine agents
	// started with --package-manager=exec: (a wrapper sets its
	// environment: see hostexec/internal/fakepkg).
	Fakepkg string
}

// RepoRoot returns the main module's directory, as go env GOMOD finds it
// from the working directory (a test's package directory).
func RepoRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside the lifeline module")
	}
	return filepath.Dir(mod), nil
}

// goBuild runs go build with args in dir, with env added to the
// environment.
func goBuild(dir string, env []string, args ...string) error {
	cmd := exec.Command("go", append([]string{"build"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// What the binaries tests build say they are (internal/version), as
// make build stamps them: tests compare ctl version and --version with
// these.
const (
	StampVersion = "v0.0.0-test"
	StampCommit  = "0123456789abcdef0123456789abcdef01234567"
	StampDate    = "2026-01-02T03:04:05Z"
)

// StampFlag is the go build flag that stamps StampVersion, StampCommit
// and StampDate into a binary, as the Makefile's LDFLAGS do.
func StampFlag() string {
	const pkg = "github.com/lifelinehq/lifeline/internal/version"
	return "-ldflags=-X " + pkg + ".version=" + StampVersion + " -X " + pkg + ".commit=" + StampCommit + " -X " + pkg + ".date=" + StampDate
}

// BuildBinaries builds ctl, lifelined, the sandboxes' reaper and fakepkg
// into dir, stamped (StampFlag).
func BuildBinaries(dir string) (Binaries, error) {
	root, err := RepoRoot()
	if err != nil {
		return Binaries{}, err
	}
	if err := goBuild(root, nil, StampFlag(), "-o", dir+string(filepath.Separator), "./cmd/ctl", "./cmd/lifelined", "./internal/testing/e2etest/reaper", "./internal/hostexec/internal/fakepkg"); err != nil {
		return Binaries{}, err
	}
	return Binaries{Ctl: filepath.Join(dir, "ctl"), Lifelined: filepath.Join(dir, "lifelined"), Reaper: filepath.Join(dir, "reaper"),
		Fakepkg: filepath.Join(dir, "fakepkg")}, nil
}

// BuildLifelined builds lifelined alone into dir, stamped (StampFlag),
// and returns its path: for a test package that runs the daemon itself,
// without a sandbox.
func BuildLifelined(dir string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "lifelined")
	if err := goBuild(root, nil, StampFlag(), "-o", out, "./cmd/lifelined"); err != nil {
		return "", err
	}
	return out, nil
}

// BuildEtcd builds the etcd server of tools/etcd (a module of its own, at
// the main module's etcd version) into dir and returns its path. The
// first build fetches its modules from the module proxy.
func BuildEtcd(dir string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "etcd")
	if err := goBuild(filepath.Join(root, "tools", "etcd"), nil, "-o", out, "."); err != nil {
		return "", err
	}
	return out, nil
}

// DemoCharms are the example charms BuildDemoCharms builds.
var DemoCharms = []string{"kv", "app", "logger"}

// BuildDemoCharms copies the demo charms into dir and builds their
// servers into the copies, as make charms does into the originals.
func BuildDemoCharms(dir string) error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	for _, name := range DemoCharms {
		if err := CopyCharm(filepath.Join(root, "examples", "charms", name), filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("copy charm %s: %w", name, err)
		}
	}
	static := []string{"CGO_ENABLED=0"}
	for charm, server := range map[string]string{"kv": "kvserver", "app": "appserver"} {
		out := filepath.Join(dir, charm, "bin", charm+"-server")
		if err := goBuild(root, static, "-trimpath", "-ldflags=-s -w", "-o", out, "./examples/"+server); err != nil {
			return err
		}
	}
	return nil
}

// CopyCharm copies a charm directory, symlinks as symlinks, but not its
// bin directory (what make charms may have built there).
func CopyCharm(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		if rel == "bin" && d.IsDir() {
			return filepath.SkipDir
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case d.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(path)
			if err != nil {
				return err
			}
			return os.Symlink(link, target)
		case d.Type().IsRegular():
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			return os.WriteFile(target, data, info.Mode().Perm())
		}
		return fmt.Errorf("%s: not a file, directory or symlink", path)
	})
}
