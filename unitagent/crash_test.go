package unitagent_test

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/pki"
)

// process is a unit agent in a process of its own (lifelined unit-agent),
// to be killed with SIGKILL.
type process struct {
	cmd *exec.Cmd
	log *lockedBuffer
}

// lockedBuffer collects a process's output while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (w *world) spawn(unit string) *process {
	w.t.Helper()
	dir := w.dir(unit)
	cfgPath := filepath.Join(dir, "agent.json")
	if _, err := os.Stat(cfgPath); err != nil {
		cred := w.env.Credential("unit-" + unit)
		if err := pki.WriteClientConfig(cfgPath, pki.ClientConfig{Controllers: []string{w.env.Addr}, CACert: string(w.env.CA.CertPEM()), Tag: cred.Tag, Secret: cred.Secret}); err != nil {
			w.t.Fatal(err)
		}
	}
	cmd := exec.Command(lifelined, "unit-agent", "--unit", unit, "--data-dir", dir, "--agent-config", cfgPath,
		"--retry-delay", "50ms", "--hook-attempts", "1000", "--log-level", "debug")
	p := &process{cmd: cmd, log: &lockedBuffer{}}
	cmd.Stdout, cmd.Stderr = p.log, p.log
	if err := cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { p.kill() })
	return p
}

func (p *process) kill() {
	if p.cmd.ProcessState == nil {
		p.cmd.Process.Signal(syscall.SIGKILL)
		p.cmd.Wait()
	}
}

// localState reads the unit's state file as the agent would: it must always
// be whole.
func (w *world) localState(unit string) map[string]any {
	w.t.Helper()
	data, err := os.ReadFile(filepath.Join(w.dir(unit), "state.json"))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		w.t.Fatal(err)
	}
	var st map[string]any
	if err := json.Unmarshal(data, &st); err != nil {
		w.t.Fatalf("%s's state file is torn: %v\n%s", unit, err, data)
	}
	return st
}

// TestKilledDuringAHookRetriesIt kills the agent with SIGKILL while its
// install hook runs: the restarted agent counts that run as failed and runs
// install again, never as a success.
func TestKilledDuringAHookRetriesIt(t *testing.T) {
	w := newWorld(t)
	w.deploy(kvMeta, 1, "server")
	w.file("kv/0", "sleep-install", "3")
	p := w.spawn("kv/0")
	w.waitFor("install to start", func() bool { return len(w.lines("kv/0", "attempts.log")) > 0 })
	p.kill()
	if st := w.localState("kv/0"); st["state"] != "new" {
		t.Fatalf("state after the kill = %v, want new", st["state"])
	}
	if err := os.Remove(filepath.Join(w.dir("kv/0"), "sleep-install")); err != nil {
		t.Fatal(err)
	}
	p = w.spawn("kv/0")
	w.waitState("kv/0", "running")
	attempts := w.lines("kv/0", "attempts.log")
	if index(attempts, "install") != 0 || strings.Count(strings.Join(attempts, "\n"), "install") != 2 {
		t.Errorf("attempts = %v, want install twice: the killed run and its retry", attempts)
	}
	if !strings.Contains(p.log.String(), "hook interrupted by a restart") {
		t.Errorf("the restarted agent did not say the hook was interrupted:\n%s", p.log.String())
	}
}

// TestKilledAtRandomPoints kills unit agents with SIGKILL at random moments
// of their way to running, 50 times: the state file is never torn, and
// every unit gets to running.
func TestKilledAtRandomPoints(t *testing.T) {
	const units = 50
	w := newWorld(t)
	w.deploy(kvMeta, units, "server")
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	done := make(chan string, units)
	sem := make(chan struct{}, 5)
	for i := 0; i < units; i++ {
		unit := "kv/" + strconv.Itoa(i)
		delay := time.Duration(rng.IntN(300)) * time.Millisecond
		go func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			p := w.spawn(unit)
			time.Sleep(delay)
			p.kill()
			w.localState(unit) // whole, or absent
			w.spawn(unit)
			done <- unit
		}()
	}
	for i := 0; i < units; i++ {
		<-done
	}
	for i := 0; i < units; i++ {
		unit := "kv/" + strconv.Itoa(i)
		w.waitState(unit, "running")
		if st := w.localState(unit); st["state"] != "running" {
			t.Errorf("%s's state file says %v, want running", unit, st["state"])
		}
	}
}

// TestDisconnectedHookCompletes stops the controller while install runs:
// the hook completes, the agent records the transition locally, and the
// controller hears of it when it is back.
func TestDisconnectedHookCompletes(t *testing.T) {
	w := newWorld(t)
	w.deploy(kvMeta, 1, "server")
	w.file("kv/0", "sleep-install", "1")
	w.start("kv/0")
	w.waitFor("install to start", func() bool { return len(w.lines("kv/0", "attempts.log")) > 0 })
	w.env.Stop()
	w.waitFor("install to be recorded locally", func() bool {
		st := w.localState("kv/0")
		return st != nil && st["state"] != "new"
	})
	if got := w.hooks("kv/0"); index(got, "install") != 0 {
		t.Errorf("hooks = %v, want install done while disconnected", got)
	}
	w.env.Start()
	w.waitFor("the controller to hear", func() bool {
		s := w.agentStatus("kv/0")
		return s != nil && s.State != "new"
	})
	w.waitState("kv/0", "running")
}
