package provider

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/lifelinehq/lifeline/internal/hostexec"
	"github.com/lifelinehq/lifeline/internal/pki"
	"github.com/lifelinehq/lifeline/internal/procfs"
)

// Local is the local provider: each machine is a machine agent process on
// this host, in its own session, with its own data directory under Dir and
// its own loopback address (127.1.X.Y, or another Network), so that units
// on different machines can bind the same port. Instances outlive the controller; a
// restarted controller finds them again by their pid files.
type Local struct {
	// Dir holds a directory per machine.
	Dir string
	// Lifelined is the binary to run as the machine agent.
	Lifelined string
	Logger    hclog.Logger
	// Args are extra arguments for every machine agent (its log level).
	Args []string
	// Network is the first half of the machines' loopback addresses,
	// 127.N (DefaultLocalNetwork when empty): two controllers on one
	// host whose machines have different networks can run units that
	// bind the same port (ClaimLocalNetwork).
	Network string
}

const localPrefix = "local:"

// DefaultLocalNetwork is the local provider's network unless told
// otherwise: machine 0 is 127.1.0.1.
const DefaultLocalNetwork = "127.1"

// localNetworkFile, in the machines' directory, records their network.
const localNetworkFile = "network"

// LocalAddress is machine id's loopback address in network (127.N; the
// default when empty): 250 machines to each third part, from .1.
func LocalAddress(network, id string) string {
	if network == "" {
		network = DefaultLocalNetwork
	}
	n, _ := strconv.Atoi(id)
	return fmt.Sprintf("%s.%d.%d", network, n/250, n%250+1)
}

// CheckLocalNetwork says whether network is one the local provider can
// use: 127.N, N from 1 to 254 (127.0 holds 127.0.0.1, which other
// programs use).
func CheckLocalNetwork(network string) error {
	rest, ok := strings.CutPrefix(network, "127.")
	n, err := strconv.Atoi(rest)
	if !ok || err != nil || n < 1 || n > 254 || strconv.Itoa(n) != rest {
		return fmt.Errorf("local network %q: want 127.N with N from 1 to 254, such as %s", network, DefaultLocalNetwork)
	}
	return nil
}

// ClaimLocalNetwork returns the network of the local machines under dir:
// the one its network file records, or, when there is none yet, want
// (DefaultLocalNetwork when empty), which it records. Machines made
// before the file existed have the default network, which is recorded
// for them. A want that differs from the machines' network is refused:
// they have their addresses, and the agents running there keep them.
func ClaimLocalNetwork(dir, want string) (string, error) {
	if want != "" {
		if err := CheckLocalNetwork(want); err != nil {
			return "", err
		}
	}
	path := filepath.Join(dir, localNetworkFile)
	data, err := os.ReadFile(path)
	switch {
	case err == nil:
		have := strings.TrimSpace(string(data))
		if err := CheckLocalNetwork(have); err != nil {
			return "", fmt.Errorf("%s: %w", path, err)
		}
		if want != "" && want != have {
			return "", fmt.Errorf("the local machines in %s have network %s (as %s records): give that, or another machines directory, not %s", dir, have, path, want)
		}
		return have, nil
	case !errors.Is(err, os.ErrNotExist):
		return "", err
	}
	have := want
	if have == "" {
		have = DefaultLocalNetwork
	}
	if have != DefaultLocalNetwork && hasMachines(dir) {
		return "", fmt.Errorf("the local machines in %s were made with network %s: give that, or another machines directory, not %s", dir, DefaultLocalNetwork, want)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	if err := pki.WriteFileAtomic(path, []byte(have+"\n"), 0o600); err != nil {
		return "", err
	}
	return have, nil
}

// hasMachines says whether dir holds a machine's directory.
func hasMachines(dir string) bool {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.IsDir() {
			return true
		}
	}
	return false
}

func (l *Local) machineDir(id string) string { return filepath.Join(l.Dir, id) }

// Start runs machine spec.ID's agent in a new session, detached, logging
// to agent.log in its directory (rotated by size, as --log-file does);
// what it writes before its logger starts, or a crash's trace, goes to
// agent.out beside it.
func (l *Local) Start(ctx context.Context, spec MachineSpec) (Instance, error) {
	dir := l.machineDir(spec.ID)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Instance{}, err
	}
	cfgPath := filepath.Join(dir, "agent.json")
	if err := pki.WriteClientConfig(cfgPath, spec.Agent); err != nil {
		return Instance{}, err
	}
	logf, err := os.OpenFile(filepath.Join(dir, "agent.out"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return Instance{}, err
	}
	defer logf.Close()
	// A machine has one agent: one left from before (a controller that
	// died while starting it) goes first, with its session.
	if sid := l.session(spec.ID); sid > 0 {
		killSession(sid, 10*time.Second)
	}
	if pid := l.findAgent(spec.ID); pid > 0 {
		killSession(pid, 10*time.Second)
	}
	addr := LocalAddress(l.Network, spec.ID)
	// l.Args come last: a --log-file of the operator's wins.
	args := append([]string{"machine-agent", "--data-dir", dir, "--agent-config", cfgPath, "--address", addr,
		"--log-file", filepath.Join(dir, "agent.log")}, l.Args...)
	cmd := exec.Command(l.Lifelined, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return Instance{}, fmt.Errorf("start machine agent: %w", err)
	}
	pid := cmd.Process.Pid
	go cmd.Wait() // reap it when it ends, while this controller lives
	// Written whole or not at all: a controller dying now must not leave
	// an empty pid file behind.
	tmp := filepath.Join(dir, "pid.tmp")
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(pid)+"\n"), 0o600); err != nil {
		return Instance{}, err
	}
	if err := os.Rename(tmp, filepath.Join(dir, "pid")); err != nil {
		return Instance{}, err
	}
	return Instance{ID: localPrefix + spec.ID, MachineID: spec.ID, Address: addr}, nil
}

// Instances lists the machines' directories, and whether their agents run
// (by their pid files).
func (l *Local) Instances(ctx context.Context) ([]Instance, error) {
	entries, err := os.ReadDir(l.Dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Instance
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		if _, err := os.Stat(filepath.Join(l.machineDir(e.Name()), "agent.json")); err != nil {
			continue
		}
		out = append(out, Instance{ID: localPrefix + e.Name(), MachineID: e.Name(), Address: LocalAddress(l.Network, e.Name()), Running: l.pid(e.Name()) > 0})
	}
	return out, nil
}

// pid returns the pid of machine id's running agent, or 0: the one its pid
// file names, or, when that is missing or stale, one found by its command
// line.
func (l *Local) pid(id string) int {
	data, err := os.ReadFile(filepath.Join(l.machineDir(id), "pid"))
	if err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil && pid > 0 && l.isAgent(pid, id) {
			return pid
		}
	}
	return l.findAgent(id)
}

// isAgent says whether process pid is machine id's agent.
func (l *Local) isAgent(pid int, id string) bool {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && bytes.Contains(cmdline, []byte("machine-agent\x00")) &&
		bytes.Contains(cmdline, []byte("\x00"+l.machineDir(id)+"\x00"))
}

// findAgent looks for machine id's agent among all processes.
func (l *Local) findAgent(id string) int {
	for _, pid := range procfs.PIDs() {
		if l.isAgent(pid, id) {
			return pid
		}
	}
	return 0
}

// session returns the session of machine id's agent, as its pid file
// says (the agent leads its session): the agent's pid while it runs, and
// also once it has died, for the daemons its units started may live on in
// the session. It returns 0 when there is no pid file, or when the pid now
// belongs to another process: then the machine's session is over, since
// Linux does not give out a pid while a session of that number has a
// member.
func (l *Local) session(id string) int {
	data, err := os.ReadFile(filepath.Join(l.machineDir(id), "pid"))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return 0
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil && !l.isAgent(pid, id) {
		return 0 // reused
	}
	return pid
}

// Stop ends every process of the machine's session (its agent, hooks, and
// the processes its units' hooks left behind, even when the agent itself
// is gone) and its units' daemons, each in a session of its own, then
// removes its directory.
func (l *Local) Stop(ctx context.Context, instanceID string) error {
	id, ok := strings.CutPrefix(instanceID, localPrefix)
	if !ok {
		return fmt.Errorf("not a local instance: %q", instanceID)
	}
	if sid := l.session(id); sid > 0 {
		killSession(sid, 10*time.Second)
	}
	if pid := l.findAgent(id); pid > 0 {
		killSession(pid, 10*time.Second)
	}
	for _, sid := range l.daemonSessions(id) {
		killSession(sid, 10*time.Second)
	}
	return os.RemoveAll(l.machineDir(id))
}

// daemonSessions lists the sessions of machine id's units' daemons: the
// agent's supervisor starts each in a session of its own, which it leads,
// in its unit's directory under the machine's, with hostexec.MarkEnv in
// its environment. They outlive the agent on purpose (it adopts them as
// it starts again), so the agent's session alone is not the machine.
func (l *Local) daemonSessions(id string) []int {
	prefix := l.machineDir(id) + "/"
	mark := []byte(hostexec.MarkEnv + "=")
	var out []int
	for _, pid := range procfs.PIDs() {
		dir := "/proc/" + strconv.Itoa(pid)
		cwd, err := os.Readlink(dir + "/cwd")
		if err != nil || !strings.HasPrefix(cwd, prefix) {
			continue
		}
		env, err := os.ReadFile(dir + "/environ")
		if err != nil || !(bytes.HasPrefix(env, mark) || bytes.Contains(env, append([]byte{0}, mark...))) {
			continue
		}
		// A live leader of its own session (one read of its stat, not a
		// scan of the session).
		if st, ok, err := procfs.ReadStat(pid); err == nil && ok && !st.Gone() && st.Session == pid {
			out = append(out, pid)
		}
	}
	return out
}

// killSession sends SIGTERM to every process of session sid, then SIGKILL
// to those left after grace.
func killSession(sid int, grace time.Duration) {
	signal := func(sig syscall.Signal) int {
		n := 0
		for _, pid := range procfs.SessionPIDs(sid) {
			if syscall.Kill(pid, sig) == nil {
				n++
			}
		}
		return n
	}
	if signal(syscall.SIGTERM) == 0 {
		return
	}
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if len(procfs.SessionPIDs(sid)) == 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	signal(syscall.SIGKILL)
}

// Manual is the manual provider: it starts nothing; hosts join with a
// token (ctl add-machine --manual) and the provisioner only removes dead
// machines.
type Manual struct{}

func (Manual) Start(context.Context, MachineSpec) (Instance, error) { return Instance{}, ErrManual }
func (Manual) Stop(context.Context, string) error                   { return nil }
func (Manual) Instances(context.Context) ([]Instance, error)        { return nil, nil }

// StopAll stops every machine agent under Dir and everything on its
// machine, as when the whole controller is torn down. It returns how many
// it stopped.
func (l *Local) StopAll() int {
	entries, err := os.ReadDir(l.Dir)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		sids := append([]int{l.session(e.Name()), l.findAgent(e.Name())}, l.daemonSessions(e.Name())...)
		for _, sid := range sids {
			if sid > 0 && len(procfs.SessionPIDs(sid)) > 0 {
				killSession(sid, 10*time.Second)
				n++
			}
		}
	}
	return n
}
