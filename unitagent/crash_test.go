package unitagent_test

import (
	"fmt"
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

	"github.com/lifelinehq/lifeline/internal/pki"
	"github.com/lifelinehq/lifeline/internal/testing/syncbuf"
	"github.com/lifelinehq/lifeline/unitagent"
)

// process is a unit agent in a process of its own (lifelined unit-agent),
// to be killed with SIGKILL.
type process struct {
	cmd *exec.Cmd
	log *syncbuf.Buffer
}

func (w *world) spawn(unit string) *process {
	w.t.Helper()
	dir := w.made(unit)
	cfgPath := filepath.Join(dir, "agent.json")
	if _, err := os.Stat(cfgPath); err != nil {
		cred := w.env.Credential("unit-" + unit)
		if err := pki.WriteClientConfig(cfgPath, pki.ClientConfig{Controllers: []string{w.env.Addr}, CACert: string(w.env.CA.CertPEM()), Tag: cred.Tag, Secret: cred.Secret}); err != nil {
			w.t.Fatal(err)
		}
	}
	cmd := exec.Command(lifelined(w.t), "unit-agent", "--unit", unit, "--data-dir", dir, "--agent-config", cfgPath,
		"--retry-delay", "50ms", "--hook-attempts", "1000", "--log-level", "debug")
	p := &process{cmd: cmd, log: &syncbuf.Buffer{}}
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

// localState reads the unit's local state as the agent would, and returns
// its state machine's state: it must always be a consistent whole.
func (w *world) localState(unit string) string {
	w.t.Helper()
	st, _, err := unitagent.LoadState(w.dir(unit))
	if err != nil {
		w.t.Fatalf("%s's local state is damaged: %v", unit, err)
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
	if st := w.localState("kv/0"); st != "new" {
		t.Fatalf("state after the kill = %v, want new", st)
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
	// Five agents at once: each is killed after its own random delay.
	// Only the kills run off the test's goroutine, so that whatever fails
	// (spawning, a damaged state) fails the test where it can stop it.
	const atOnce = 5
	for first := 0; first < units; first += atOnce {
		var batch []string
		var wg sync.WaitGroup
		for i := first; i < min(first+atOnce, units); i++ {
			unit := "kv/" + strconv.Itoa(i)
			batch = append(batch, unit)
			p := w.spawn(unit)
			delay := time.Duration(rng.IntN(300)) * time.Millisecond
			wg.Go(func() {
				time.Sleep(delay)
				p.kill()
			})
		}
		wg.Wait()
		for _, unit := range batch {
			w.localState(unit) // a consistent whole
			w.spawn(unit)
		}
	}
	for i := 0; i < units; i++ {
		unit := "kv/" + strconv.Itoa(i)
		w.waitState(unit, "running")
		if st := w.localState(unit); st != "running" {
			t.Errorf("%s's local state says %v, want running", unit, st)
		}
	}
}

// TestKilledDuringRelationHooks kills the agent of a unit related to eight
// others with SIGKILL at random moments while it runs their relation hooks
// (its local state's journal growing record by record): each time its
// state loads whole, and in the end it has joined every other unit, each
// joined before changed, and its state holds each with the settings
// version last delivered.
func TestKilledDuringRelationHooks(t *testing.T) {
	const kvs = 8
	w := newWorld(t)
	w.deploy(kvMeta, kvs, "server")
	w.deploy(appMeta, 1, "db")
	rel := relate(t, w, "app", "kv")
	db := fmt.Sprintf("db:%d", rel.Id)
	for i := 0; i < kvs; i++ {
		w.start("kv/" + strconv.Itoa(i))
	}
	// Hooks slow enough for the kills to find them running.
	w.file("app/0", "sleep-db-relation-joined", "0.1")
	w.file("app/0", "sleep-db-relation-changed", "0.1")
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 11))
	p := w.spawn("app/0")
	var procs []*process
	w.waitFor("app/0 to start its relation hooks", func() bool { return index(w.hooks("app/0"), "db-relation-joined") >= 0 })
	for i := 0; i < 8; i++ {
		// Once the restarted agent runs a hook again, kill it a moment
		// later: during the hook, or while it saves before or after one.
		n := len(w.lines("app/0", "attempts.log"))
		deadline := time.Now().Add(10 * time.Second)
		for len(w.lines("app/0", "attempts.log")) == n && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(time.Duration(rng.IntN(150)) * time.Millisecond)
		p.kill()
		w.localState("app/0") // a consistent whole
		procs = append(procs, p)
		p = w.spawn("app/0")
	}
	joinedAll := func() bool {
		got := w.hooks("app/0")
		for i := 0; i < kvs; i++ {
			if index(got, "db-relation-changed "+db+" kv/"+strconv.Itoa(i)) < 0 {
				return false
			}
		}
		return true
	}
	w.waitFor("app/0 to have joined every kv unit", joinedAll)
	w.waitState("app/0", "running")
	got := w.hooks("app/0")
	procs = append(procs, p)
	interrupted := 0
	for _, q := range procs {
		interrupted += strings.Count(q.log.String(), "hook interrupted by a restart")
	}
	t.Logf("%d of the 8 kills interrupted a hook", interrupted)
	for i := 0; i < kvs; i++ {
		u := "kv/" + strconv.Itoa(i)
		if j, c := index(got, "db-relation-joined "+db+" "+u), index(got, "db-relation-changed "+db+" "+u); j < 0 || c < j {
			t.Errorf("app/0 ran changed for %s before joined:\n%s", u, strings.Join(got, "\n"))
		}
	}
	w.waitFor("app/0's state to hold every member's settings version", func() bool {
		_, members, err := unitagent.LoadState(w.dir("app/0"))
		if err != nil {
			t.Fatalf("app/0's local state is damaged: %v", err)
		}
		m := members[rel.Id]
		if len(m) != kvs {
			return false
		}
		for _, v := range m {
			if v <= 0 {
				return false
			}
		}
		return true
	})
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
		return w.localState("kv/0") != "new"
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
