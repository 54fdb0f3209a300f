package hostclaims

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"slices"
)

// TaskKind is what a task does to its resource. The first three make a
// revision's claims hold (a CURRENT job); the last three undo them (a
// REMOVED job).
type TaskKind int

const (
	// Install installs a package (what is missing or at the wrong version).
	Install TaskKind = iota + 1
	// Manage writes a file with its content and mode.
	Manage
	// Run runs a daemon: nothing when it runs with exactly this spec,
	// otherwise stop it and start it.
	Run
	// Uninstall uninstalls a package (when its last claimant on the
	// machine goes).
	Uninstall
	// Remove removes a file the unit wrote.
	Remove
	// Shutdown stops a daemon: SIGTERM, stop-timeout, SIGKILL.
	Shutdown
)

var taskKindNames = [...]string{Install: "install", Manage: "manage", Run: "run", Uninstall: "uninstall", Remove: "remove", Shutdown: "shutdown"}

func (k TaskKind) String() string {
	if k < Install || k > Shutdown {
		return "unknown"
	}
	return taskKindNames[k]
}

// JobKind says which job Job makes of a revision's claims.
type JobKind int

const (
	// Current makes the claims hold: install packages, manage files, run
	// daemons.
	Current JobKind = iota + 1
	// Removed undoes them: shutdown daemons, remove files, uninstall
	// packages.
	Removed
)

// Task is one step of a job: Kind over exactly one of Package, File and
// Daemon.
type Task struct {
	Kind    TaskKind
	Package *Package
	File    *File
	Daemon  *Daemon
}

// ID names the task's resource: "package:nginx", "file:/etc/kv.conf",
// "daemon:server". A resource has one ID whatever the task does to it.
func (t Task) ID() string {
	switch {
	case t.Package != nil:
		return "package:" + t.Package.Name
	case t.File != nil:
		return "file:" + t.File.Path
	case t.Daemon != nil:
		return "daemon:" + t.Daemon.Name
	}
	return ""
}

// String is the task as a job's report lists it: "install package:nginx".
func (t Task) String() string { return t.Kind.String() + " " + t.ID() }

// Digest is the hex sha256 of the resource's spec (not of the task's
// kind): two tasks of a resource with the same digest would leave the host
// the same. A package's spec is its name and version; a file's its path,
// content and mode; a daemon's its name, command, env and stop-timeout.
func (t Task) Digest() string {
	h := sha256.New()
	switch {
	case t.Package != nil:
		writeStrings(h, "package", t.Package.Name, t.Package.Version)
	case t.File != nil:
		writeStrings(h, "file", t.File.Path, string(t.File.Content))
		writeInt(h, int64(t.File.Mode))
	case t.Daemon != nil:
		d := t.Daemon
		writeStrings(h, "daemon", d.Name)
		writeInt(h, int64(len(d.Command)))
		writeStrings(h, d.Command...)
		keys := make([]string, 0, len(d.Env))
		for k := range d.Env {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		writeInt(h, int64(len(keys)))
		for _, k := range keys {
			writeStrings(h, k, d.Env[k])
		}
		writeInt(h, int64(d.StopTimeout))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// writeStrings writes each string with its length first, so that no two
// lists of strings hash alike.
func writeStrings(h hash.Hash, ss ...string) {
	for _, s := range ss {
		writeInt(h, int64(len(s)))
		h.Write([]byte(s))
	}
}

func writeInt(h hash.Hash, n int64) {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(n))
	h.Write(b[:])
}

// Job returns the tasks of one revision's claims in the order they run. A
// CURRENT job installs packages, then manages files, then runs daemons,
// each in declaration order, so that a daemon starts with its packages
// and files in place. A REMOVED job undoes them in reverse: shuts down the
// daemons (the last declared first), removes the files, uninstalls the
// packages. Ports are claims only and have no task. Nil claims give no
// tasks.
func Job(kind JobKind, c *Claims) []Task {
	if c == nil {
		return nil
	}
	tasks := make([]Task, 0, len(c.Packages)+len(c.Files)+len(c.Daemons))
	switch kind {
	case Current:
		for i := range c.Packages {
			tasks = append(tasks, Task{Kind: Install, Package: &c.Packages[i]})
		}
		for i := range c.Files {
			tasks = append(tasks, Task{Kind: Manage, File: &c.Files[i]})
		}
		for i := range c.Daemons {
			tasks = append(tasks, Task{Kind: Run, Daemon: &c.Daemons[i]})
		}
	case Removed:
		for i := len(c.Daemons) - 1; i >= 0; i-- {
			tasks = append(tasks, Task{Kind: Shutdown, Daemon: &c.Daemons[i]})
		}
		for i := len(c.Files) - 1; i >= 0; i-- {
			tasks = append(tasks, Task{Kind: Remove, File: &c.Files[i]})
		}
		for i := len(c.Packages) - 1; i >= 0; i-- {
			tasks = append(tasks, Task{Kind: Uninstall, Package: &c.Packages[i]})
		}
	}
	return tasks
}

// Diff returns the tasks that move a unit from the old claims to the new
// ones (either may be nil: a new unit, a dying one). removed is the
// REMOVED job of old without the resources new still claims: a file new
// writes differently is rewritten in place, not removed first; a daemon
// whose spec changed is restarted by its run task, not shut down first; a
// package at another version is installed over. current is the CURRENT
// job of new without the tasks whose resource is identical in old (same
// ID, same digest): an unchanged daemon is not restarted, an unchanged
// file not rewritten. pruned counts the tasks of the two whole jobs that
// Diff dropped, so that len(removed)+len(current)+pruned is their total.
// The REMOVED tasks run first.
func Diff(old, new *Claims) (removed, current []Task, pruned int) {
	oldJob, newJob := Job(Removed, old), Job(Current, new)
	newDigests := make(map[string]string, len(newJob))
	for _, t := range newJob {
		newDigests[t.ID()] = t.Digest()
	}
	oldDigests := make(map[string]string, len(oldJob))
	for _, t := range oldJob {
		id := t.ID()
		oldDigests[id] = t.Digest()
		if _, kept := newDigests[id]; !kept {
			removed = append(removed, t)
		}
	}
	for _, t := range newJob {
		if d, ok := oldDigests[t.ID()]; ok && d == newDigests[t.ID()] {
			continue
		}
		current = append(current, t)
	}
	pruned = len(oldJob) + len(newJob) - len(removed) - len(current)
	return removed, current, pruned
}
