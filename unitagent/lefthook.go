package unitagent

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/lifelinehq/lifeline/hooks"
)

// hookGroupFile names the file in the unit's directory that holds the
// process group of the hook the agent runs, while it runs. An agent
// killed outright (SIGKILL, a crash) under systemd's KillMode=process
// leaves its hook running; the next run of the agent ends that group
// before it counts the hook failed and runs it again, so that a hook
// never runs twice at once. Written without fsync: a host that crashed
// left no process to end.
const hookGroupFile = "hook.pgid"

// recordHookGroup notes the process group of the hook just started.
func (a *Agent) recordHookGroup(pgid int) {
	p := filepath.Join(a.cfg.DataDir, hookGroupFile)
	if err := os.WriteFile(p, []byte(strconv.Itoa(pgid)+"\n"), 0o600); err != nil {
		a.logger.Warn("cannot record the hook's process group", "error", err)
	}
}

// forgetHookGroup removes the note once the hook has ended.
func (a *Agent) forgetHookGroup() {
	if err := os.Remove(filepath.Join(a.cfg.DataDir, hookGroupFile)); err != nil && !os.IsNotExist(err) {
		a.logger.Warn("cannot remove the hook's process group note", "error", err)
	}
}

// endLeftHook kills the process group a previous run of the agent noted
// for its hook, if the group's leader still runs and is this unit's hook
// (its environment holds the unit's session mark), and removes the note.
// It reports the group it killed, 0 for none.
func (a *Agent) endLeftHook() int {
	b, err := os.ReadFile(filepath.Join(a.cfg.DataDir, hookGroupFile))
	if err != nil {
		return 0
	}
	defer a.forgetHookGroup()
	pgid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pgid <= 1 {
		return 0
	}
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pgid))
	if err != nil {
		return 0
	}
	mark := []byte(hooks.EnvSession + "=" + a.cfg.DataDir + "\x00")
	if !bytes.HasPrefix(env, mark) && !bytes.Contains(env, append([]byte{0}, mark...)) {
		return 0
	}
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil {
		return 0
	}
	return pgid
}
