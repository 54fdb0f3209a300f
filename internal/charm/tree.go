package charm

import (
	"io/fs"
	"path"
	"sort"
	"strings"
)

// Bounds on a charm's file tree, on disk and in an archive.
const (
	// maxEntries bounds the files, directories and symlinks of a charm.
	maxEntries = 100_000
	// maxLinkDepth bounds the symlinks followed to resolve one path, as
	// Linux's MAXSYMLINKS does.
	maxLinkDepth = 40
	// maxNameLength bounds an entry's path and a symlink's target.
	maxNameLength = 1024
	// maxLinkWork bounds the bytes of path built while resolving symlinks,
	// against trees made to be slow to check.
	maxLinkWork = 256 << 20
)

type kind uint8

const (
	kindDir kind = iota + 1
	kindFile
	kindSymlink
)

// entry is one file, directory or symlink of a charm.
type entry struct {
	name     string // slash-separated, relative to the charm root, clean
	kind     kind
	implicit bool   // a directory only implied by the entries below it
	exec     bool   // a file with any execute bit
	size     int64  // a file's size
	link     string // a symlink's target
}

// tree is a charm's file tree without the files' contents: enough to check
// that its symlinks stay inside it, to find its hooks and to resolve
// metadata.yaml, whether the charm is a directory or an archive.
//
// Every ancestor of an entry is a directory (an entry or implied), so a path
// named by an entry never passes through a symlink.
type tree struct {
	entries map[string]*entry
	links   map[string]string // memo: symlink name → the in-tree path it resolves to
	work    int               // bytes of path built resolving symlinks so far
}

func newTree() *tree {
	return &tree{entries: map[string]*entry{}, links: map[string]string{}}
}

// validName reports whether name can name an entry: a relative
// slash-separated path without ".", ".." or empty elements, or backslashes.
func validName(name string) bool {
	return name != "." && len(name) <= maxNameLength && fs.ValidPath(name) && !strings.ContainsRune(name, '\\')
}

// add adds e, implying its missing ancestors as directories.
func (t *tree) add(e *entry) error {
	if !validName(e.name) {
		return invalidf("%q is not a valid path inside a charm", e.name)
	}
	if len(t.entries) >= maxEntries {
		return invalidf("more than %d files and directories", maxEntries)
	}
	if e.kind == kindSymlink && (e.link == "" || len(e.link) > maxNameLength) {
		return invalidf("symlink %q has an empty or overlong target", e.name)
	}
	// The ancestors of an existing directory were checked when it was added.
	for dir := path.Dir(e.name); dir != "."; dir = path.Dir(dir) {
		parent := t.entries[dir]
		if parent == nil {
			t.entries[dir] = &entry{name: dir, kind: kindDir, implicit: true}
			continue
		}
		if parent.kind != kindDir {
			return invalidf("%q is inside %q, which is not a directory", e.name, dir)
		}
		break
	}
	if old := t.entries[e.name]; old != nil {
		if !old.implicit || e.kind != kindDir {
			return invalidf("%q appears twice", e.name)
		}
	}
	t.entries[e.name] = e
	return nil
}

// sorted returns the entries sorted by name, implied directories included.
func (t *tree) sorted() []*entry {
	es := make([]*entry, 0, len(t.entries))
	for _, e := range t.entries {
		es = append(es, e)
	}
	sort.Slice(es, func(i, j int) bool { return es[i].name < es[j].name })
	return es
}

// check makes sure that every symlink resolves inside the tree.
func (t *tree) check() error {
	for _, e := range t.sorted() {
		if e.kind == kindSymlink {
			if _, err := t.target(e, 0); err != nil {
				return err
			}
		}
	}
	return nil
}

// target returns the in-tree path (with no symlinks in it; "" for the root)
// that symlink e resolves to.
func (t *tree) target(e *entry, depth int) (string, error) {
	if p, ok := t.links[e.name]; ok {
		return p, nil
	}
	if depth >= maxLinkDepth {
		return "", invalidf("symlink %q: too many levels of symlinks", e.name)
	}
	if path.IsAbs(e.link) {
		return "", invalidf("symlink %q points outside the charm (to absolute path %q)", e.name, e.link)
	}
	dir := path.Dir(e.name)
	if dir == "." {
		dir = ""
	}
	p, err := t.walk(dir, e.link, depth+1)
	if err != nil {
		return "", invalidf("symlink %q: %v", e.name, err)
	}
	t.links[e.name] = p
	return p, nil
}

// walk follows rel from the in-tree directory dir, resolving symlinks, and
// returns the in-tree path it reaches. It fails when the path leaves the
// tree. Components past a missing entry are taken as they are.
func (t *tree) walk(dir, rel string, depth int) (string, error) {
	cur := dir
	for _, c := range strings.Split(rel, "/") {
		switch c {
		case "", ".":
			continue
		case "..":
			if cur == "" {
				return "", invalidf("points outside the charm")
			}
			cur = parentOf(cur)
			continue
		}
		next := c
		if cur != "" {
			next = cur + "/" + c
		}
		if t.work += len(next); t.work > maxLinkWork {
			return "", invalidf("symlinks too many or too deep to resolve")
		}
		if e := t.entries[next]; e != nil && e.kind == kindSymlink {
			p, err := t.target(e, depth)
			if err != nil {
				return "", err
			}
			next = p
		}
		cur = next
	}
	return cur, nil
}

// parentOf returns the in-tree parent of p ("" for the root).
func parentOf(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[:i]
	}
	return ""
}

// lookup resolves name and returns the entry it reaches, or nil when there
// is none. The root is a directory with name "".
func (t *tree) lookup(name string) (*entry, error) {
	p, err := t.walk("", name, 0)
	if err != nil {
		return nil, invalidf("%s: %v", name, err)
	}
	if p == "" {
		return &entry{kind: kindDir}, nil
	}
	return t.entries[p], nil
}

// regular returns the regular file name resolves to, or nil when there is
// none.
func (t *tree) regular(name string) (*entry, error) {
	e, err := t.lookup(name)
	if err != nil || e == nil {
		return nil, err
	}
	if e.kind != kindFile {
		return nil, invalidf("%s is not a regular file", name)
	}
	return e, nil
}

// hooked reports whether the charm has anything named hooks or actions at
// its top: a charm without either is one no hook or action of which can run.
func (t *tree) hooked() bool { return t.entries["hooks"] != nil || t.entries["actions"] != nil }

// skipped reports whether a deploy of t makes no directory: only one of a
// charm without hooks or actions, and only unless always (DeployHooksFrom).
func (t *tree) skipped(always bool) bool { return !always && !t.hooked() }

// executables returns the names of the executable files (or symlinks to
// them) in the directory dir ("hooks", "actions"), sorted.
func (t *tree) executables(dir string) ([]string, error) {
	d, err := t.lookup(dir)
	if err != nil || d == nil || d.kind != kindDir {
		return nil, err
	}
	var names []string
	for _, e := range t.entries {
		if parentOf(e.name) != d.name || e.name == d.name {
			continue
		}
		f := e
		if e.kind == kindSymlink {
			p, err := t.target(e, 0)
			if err != nil {
				return nil, err
			}
			f = t.entries[p]
		}
		if f != nil && f.kind == kindFile && f.exec {
			names = append(names, path.Base(e.name))
		}
	}
	sort.Strings(names)
	return names, nil
}
