package hostexec

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestApt installs, queries and removes a tiny Debian package built
// here, from its local file (no network). It runs where apt-get and
// dpkg-deb are and the test runs as root (CI), and is skipped elsewhere.
func TestApt(t *testing.T) {
	for _, tool := range []string{"apt-get", "dpkg-deb", "dpkg-query"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s: %v", tool, err)
		}
	}
	if os.Geteuid() != 0 {
		t.Skip("not root")
	}
	ctx := context.Background()
	const name = "lifeline-hostexec-test"
	root := filepath.Join(t.TempDir(), "pkg")
	for path, content := range map[string]string{
		"DEBIAN/control": "Package: " + name + "\nVersion: 1.0-1\nArchitecture: all\n" +
			"Maintainer: Lifeline tests <tests@lifeline.invalid>\nDescription: a package hostexec's tests install\n",
		"usr/share/doc/" + name + "/README": "installed by hostexec's TestApt\n",
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, path)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, path), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	deb := filepath.Join(t.TempDir(), name+".deb")
	if out, err := exec.Command("dpkg-deb", "--root-owner-group", "--build", root, deb).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb: %v: %s", err, out)
	}
	var pm Apt
	t.Cleanup(func() { pm.Remove(context.Background(), []string{name}) })

	query := func(want string) {
		t.Helper()
		got, err := pm.Query(ctx, []string{name, "lifeline-no-such-package"})
		if err != nil || got[name] != want || got["lifeline-no-such-package"] != "" {
			t.Fatalf("Query = %v, %v; want %s at %q", got, err, name, want)
		}
	}
	query("")
	if _, err := runTool(ctx, aptEnv, "apt-get", "install", "-y", "--no-install-recommends", deb); err != nil {
		t.Fatal(err)
	}
	query("1.0-1")
	if _, err := os.Stat("/usr/share/doc/" + name + "/README"); err != nil {
		t.Errorf("the package's file: %v", err)
	}
	// Installed already: apt-get has nothing to do, by name and exact version.
	if err := pm.Install(ctx, []Package{{Name: name, Version: "1.0-1"}}); err != nil {
		t.Errorf("Install of the installed package: %v", err)
	}
	if err := pm.Remove(ctx, []string{name}); err != nil {
		t.Fatal(err)
	}
	query("")
	if err := pm.Install(ctx, []Package{{Name: "lifeline-no-such-package"}}); err == nil {
		t.Errorf("Install(lifeline-no-such-package) = nil, want an error")
	} else {
		t.Logf("Install(lifeline-no-such-package): %v", err)
	}
}
