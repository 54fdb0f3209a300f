package unitagent

import (
	"os"
	"path/filepath"
	"testing"
)

// TestHookLookup: the charm's hooks are looked up in one reading of its
// hooks directory, read again for a charm unpacked anew;
// a charm without a hooks directory has none, and one whose hooks are not
// a directory has every hook, so that running it says what is wrong.
func TestHookLookup(t *testing.T) {
	dir := t.TempDir()
	a := &Agent{cfg: Config{DataDir: dir}}
	hooks := filepath.Join(a.charmDir(), "hooks")
	if a.hasHook("install") {
		t.Error("a charm without a hooks directory has install")
	}
	a.hookNames = nil
	if err := os.MkdirAll(hooks, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(hooks, "install"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if !a.hasHook("install") || a.hasHook("start") {
		t.Errorf("install %v, start %v; want install only", a.hasHook("install"), a.hasHook("start"))
	}
	if err := os.WriteFile(filepath.Join(hooks, "start"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if a.hasHook("start") {
		t.Error("start found before the directory was read again")
	}
	a.hookNames = nil // as after a charm was unpacked
	if !a.hasHook("start") {
		t.Error("start not found once the directory was read again")
	}
	if err := os.RemoveAll(hooks); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(hooks, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	a.hookNames = nil
	if !a.hasHook("stop") {
		t.Error("with hooks a file, stop is missing: want it run, to fail")
	}
}

// TestHookLookupAfterAHookRan: once a hook ran (it may change its charm),
// each hook is looked up on its own: one the charm gained since is found.
func TestHookLookupAfterAHookRan(t *testing.T) {
	a := &Agent{cfg: Config{DataDir: t.TempDir()}}
	hooks := filepath.Join(a.charmDir(), "hooks")
	if err := os.MkdirAll(hooks, 0o755); err != nil {
		t.Fatal(err)
	}
	if a.hasHook("start") {
		t.Fatal("start found in an empty hooks directory")
	}
	a.hookNames, a.hookEach = nil, true // as runHook leaves it
	if err := os.WriteFile(filepath.Join(hooks, "start"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if !a.hasHook("start") || a.hasHook("stop") {
		t.Errorf("after a hook ran: start %v, stop %v; want start only", a.hasHook("start"), a.hasHook("stop"))
	}
}
