package e2e

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/pki"
	"github.com/lifelinehq/lifeline/internal/testing/e2etest"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
	"github.com/lifelinehq/lifeline/internal/testing/syncbuf"
)

// TestManualMachineJoins brings hosts the manual way: ctl add-machine
// --manual prints a join token and a command; the agent started with the
// token in a file joins, runs a unit placed on its machine, and stops once
// its machine is destroyed; a later start needs only its data directory.
// The token joins once: a second host with it is refused, as is an expired
// token. A second agent for the joined machine (its credential copied to
// another data directory) is refused while the first runs, and runs
// nothing; the first, stopped or killed, starts again at once. A token on
// stdin joins too; one on the command line is refused.
func TestManualMachineJoins(t *testing.T) {
	t.Parallel()
	needCharms(t)
	s := newSandbox(t)
	s.OK(t, "bootstrap", "--data-dir", s.DataDir, "--api-port", strconv.Itoa(s.Port), "--provider", "manual")
	id, token, addr := addManual(t, s)
	tokenFile := filepath.Join(s.Dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	host := filepath.Join(s.Dir, "host")
	agent := startAgent(t, s, host, "", "--join-file", tokenFile, "--controller", addr)
	s.WaitStatus(t, "the manual machine's agent to connect", time.Minute, func(d *e2etest.StatusDoc) bool {
		return d.Machines[id].Agent == "started"
	})

	// The token again, on another host: refused, joining nothing.
	refused(t, s, filepath.Join(s.Dir, "host2"), "", 1, "the join token of machine "+id+" is not valid: used already", "--join-file", tokenFile, "--controller", addr)
	if _, err := os.Stat(filepath.Join(s.Dir, "host2", "agent.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused host has an agent config (%v)", err)
	}

	s.OK(t, "deploy", charmPath(t, "kv"), "--to", id)
	s.OK(t, "wait", "--timeout", "2m")
	if u, _ := s.Status(t).Unit("kv/0"); u.State != "running" || u.Machine != id {
		t.Fatalf("kv/0 = %+v, want running on manual machine %s", u, id)
	}

	// A second agent of the machine, its credential copied: refused
	// while the first runs, having run nothing.
	copied := filepath.Join(s.Dir, "copy")
	if err := os.MkdirAll(copied, 0o700); err != nil {
		t.Fatal(err)
	}
	cfg, err := os.ReadFile(filepath.Join(host, "agent.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(copied, "agent.json"), cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	refused(t, s, copied, "", 1, "another agent of machine "+id+" is present", "--address", s.Network+".9.2")
	if _, err := os.Stat(filepath.Join(copied, "units", "kv-0")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused agent ran kv/0 (%v)", err)
	}
	if d := s.Status(t); d.Machines[id].Agent != "started" {
		t.Errorf("machine %s's agent is %s after a second one was refused, want started", id, d.Machines[id].Agent)
	}

	// Restarted, it needs only its data directory: the credential stayed.
	_ = syscall.Kill(-agent.cmd.Process.Pid, syscall.SIGTERM)
	agent.wait(t)
	s.WaitStatus(t, "the agent to be gone", time.Minute, func(d *e2etest.StatusDoc) bool { return d.Machines[id].Agent == "lost" })
	agent = startAgent(t, s, host, "")
	s.WaitStatus(t, "the agent to be back", time.Minute, func(d *e2etest.StatusDoc) bool { return d.Machines[id].Agent == "started" })
	// Killed and started again at once, it takes its machine back from
	// its previous run, whose presence the controller may still hold.
	_ = agent.cmd.Process.Signal(syscall.SIGKILL)
	agent.wait(t)
	agent = startAgent(t, s, host, "")
	s.WaitStatus(t, "the agent to be back after a kill", time.Minute, func(d *e2etest.StatusDoc) bool { return d.Machines[id].Agent == "started" })
	if strings.Contains(agent.logs.String(), "another agent") {
		t.Errorf("the agent started again after a kill was fenced out by its previous run:\n%s", agent.logs)
	}

	// A token on stdin joins; a token expired, or on the command line,
	// does not.
	id2, token2, _ := addManual(t, s)
	startAgent(t, s, filepath.Join(s.Dir, "host3"), token2+"\n", "--join-file", "-", "--controller", addr, "--address", s.Network+".9.3")
	s.WaitStatus(t, "the agent joined with its token on stdin", time.Minute, func(d *e2etest.StatusDoc) bool {
		return d.Machines[id2].Agent == "started"
	})
	out := s.OK(t, "add-machine", "--manual", "--expires", "1s")
	token3 := regexp.MustCompile(`(?m)^  (lifeline-join-\S+)$`).FindStringSubmatch(out)
	if token3 == nil {
		t.Fatalf("ctl add-machine --manual said:\n%s\nwant a join token", out)
	}
	if tok, err := pki.DecodeJoinToken(token3[1]); err != nil {
		t.Fatal(err)
	} else {
		for time.Now().Before(tok.Expires.Add(100 * time.Millisecond)) {
			time.Sleep(50 * time.Millisecond)
		}
	}
	refused(t, s, filepath.Join(s.Dir, "host4"), token3[1], 1, "expired at", "--join-file", "-", "--controller", addr)
	refused(t, s, filepath.Join(s.Dir, "host5"), "", 2, "give it in a file, or on stdin", "--join", token2, "--controller", addr)

	s.OK(t, "destroy-unit", "kv/0")
	s.OK(t, "destroy-machine", id)
	if err := agent.wait(t); err != nil {
		t.Errorf("the manual machine's agent exited with %v, want 0 once its machine is dead", err)
	}
	s.WaitStatus(t, "the machine to be removed", time.Minute, func(d *e2etest.StatusDoc) bool {
		_, ok := d.Machines[id]
		return !ok
	})
	if data, _ := os.ReadFile(filepath.Join(s.Dir, "host.log")); !strings.Contains(string(data), "joined") {
		t.Errorf("the agent's log does not say it joined:\n%s", data)
	}
}

// addManual adds a manual machine and returns its id, its join token and
// the controller address ctl printed.
func addManual(t *testing.T, s *e2etest.Sandbox) (id, token, addr string) {
	t.Helper()
	out := s.OK(t, "add-machine", "--manual")
	m := regexp.MustCompile(`join token for machine (\d+) \(joins one host, once, until \S+\):\n  (\S+)\n.*\n  lifelined machine-agent --join-file FILE --controller (\S+) `).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("add-machine --manual printed no join token and command:\n%s", out)
	}
	return m[1], m[2], m[3]
}

// agentProc is a machine agent the test started. A goroutine reaps it;
// the sandbox's stop kills what is left of it and waits for that.
type agentProc struct {
	cmd  *exec.Cmd
	logs *syncbuf.Buffer
	done chan struct{} // closed once it has exited and been reaped
	err  error         // its exit, once done is closed
}

// startAgent starts a machine agent with data directory dir (its log in
// dir's name with .log) and stdin, stopped with the sandbox.
func startAgent(t *testing.T, s *e2etest.Sandbox, dir, stdin string, args ...string) *agentProc {
	t.Helper()
	cmd, logs := agentCommand(t, s, dir, stdin, args...)
	if err := s.Start(cmd); err != nil {
		t.Fatal(err)
	}
	a := &agentProc{cmd: cmd, logs: logs, done: make(chan struct{})}
	go func() { a.err = cmd.Wait(); close(a.done) }()
	s.OnStop(func() {
		select {
		case <-a.done:
		default:
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-a.done
		}
	})
	return a
}

// wait waits until the agent has exited, failing the test if it still
// runs after poll's bound, and returns how it exited.
func (a *agentProc) wait(t *testing.T) error {
	t.Helper()
	poll.Until(t, fmt.Sprintf("machine-agent %v to exit", a.cmd.Args[1:]), func() bool {
		select {
		case <-a.done:
			return true
		default:
			return false
		}
	})
	return a.err
}

// refused runs a machine agent that must exit with code, saying msg.
func refused(t *testing.T, s *e2etest.Sandbox, dir, stdin string, code int, msg string, args ...string) {
	t.Helper()
	a := startAgent(t, s, dir, stdin, args...)
	err := a.wait(t)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != code || !strings.Contains(a.logs.String(), msg) {
		t.Errorf("machine-agent %v = %v:\n%s\nwant exit status %d saying %q", args, err, a.logs, code, msg)
	}
}

// agentCommand is a machine agent's command with data directory dir and
// stdin, at an address of the sandbox's loopback network (a unit's server
// binds its machine's address, which no other sandbox's machine has).
func agentCommand(t *testing.T, s *e2etest.Sandbox, dir, stdin string, args ...string) (*exec.Cmd, *syncbuf.Buffer) {
	t.Helper()
	logf, err := os.OpenFile(dir+".log", os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncbuf.Buffer{}
	cmd := exec.Command(s.Bin.Lifelined, append([]string{"machine-agent", "--data-dir", dir, "--address", s.Network + ".9.1"}, args...)...)
	w := io.MultiWriter(logf, logs)
	cmd.Stdout, cmd.Stderr = w, w
	cmd.Stdin = strings.NewReader(stdin)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	t.Cleanup(func() { logf.Close() })
	return cmd, logs
}
