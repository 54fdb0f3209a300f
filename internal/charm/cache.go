package charm

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// A Cache keeps unpacked charms in a directory of a machine, one copy of
// each archive, so that the units of the machine deploying the same charm
// share its files as hard links instead of writing copies of their own.
// On the machine the scale harness runs on, writing a small file cost ten
// times the CPU of linking one (about 0.6 ms against 0.05), and every unit
// unpacked its own copy of a charm of a dozen files.
//
// A unit's charm directory is still its own: its directories and symlinks
// are made for it, so a hook may add files there or replace a charm file
// by renaming a new one over it, and that touches no other unit. What the
// units share are the charm's regular files, which Deploy makes read-only
// (0555 for an executable, 0444 for the rest) and stamps with a fixed
// modification time: a hook must not change a charm file in place. One
// that does (as root, who may) changes it for every unit linked to it, but
// not for units deployed after: Deploy checks the cached copy's files
// (kind, size, mode and time) before linking them, and unpacks a fresh
// copy when any differs.
//
// A Cache is safe for concurrent use within one process; one process at a
// time may use its directory. Copies no unit links to any more are
// removed when another charm is unpacked and when the Cache is first used.
type Cache struct {
	dir  string
	mu   sync.Mutex
	once bool // the leftovers of earlier processes are cleaned up
	// trees holds, by key, the tree of each archive Deploy was given:
	// what DeployFrom needs to deploy it again without the archive.
	trees map[string]*tree
	// fetching holds, by key, the lock DeployFrom holds while it fetches
	// the archive.
	fetching map[string]*sync.Mutex
}

// cacheTime is the modification time of every cached file.
var cacheTime = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// cacheTemp starts the names of the copies being unpacked, and of those
// being removed.
const cacheTemp = ".tmp-"

// NewCache returns a Cache of unpacked charms in dir, which is created
// when first needed.
func NewCache(dir string) *Cache {
	return &Cache{dir: dir, trees: map[string]*tree{}, fetching: map[string]*sync.Mutex{}}
}

// Deploy makes dir, which is created if absent and must otherwise be
// empty, a copy of the charm archive in data, as Extract does, its regular
// files hard links to the Cache's copy. It checks the whole archive first;
// on error dir may hold part of the charm.
func (c *Cache) Deploy(data []byte, dir string) error {
	_, err := c.deploy(data, sha256Hex(data), dir, true, nil)
	return err
}

// sha256Hex is data's SHA-256, in hex: the key of its copy in a Cache.
func sha256Hex(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// deploy is Deploy of data whose key is key; unless always, a charm
// without hooks or actions is not deployed (DeployHooksFrom). It calls before, when
// not nil, before it makes dir, and reports whether it made dir.
func (c *Cache) deploy(data []byte, key, dir string, always bool, before func() error) (bool, error) {
	t, err := archiveTree(data)
	if err != nil {
		return false, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.skipped(always) {
		// No unit links to its copy: none is made.
		c.trees[key] = t
		return false, nil
	}
	if err := c.start(); err != nil {
		return false, err
	}
	src := filepath.Join(c.dir, key)
	if !cachedIntact(src, t) {
		if err := c.unpack(data, key); err != nil {
			return false, err
		}
		c.prune(key)
	}
	c.trees[key] = t
	return true, linkTreeAfter(t, src, dir, before)
}

// linkTreeAfter is linkTree after before, when not nil.
func linkTreeAfter(t *tree, src, dir string, before func() error) error {
	if before != nil {
		if err := before(); err != nil {
			return err
		}
	}
	return linkTree(t, src, dir)
}

// DeployFrom makes dir as Deploy does, from the archive whose SHA-256
// (hex) is want: from the Cache's copy when this Cache was given the
// archive before and its copy is intact, and otherwise from the archive
// fetch returns, which must have that SHA-256. It calls fetch for one
// archive once at a time, and a call that waited for another's fetch uses
// what it brought: the units of a machine that deploy one charm at once
// download it once. An archive named by no SHA-256 (want empty) is
// fetched each time. A fetch's error is returned as it is.
func (c *Cache) DeployFrom(want, dir string, fetch func() ([]byte, error)) error {
	_, err := c.deployFrom(want, dir, fetch, true, nil)
	return err
}

// DeployHooksFrom is DeployFrom of a charm with hooks or actions (anything
// named hooks or actions at its top), and reports whether it made dir. A
// charm without either is not deployed: no hook or action of it will run,
// which is all a unit's copy of its charm is for, and a unit of it then
// costs its machine no
// directory or link to make and remove. Such a charm's archive is still
// fetched once, as DeployFrom would, to read what it holds. before, when
// not nil, is called just before dir is made (to make its parent, say),
// and not when it is not.
func (c *Cache) DeployHooksFrom(want, dir string, fetch func() ([]byte, error), before func() error) (bool, error) {
	return c.deployFrom(want, dir, fetch, false, before)
}

// deployFrom is DeployFrom, or DeployHooksFrom unless always.
func (c *Cache) deployFrom(want, dir string, fetch func() ([]byte, error), always bool, before func() error) (bool, error) {
	if want != "" {
		c.mu.Lock()
		l := c.fetching[want]
		if l == nil {
			l = new(sync.Mutex)
			c.fetching[want] = l
		}
		c.mu.Unlock()
		l.Lock()
		defer l.Unlock()
		if ok, made, err := c.deployCached(want, dir, always, before); ok || err != nil {
			return made, err
		}
	}
	data, err := fetch()
	if err != nil {
		return false, err
	}
	key := sha256Hex(data)
	if want != "" && key != want {
		return false, fmt.Errorf("charm archive has SHA-256 %s, want %s", key, want)
	}
	return c.deploy(data, key, dir, always, before)
}

// deployCached deploys, as deploy would, the archive whose SHA-256 is key
// when this Cache was given the archive before, from its copy when that
// is intact, and reports whether it did (ok) and whether it made dir.
// When it reports !ok it has changed nothing.
func (c *Cache) deployCached(key, dir string, always bool, before func() error) (ok, made bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.trees[key]
	if t == nil {
		return false, false, nil
	}
	if t.skipped(always) {
		return true, false, nil
	}
	src := filepath.Join(c.dir, key)
	if !cachedIntact(src, t) {
		delete(c.trees, key)
		return false, false, nil
	}
	return true, true, linkTreeAfter(t, src, dir, before)
}

// linkTree makes dir, which is created if absent and must otherwise be
// empty, a copy of the tree t whose regular files are links to src's.
func linkTree(t *tree, src, dir string) error {
	err := emptyDir(dir, "deploy charm")
	if err != nil {
		return err
	}
	// No entry's path passes through a symlink of the charm (tree), and
	// dir is new: plain paths stay inside it.
	for _, e := range t.sorted() {
		to := filepath.Join(dir, filepath.FromSlash(e.name))
		switch e.kind {
		case kindDir:
			// Sorted, a directory comes after its parent.
			err = os.Mkdir(to, 0o755)
		case kindSymlink:
			err = os.Symlink(e.link, to)
		case kindFile:
			err = os.Link(filepath.Join(src, filepath.FromSlash(e.name)), to)
		}
		if err != nil {
			return fmt.Errorf("deploy charm into %s: %w", dir, err)
		}
	}
	return nil
}

// start creates the Cache's directory and removes what an earlier process
// left: copies cut short, and copies no unit links to.
func (c *Cache) start() error {
	if c.once {
		return nil
	}
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return fmt.Errorf("charm cache: %w", err)
	}
	names, err := os.ReadDir(c.dir)
	if err != nil {
		return fmt.Errorf("charm cache: %w", err)
	}
	for _, n := range names {
		if strings.HasPrefix(n.Name(), cacheTemp) {
			_ = os.RemoveAll(filepath.Join(c.dir, n.Name()))
		}
	}
	c.once = true
	c.prune("")
	return nil
}

// unpack puts a fresh copy of the archive, already checked (archiveTree),
// in the Cache as key, replacing any there.
func (c *Cache) unpack(data []byte, key string) error {
	tmp, err := os.MkdirTemp(c.dir, cacheTemp)
	if err != nil {
		return fmt.Errorf("charm cache: %w", err)
	}
	if err := extractChecked(data, tmp); err != nil {
		os.RemoveAll(tmp)
		return err
	}
	err = filepath.WalkDir(tmp, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		mode := os.FileMode(0o444)
		if fi.Mode()&0o111 != 0 {
			mode = 0o555
		}
		if err := os.Chmod(p, mode); err != nil {
			return err
		}
		return os.Chtimes(p, cacheTime, cacheTime)
	})
	if err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("charm cache: %w", err)
	}
	dst := filepath.Join(c.dir, key)
	if _, err := os.Lstat(dst); err == nil {
		// A copy found changed: set aside for the units still linked to
		// it, and removed once none is.
		old, err := os.MkdirTemp(c.dir, key+"-changed-")
		if err == nil {
			err = os.Rename(dst, filepath.Join(old, "charm"))
		}
		if err != nil {
			os.RemoveAll(tmp)
			return fmt.Errorf("charm cache: %w", err)
		}
	}
	if err := os.Rename(tmp, dst); err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("charm cache: %w", err)
	}
	return nil
}

// prune removes the copies, but keep's, that no unit links to: none of
// their files has a second link.
func (c *Cache) prune(keep string) {
	names, err := os.ReadDir(c.dir)
	if err != nil {
		return
	}
	for _, n := range names {
		if n.Name() == keep || strings.HasPrefix(n.Name(), cacheTemp) {
			continue
		}
		p := filepath.Join(c.dir, n.Name())
		if !linked(p) {
			gone := filepath.Join(c.dir, cacheTemp+n.Name())
			if os.Rename(p, gone) == nil {
				os.RemoveAll(gone)
			}
		}
	}
}

// linked reports whether any regular file under dir has another link.
func linked(dir string) bool {
	found := errors.New("linked")
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Nlink > 1 {
			return found
		}
		return nil
	})
	// A copy that cannot be read whole counts as in use: it stays.
	return err != nil
}

// cachedIntact reports whether src holds the tree t as Deploy left it.
func cachedIntact(src string, t *tree) bool {
	for _, e := range t.entries {
		fi, err := os.Lstat(filepath.Join(src, filepath.FromSlash(e.name)))
		if err != nil {
			return false
		}
		switch e.kind {
		case kindDir:
			if !fi.IsDir() {
				return false
			}
		case kindSymlink:
			if fi.Mode()&fs.ModeSymlink == 0 {
				return false
			}
			if to, err := os.Readlink(filepath.Join(src, filepath.FromSlash(e.name))); err != nil || to != e.link {
				return false
			}
		case kindFile:
			want := os.FileMode(0o444)
			if e.exec {
				want = 0o555
			}
			if !fi.Mode().IsRegular() || fi.Mode().Perm() != want || fi.Size() != e.size || !fi.ModTime().Equal(cacheTime) {
				return false
			}
		}
	}
	return true
}

// emptyDir creates dir if absent and makes sure it is empty; what names
// the work in errors.
func emptyDir(dir, what string) error {
	err := os.Mkdir(dir, 0o755)
	if err == nil {
		return nil // new, so empty
	}
	if !errors.Is(err, fs.ErrExist) {
		// Its parent may be missing.
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	names, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if len(names) > 0 {
		return fmt.Errorf("%s: %s is not empty", what, dir)
	}
	return nil
}
