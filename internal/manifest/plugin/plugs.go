package plugin

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"syscall"
)

// MaxPlugEntries bounds how many files and directories of a read-only plug
// are compared before and after a run; past it, the rest go unchecked.
const MaxPlugEntries = 10000

// givenPlug is a plug handed to a run.
type givenPlug struct {
	name     string
	path     string // absolute, as handed over
	real     string // path with symbolic links resolved: what is compared
	writable bool   // declared writable by the plugin and given writable
}

// plugs matches the Program's plugs against those the plugin declared:
// every required one given, none given that is not declared, none declared
// writable given read-only, every path there. A plug is handed over
// writable only when both sides say so.
func (p *Program) plugs(r *InitResponse) ([]givenPlug, error) {
	for _, name := range sortedKeys(p.Plugs) {
		if _, ok := r.Plugs[name]; !ok {
			return nil, fmt.Errorf("%w: plug %q is given but the plugin does not declare it (it declares %s)", ErrPlug, name, plugList(r.Plugs))
		}
	}
	var out []givenPlug
	for _, name := range sortedKeys(r.Plugs) {
		spec := r.Plugs[name]
		given, ok := p.Plugs[name]
		switch {
		case !ok && spec.Optional:
			continue
		case !ok:
			return nil, fmt.Errorf("%w: plug %q is required by the plugin and not given", ErrPlug, name)
		case spec.Writable && !given.Writable:
			return nil, fmt.Errorf("%w: plug %q is declared writable by the plugin and given read-only", ErrPlug, name)
		}
		abs, err := filepath.Abs(given.Path)
		if err != nil || given.Path == "" {
			return nil, fmt.Errorf("%w: plug %q: no usable path %q", ErrPlug, name, given.Path)
		}
		real, err := filepath.EvalSymlinks(abs)
		if err != nil {
			return nil, fmt.Errorf("%w: plug %q: %v", ErrPlug, name, err)
		}
		out = append(out, givenPlug{name: name, path: abs, real: real, writable: spec.Writable && given.Writable})
	}
	return out, nil
}

func plugList(specs map[string]PlugSpec) string {
	if len(specs) == 0 {
		return "none"
	}
	return fmt.Sprint(sortedKeys(specs))
}

// fingerprints digests each read-only plug: the name, size, mode, inode,
// modification and change times of everything under it (symbolic links
// not followed, but for the plug's own path), up to MaxPlugEntries
// entries.
func fingerprints(plugs []givenPlug) map[string][32]byte {
	out := map[string][32]byte{}
	for _, g := range plugs {
		if !g.writable {
			out[g.name] = fingerprint(g.real)
		}
	}
	return out
}

var errEnough = errors.New("enough entries")

func fingerprint(root string) [32]byte {
	h := sha256.New()
	n := 0
	_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			fmt.Fprintf(h, "%s\x00error %v\n", path, err)
			return nil
		}
		if n++; n > MaxPlugEntries {
			return errEnough
		}
		fi, err := d.Info()
		if err != nil {
			fmt.Fprintf(h, "%s\x00gone\n", path)
			return nil
		}
		fmt.Fprintf(h, "%s\x00%d %v %d", path, fi.Size(), fi.Mode(), fi.ModTime().UnixNano())
		// The inode and change time too: a plugin can set a file's
		// modification time back, not its change time.
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			fmt.Fprintf(h, " %d %d.%d", st.Ino, st.Ctim.Sec, st.Ctim.Nsec)
		}
		h.Write([]byte{'\n'})
		return nil
	})
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return sum
}

// checkUnchanged refuses a run that changed a plug it was given read-only.
// Without root nothing stops the write; this makes it an error instead of
// a silent change.
func checkUnchanged(plugs []givenPlug, before map[string][32]byte) error {
	for _, g := range plugs {
		if g.writable {
			continue
		}
		if fingerprint(g.real) != before[g.name] {
			return fmt.Errorf("%w: plug %q (%s) was given read-only and the plugin changed it", ErrPlug, g.name, g.path)
		}
	}
	return nil
}
