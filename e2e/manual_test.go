package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/e2etest"
)

// TestManualMachineJoins brings a host the manual way: ctl add-machine
// --manual prints a join token and a command; the agent started with it
// joins, runs a unit placed on its machine, and stops once its machine is
// destroyed; a later start needs only its data directory.
func TestManualMachineJoins(t *testing.T) {
	needCharms(t)
	s := newSandbox(t)
	s.OK(t, "bootstrap", "--data-dir", s.DataDir, "--api-port", strconv.Itoa(s.Port), "--provider", "manual")
	out := s.OK(t, "add-machine", "--manual")
	m := regexp.MustCompile(`--join (\S+) --controller (\S+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("add-machine --manual printed no join command:\n%s", out)
	}
	id := regexp.MustCompile(`machine (\d+)`).FindStringSubmatch(out)
	if id == nil {
		t.Fatalf("add-machine --manual named no machine:\n%s", out)
	}
	host := filepath.Join(s.Dir, "host")
	start := func(args ...string) *exec.Cmd {
		logf, err := os.OpenFile(filepath.Join(s.Dir, "host.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		defer logf.Close()
		cmd := exec.Command(s.Bin.Lifelined, append([]string{"machine-agent", "--data-dir", host, "--address", "127.1.9.1"}, args...)...)
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		s.OnStop(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
		return cmd
	}
	agent := start("--join", m[1], "--controller", m[2])
	s.WaitStatus(t, "the manual machine's agent to connect", time.Minute, func(d *e2etest.StatusDoc) bool {
		return d.Machines[id[1]].Agent == "started"
	})
	s.OK(t, "deploy", charmPath(t, "kv"), "--to", id[1])
	s.OK(t, "wait", "--timeout", "2m")
	if u, _ := s.Status(t).Unit("kv/0"); u.State != "running" || u.Machine != id[1] {
		t.Fatalf("kv/0 = %+v, want running on manual machine %s", u, id[1])
	}

	// Restarted, it needs only its data directory: the credential stayed.
	_ = syscall.Kill(-agent.Process.Pid, syscall.SIGTERM)
	_ = agent.Wait()
	s.WaitStatus(t, "the agent to be gone", time.Minute, func(d *e2etest.StatusDoc) bool { return d.Machines[id[1]].Agent == "lost" })
	agent = start()
	s.WaitStatus(t, "the agent to be back", time.Minute, func(d *e2etest.StatusDoc) bool { return d.Machines[id[1]].Agent == "started" })

	s.OK(t, "destroy-unit", "kv/0")
	s.OK(t, "destroy-machine", id[1])
	done := make(chan error, 1)
	go func() { done <- agent.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the manual machine's agent exited with %v, want 0 once its machine is dead", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the manual machine's agent did not stop once its machine was destroyed")
	}
	s.WaitStatus(t, "the machine to be removed", time.Minute, func(d *e2etest.StatusDoc) bool { return d.Empty() || len(d.Machines) == 0 })
	if data, _ := os.ReadFile(filepath.Join(s.Dir, "host.log")); !strings.Contains(string(data), "joined") {
		t.Errorf("the agent's log does not say it joined:\n%s", data)
	}
}
