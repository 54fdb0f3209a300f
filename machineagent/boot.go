package machineagent

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// A unit agent writes some of its records without syncing them
// (unitagent's stateStore): they survive the agent's crash, not the
// machine's, and what it can do again at no cost is all such a loss
// costs, but for one thing: the record that its unit entered a relation's
// scope, without which it would not leave it when the relation dies. So,
// once the machine has restarted, each unit agent that was here before
// asks the controller which scopes its unit is in before it acts
// (unitagent.Config.CheckScopes). The machine's boot id tells a restart:
// the agent keeps the one it last saw, synced, in its data directory.

// bootIDFile is where the Linux kernel gives the boot's id.
var bootIDFile = "/proc/sys/kernel/random/boot_id"

// bootIDName is the agent's record of the boot id it last saw.
const bootIDName = "boot-id"

// unitsToCheck returns the units whose agents must check their scopes:
// those with a directory here already when the machine has restarted
// since the agent last looked (or the boot id cannot be read), none
// otherwise. It records the boot id first.
func (a *Agent) unitsToCheck() (map[string]bool, error) {
	current, err := os.ReadFile(bootIDFile)
	current = bytes.TrimSpace(current)
	if err != nil || len(current) == 0 {
		current = nil // unknown: every start counts as a restart
	}
	path := filepath.Join(a.cfg.DataDir, bootIDName)
	if seen, err := os.ReadFile(path); err == nil && current != nil && bytes.Equal(bytes.TrimSpace(seen), current) {
		return nil, nil
	}
	if current != nil {
		if err := writeSynced(path, append(current, '\n')); err != nil {
			return nil, fmt.Errorf("machine agent: record the boot id: %w", err)
		}
	}
	entries, err := os.ReadDir(filepath.Join(a.cfg.DataDir, "units"))
	if err != nil {
		return nil, fmt.Errorf("machine agent: %w", err)
	}
	check := map[string]bool{}
	for _, e := range entries {
		if e.IsDir() {
			check[e.Name()] = true
		}
	}
	return check, nil
}

// mustCheck says whether unit's agent checks its scopes (unitsToCheck).
func (a *Agent) mustCheck(unit string) bool {
	return a.check[strings.ReplaceAll(unit, "/", "-")]
}

// writeSynced replaces path with data, durably: a temporary file, synced,
// renamed over it, and the directory synced.
func writeSynced(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
