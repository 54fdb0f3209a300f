package machineagent

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// The units whose agents check their scopes are those already here when
// the machine has restarted since the agent last looked: none on a new
// machine, none on the same boot, all of them after a restart or when the
// boot's id cannot be read.
func TestUnitsToCheck(t *testing.T) {
	defer func(f string) { bootIDFile = f }(bootIDFile)
	bootIDFile = filepath.Join(t.TempDir(), "boot_id")
	boot := func(id string) {
		if err := os.WriteFile(bootIDFile, []byte(id+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	a := &Agent{cfg: Config{DataDir: dir}}
	if err := os.MkdirAll(filepath.Join(dir, "units"), 0o700); err != nil {
		t.Fatal(err)
	}
	check := func(want string) {
		t.Helper()
		got, err := a.unitsToCheck()
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			got = nil
		}
		if fmt.Sprint(got) != want {
			t.Errorf("units to check: %v, want %s", got, want)
		}
	}
	boot("one")
	check("map[]") // a new machine: nothing to check
	for _, u := range []string{"kv-0", "kv-1"} {
		if err := os.Mkdir(filepath.Join(dir, "units", u), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	check("map[]") // the same boot
	boot("two")
	check("map[kv-0:true kv-1:true]") // restarted
	check("map[]")                    // and recorded
	if !(&Agent{check: map[string]bool{"kv-0": true}}).mustCheck("kv/0") {
		t.Error("kv/0 is not to check")
	}
	if err := os.Remove(bootIDFile); err != nil {
		t.Fatal(err)
	}
	check("map[kv-0:true kv-1:true]") // no boot id: every start counts
}
