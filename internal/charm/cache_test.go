package charm

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func cacheArchive(t *testing.T, install string) []byte {
	t.Helper()
	hook := te{name: "hooks/install", typ: tar.TypeReg, body: install, mode: 0o755}
	return makeArchive(t, file("metadata.yaml", okMeta), hook, file("data/seed.txt", "seed"),
		link("seed", "data/seed.txt"), dirEntry("empty"))
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func sameFile(t *testing.T, a, b string) bool {
	t.Helper()
	fa, err := os.Lstat(a)
	if err != nil {
		t.Fatal(err)
	}
	fb, err := os.Lstat(b)
	if err != nil {
		t.Fatal(err)
	}
	return os.SameFile(fa, fb)
}

// Units deployed from one Cache share the charm's files and nothing else.
func TestCacheDeploySharesFilesOnly(t *testing.T) {
	root := t.TempDir()
	c := NewCache(filepath.Join(root, "charms"))
	data := cacheArchive(t, "#!/bin/sh\nexit 0\n")
	a, b := filepath.Join(root, "a", "charm"), filepath.Join(root, "b", "charm")
	for _, dir := range []string{a, b} {
		if err := c.Deploy(data, dir); err != nil {
			t.Fatal(err)
		}
	}
	// Each is what Extract makes.
	ex := filepath.Join(root, "extracted")
	if err := Extract(data, ex); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"metadata.yaml", "hooks/install", "data/seed.txt", "seed"} {
		if got, want := readFile(t, filepath.Join(a, name)), readFile(t, filepath.Join(ex, name)); got != want {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}
	if fi, err := os.Stat(filepath.Join(a, "empty")); err != nil || !fi.IsDir() {
		t.Errorf("empty: %v, want a directory", err)
	}
	fi, err := os.Stat(filepath.Join(a, "hooks", "install"))
	if err != nil || fi.Mode().Perm() != 0o555 {
		t.Errorf("the hook's mode is %v (%v), want 0555", fi.Mode(), err)
	}
	fi, err = os.Stat(filepath.Join(a, "metadata.yaml"))
	if err != nil || fi.Mode().Perm() != 0o444 {
		t.Errorf("metadata.yaml's mode is %v (%v), want 0444", fi.Mode(), err)
	}
	// Files shared; directories and symlinks each unit's own.
	for name, shared := range map[string]bool{"metadata.yaml": true, "hooks/install": true, "data/seed.txt": true,
		"seed": false, "hooks": false, "data": false, "empty": false, ".": false} {
		if got := sameFile(t, filepath.Join(a, name), filepath.Join(b, name)); got != shared {
			t.Errorf("%s shared: %t, want %t", name, got, shared)
		}
	}
	// A unit adding a file, or replacing one by renaming, touches no other.
	if err := os.WriteFile(filepath.Join(a, "hooks", "state.db"), []byte("a's"), 0o644); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(a, "metadata.yaml.new")
	if err := os.WriteFile(tmp, []byte("replaced"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(a, "metadata.yaml")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(b, "hooks", "state.db")); !os.IsNotExist(err) {
		t.Errorf("b sees a's new file: %v", err)
	}
	if got := readFile(t, filepath.Join(b, "metadata.yaml")); got != okMeta {
		t.Errorf("b's metadata.yaml is %q after a replaced its own", got)
	}
	// Removing a unit's charm leaves the others whole.
	if err := os.RemoveAll(a); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(b, "hooks", "install")); got != "#!/bin/sh\nexit 0\n" {
		t.Errorf("b's hook is %q after a went", got)
	}
}

// A cached file changed in place is not handed to the units deployed
// after: they get a fresh copy.
func TestCacheDeployAfterAChangeInPlace(t *testing.T) {
	root := t.TempDir()
	c := NewCache(filepath.Join(root, "charms"))
	data := cacheArchive(t, "#!/bin/sh\nexit 0\n")
	a, b := filepath.Join(root, "a"), filepath.Join(root, "b")
	if err := c.Deploy(data, a); err != nil {
		t.Fatal(err)
	}
	hook := filepath.Join(a, "hooks", "install")
	if err := os.Chmod(hook, 0o755); err != nil { // as root could do without
		t.Fatal(err)
	}
	if err := os.WriteFile(hook, []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := c.Deploy(data, b); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(b, "hooks", "install")); got != "#!/bin/sh\nexit 0\n" {
		t.Errorf("b's hook is %q, want the charm's", got)
	}
	if sameFile(t, hook, filepath.Join(b, "hooks", "install")) {
		t.Error("b shares a's changed hook")
	}
	// The changed copy stays while a links to it, and goes after.
	entries := func() []string {
		names, err := os.ReadDir(filepath.Join(root, "charms"))
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, n := range names {
			out = append(out, n.Name())
		}
		return out
	}
	if got := entries(); len(got) != 2 {
		t.Errorf("cache holds %v, want the fresh copy and the changed one", got)
	}
	if err := os.RemoveAll(a); err != nil {
		t.Fatal(err)
	}
	other := cacheArchive(t, "#!/bin/sh\necho other\n")
	if err := c.Deploy(other, filepath.Join(root, "c")); err != nil {
		t.Fatal(err)
	}
	if got := entries(); len(got) != 2 || strings.Contains(strings.Join(got, " "), "changed") {
		t.Errorf("cache holds %v, want b's copy and c's", got)
	}
}

// DeployFrom fetches an archive only when the Cache has no intact copy of
// it, once for deploys of it at once, and refuses an archive that is not
// the one named.
func TestCacheDeployFrom(t *testing.T) {
	root := t.TempDir()
	c := NewCache(filepath.Join(root, "charms"))
	data := cacheArchive(t, "#!/bin/sh\nexit 0\n")
	sum := sha256.Sum256(data)
	key := hex.EncodeToString(sum[:])
	var fetches atomic.Int32
	fetch := func() ([]byte, error) {
		fetches.Add(1)
		time.Sleep(10 * time.Millisecond) // the others wait meanwhile
		return data, nil
	}
	// Eight units deploy it at once: one fetch.
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() { errs[i] = c.DeployFrom(key, filepath.Join(root, fmt.Sprint("u", i)), fetch) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("unit %d: %v", i, err)
		}
		if !sameFile(t, filepath.Join(root, "u0", "hooks", "install"), filepath.Join(root, fmt.Sprint("u", i), "hooks", "install")) {
			t.Errorf("unit %d does not share the cached hook", i)
		}
	}
	if n := fetches.Load(); n != 1 {
		t.Errorf("%d fetches for eight deploys at once, want 1", n)
	}
	if got := readFile(t, filepath.Join(root, "u7", "seed")); got != "seed" {
		t.Errorf("u7's seed reads %q", got)
	}
	// A hook changes a charm file in place: the next deploy fetches again
	// and links to a fresh copy.
	hook := filepath.Join(root, "u0", "hooks", "install")
	if err := os.Chmod(hook, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := c.DeployFrom(key, filepath.Join(root, "v"), fetch); err != nil {
		t.Fatal(err)
	}
	if n := fetches.Load(); n != 2 {
		t.Errorf("%d fetches after a change in place, want 2", n)
	}
	if sameFile(t, hook, filepath.Join(root, "v", "hooks", "install")) {
		t.Error("v shares u0's changed hook")
	}
	// A fetch's error comes back as it is, and nothing is made.
	boom := errors.New("controller away")
	other := cacheArchive(t, "#!/bin/sh\necho other\n")
	osum := sha256.Sum256(other)
	okey := hex.EncodeToString(osum[:])
	w := filepath.Join(root, "w")
	if err := c.DeployFrom(okey, w, func() ([]byte, error) { return nil, boom }); err != boom {
		t.Errorf("DeployFrom with a failed fetch = %v, want %v", err, boom)
	}
	// An archive that is not the one named is refused.
	if err := c.DeployFrom(okey, w, fetch); err == nil || !strings.Contains(err.Error(), "SHA-256") {
		t.Errorf("DeployFrom of the wrong archive = %v, want an error naming its SHA-256", err)
	}
	if _, err := os.Lstat(w); !os.IsNotExist(err) {
		t.Errorf("failed deploys made %s (%v)", w, err)
	}
}

// Copies no unit links to go when a new Cache on the directory is first
// used; so do copies cut short.
func TestCachePrunesWhatNoUnitUses(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "charms")
	data := cacheArchive(t, "#!/bin/sh\nexit 0\n")
	other := cacheArchive(t, "#!/bin/sh\nexit 2\n")
	c := NewCache(dir)
	if err := c.Deploy(data, filepath.Join(root, "a")); err != nil {
		t.Fatal(err)
	}
	if err := c.Deploy(other, filepath.Join(root, "b")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(root, "a")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, cacheTemp+"cut-short"), 0o755); err != nil {
		t.Fatal(err)
	}
	c = NewCache(dir) // a restarted agent
	if err := c.Deploy(other, filepath.Join(root, "c")); err != nil {
		t.Fatal(err)
	}
	names, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 1 {
		t.Errorf("cache holds %v, want only the copy b and c use", names)
	}
	if !sameFile(t, filepath.Join(root, "b", "hooks", "install"), filepath.Join(root, "c", "hooks", "install")) {
		t.Error("c does not share b's copy")
	}
}

func TestCacheDeployRefuses(t *testing.T) {
	root := t.TempDir()
	c := NewCache(filepath.Join(root, "charms"))
	bad := makeArchive(t, file("metadata.yaml", okMeta), link("out", "../../etc/passwd"))
	if err := c.Deploy(bad, filepath.Join(root, "a")); err == nil {
		t.Error("an escaping symlink was deployed")
	}
	if _, err := os.Lstat(filepath.Join(root, "a")); !os.IsNotExist(err) {
		t.Errorf("a bad archive left %v", err)
	}
	full := filepath.Join(root, "full")
	if err := os.MkdirAll(full, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(full, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := c.Deploy(cacheArchive(t, "x"), full); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("deploy into a non-empty directory: %v", err)
	}
}

// Units of a machine deploy at once.
func TestCacheDeployConcurrently(t *testing.T) {
	root := t.TempDir()
	c := NewCache(filepath.Join(root, "charms"))
	data := cacheArchive(t, "#!/bin/sh\nexit 0\n")
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.Deploy(data, filepath.Join(root, "unit", string(rune('a'+i))))
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if !sameFile(t, filepath.Join(root, "unit", "a", "metadata.yaml"), filepath.Join(root, "unit", "h", "metadata.yaml")) {
		t.Error("units deployed at once do not share the charm's files")
	}
}

// A charm without hooks is not deployed by DeployHooksFrom: its archive is
// fetched once, and no unit's directory, link or cached copy is made. A
// charm with hooks is deployed as DeployFrom would, a symlink named hooks
// counting as hooks.
func TestCacheDeployHooksFrom(t *testing.T) {
	root := t.TempDir()
	c := NewCache(filepath.Join(root, "charms"))
	keyOf := func(data []byte) string {
		sum := sha256.Sum256(data)
		return hex.EncodeToString(sum[:])
	}
	hookless := makeArchive(t, file("metadata.yaml", okMeta), file("data/seed.txt", "seed"))
	var fetches atomic.Int32
	fetch := func(data []byte) func() ([]byte, error) {
		return func() ([]byte, error) { fetches.Add(1); return data, nil }
	}
	for i := range 3 {
		dir := filepath.Join(root, fmt.Sprint("u", i), "charm")
		made, err := c.DeployHooksFrom(keyOf(hookless), dir, fetch(hookless), func() error { t.Error("before called for a charm without hooks"); return nil })
		if err != nil || made {
			t.Fatalf("unit %d: DeployHooksFrom of a charm without hooks = %v, %v; want false, nil", i, made, err)
		}
		if _, err := os.Lstat(filepath.Join(root, fmt.Sprint("u", i))); !os.IsNotExist(err) {
			t.Errorf("unit %d: its directory was made (%v)", i, err)
		}
	}
	if n := fetches.Load(); n != 1 {
		t.Errorf("%d fetches for three units of a charm without hooks, want 1", n)
	}
	if names, err := os.ReadDir(filepath.Join(root, "charms")); err == nil && len(names) > 0 {
		t.Errorf("the cache holds %v for a charm without hooks", names)
	}
	// DeployFrom still deploys it.
	if err := c.DeployFrom(keyOf(hookless), filepath.Join(root, "all"), fetch(hookless)); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(root, "all", "data", "seed.txt")); got != "seed" {
		t.Errorf("DeployFrom's seed reads %q", got)
	}
	// HasHooks says the same of the archive.
	if has, err := HasHooks(hookless); err != nil || has {
		t.Errorf("HasHooks of a charm without hooks = %v, %v", has, err)
	}

	for _, data := range [][]byte{
		cacheArchive(t, "#!/bin/sh\nexit 0\n"),
		makeArchive(t, file("metadata.yaml", okMeta), dirEntry("bin"), link("hooks", "bin")),
		// A charm with actions but no hooks: its units run the actions.
		makeArchive(t, file("metadata.yaml", okMeta), file("actions.yaml", "keys: {safe: true}\n"),
			te{name: "actions/keys", typ: tar.TypeReg, body: "#!/bin/sh\n", mode: 0o755}),
	} {
		dir := filepath.Join(root, "h-"+keyOf(data)[:8])
		befores := 0
		made, err := c.DeployHooksFrom(keyOf(data), dir, fetch(data), func() error { befores++; return nil })
		if befores != 1 {
			t.Errorf("before called %d times for a charm with hooks, want 1", befores)
		}
		if err != nil || !made {
			t.Fatalf("DeployHooksFrom of a charm with hooks = %v, %v; want true, nil", made, err)
		}
		_, errHooks := os.Lstat(filepath.Join(dir, "hooks"))
		_, errActions := os.Lstat(filepath.Join(dir, "actions"))
		if errHooks != nil && errActions != nil {
			t.Errorf("the charm with hooks deployed without them: %v, %v", errHooks, errActions)
		}
		if has, err := HasHooks(data); err != nil || !has {
			t.Errorf("HasHooks of a charm with hooks = %v, %v", has, err)
		}
	}
}
