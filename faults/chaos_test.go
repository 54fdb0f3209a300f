package faults

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/lifelinehq/lifeline/internal/procfs"
	"github.com/lifelinehq/lifeline/internal/testing/e2etest"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// agentChaos kills a random machine agent with SIGKILL every so often and,
// as systemd would with KillMode=control-group and Restart=always, kills
// what was left of its session (its hooks), waits, and starts it again
// with the same command line, environment and working directory.
type agentChaos struct {
	machinesDir string
	// start starts a restarted agent's process so that it dies with the
	// test binary (the sandbox's Start).
	start func(*exec.Cmd) error
	// reaped waits for the restarted agents' processes, each of which a
	// goroutine reaps when it ends (the provisioner, a kill, or the
	// sandbox's teardown stops it); the sandbox waits for them as it
	// stops (waitAgents).
	reaped sync.WaitGroup
	r      *run
	sz     sizes
	obs    *observer

	cancel  context.CancelFunc
	done    chan struct{}
	pending sync.WaitGroup // restarts to come
	pauses  chan pauseReq

	mu        sync.Mutex
	restarted []*os.Process   // the agents' processes started here
	down      map[string]bool // machines whose agent is down
	crashed   map[string]bool // machines whose agent went on its own
	suspect   map[string]bool // machines seen without an agent at the last look
	errs      []string
	kills     int
}

// startAgentChaos starts killing the agents of the local machines under
// machinesDir, which sandbox s runs; the agents it starts again are s's
// children, waited for as s stops.
func startAgentChaos(s *e2etest.Sandbox, machinesDir string, r *run, sz sizes, obs *observer) *agentChaos {
	ctx, cancel := context.WithCancel(context.Background())
	c := &agentChaos{machinesDir: machinesDir, start: s.Start, r: r, sz: sz, obs: obs, cancel: cancel, done: make(chan struct{}), pauses: make(chan pauseReq), down: map[string]bool{}, crashed: map[string]bool{}}
	s.OnStop(c.waitAgents)
	go c.loop(ctx)
	return c
}

// waitAgents kills the agents' processes started here that still run
// (the sandbox has stopped their machines: none should) and waits until
// each is reaped.
func (c *agentChaos) waitAgents() {
	c.mu.Lock()
	procs := c.restarted
	c.mu.Unlock()
	for _, p := range procs {
		_ = p.Kill() // an error once it has been reaped
	}
	c.reaped.Wait()
}

func (c *agentChaos) loop(ctx context.Context) {
	defer close(c.done)
	tick := time.NewTicker(c.sz.chaosEvery)
	defer tick.Stop()
	paused := false
	for {
		select {
		case <-ctx.Done():
			return
		case p := <-c.pauses:
			paused = p.pause
			close(p.done) // no kill is under way
		case <-tick.C:
			if !paused {
				c.killOne()
			}
		}
	}
}

// pauseReq asks the loop to pause or resume.
type pauseReq struct {
	pause bool
	done  chan struct{}
}

func (c *agentChaos) setPaused(pause bool) {
	p := pauseReq{pause: pause, done: make(chan struct{})}
	select {
	case c.pauses <- p:
		<-p.done
	case <-c.done:
	}
}

// pause stops the kills until resume, and waits for the killed agents'
// restarts.
func (c *agentChaos) pause() {
	c.setPaused(true)
	c.pending.Wait()
}

func (c *agentChaos) resume() { c.setPaused(false) }

// stop stops killing, waits for the killed agents' restarts, and fails the
// test on what went wrong.
func (c *agentChaos) stop(t *testing.T) {
	t.Helper()
	c.cancel()
	<-c.done
	c.pending.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.errs {
		t.Error(e)
	}
	t.Logf("agent chaos: %d machine agents killed and restarted", c.kills)
}

func (c *agentChaos) fail(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	msg := fmt.Sprintf(format, args...)
	c.errs = append(c.errs, msg)
	c.r.t.Logf("agent chaos: %s", msg) // at once: the failure shows at stop
}

// killOne picks a machine whose one agent runs, and kills it. On the way
// it notes a machine whose agent is gone without having been killed: a
// crash, or an exit it should not have made while its machine is alive.
func (c *agentChaos) killOne() {
	var candidates []string
	agents := e2etest.MachineAgents(c.machinesDir)
	entries, _ := os.ReadDir(c.machinesDir)
	c.mu.Lock()
	for id, pids := range agents {
		if len(pids) == 1 && !c.down[id] {
			candidates = append(candidates, id)
		}
	}
	var crashed []string
	suspect := map[string]bool{}
	for _, e := range entries {
		id := e.Name()
		if _, err := os.Stat(filepath.Join(c.machinesDir, id, "agent.json")); err != nil || len(agents[id]) > 0 || c.down[id] || c.crashed[id] {
			continue
		}
		if pid := readPIDFile(filepath.Join(c.machinesDir, id, "pid")); pid > 0 && e2etest.PIDAlive(pid) {
			continue
		}
		// Gone twice in a row: not a machine whose agent is starting.
		if c.suspect[id] {
			c.crashed[id] = true
			crashed = append(crashed, id)
		}
		suspect[id] = true
	}
	c.suspect = suspect
	c.mu.Unlock()
	for _, id := range crashed {
		c.fail("machine %s's agent is gone without being killed; the end of its log:\n%s\nand of its output:\n%s", id,
			tail(filepath.Join(c.machinesDir, id, "agent.log"), 30), tail(filepath.Join(c.machinesDir, id, "agent.out"), 30))
	}
	if len(candidates) == 0 {
		return
	}
	sort.Strings(candidates)
	id := candidates[rand.IntN(len(candidates))]
	pid := e2etest.MachineAgents(c.machinesDir)[id]
	if len(pid) != 1 {
		return
	}
	agent := pid[0]
	args, err1 := procStrings(agent, "cmdline")
	env, err2 := procStrings(agent, "environ")
	cwd, err3 := os.Readlink(fmt.Sprintf("/proc/%d/cwd", agent))
	if err1 != nil || err2 != nil || err3 != nil {
		return // it went meanwhile
	}
	if err := syscall.Kill(agent, syscall.SIGKILL); err != nil {
		return
	}
	killed := time.Now()
	c.r.inject("machine agent killed (SIGKILL), restarted as systemd would")
	c.mu.Lock()
	c.down[id] = true
	c.kills++
	c.mu.Unlock()
	c.obs.expectPresence(id, killed)
	// The agent leads its session: what is left there (a hook) goes as
	// systemd stops a unit whose main process died.
	for _, p := range procfs.SessionPIDs(agent) {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	downFor := c.sz.chaosDownMin + rand.N(c.sz.chaosDownMax-c.sz.chaosDownMin+1)
	c.pending.Add(1)
	time.AfterFunc(downFor, func() {
		defer c.pending.Done()
		defer func() {
			c.mu.Lock()
			delete(c.down, id)
			c.mu.Unlock()
		}()
		if err := c.restart(id, args, env, cwd); err != nil {
			c.fail("restart machine %s's agent: %v", id, err)
		}
	})
}

// restart starts machine id's agent again, unless its machine is gone
// (its directory removed by the provisioner), and records its pid as the
// local provider does.
func (c *agentChaos) restart(id string, args, env []string, cwd string) error {
	dir := filepath.Join(c.machinesDir, id)
	if _, err := os.Stat(filepath.Join(dir, "agent.json")); err != nil {
		c.obs.expectPresence(id, time.Time{})
		return nil // the machine was removed meanwhile
	}
	if left := e2etest.MachineAgents(c.machinesDir)[id]; len(left) > 0 {
		return fmt.Errorf("machine %s has agent processes %v while its agent is down", id, left)
	}
	logf, err := os.OpenFile(filepath.Join(dir, "agent.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env, cmd.Dir = env, cwd
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := c.start(cmd); err != nil {
		return err
	}
	c.mu.Lock()
	c.restarted = append(c.restarted, cmd.Process)
	c.mu.Unlock()
	c.reaped.Go(func() { _ = cmd.Wait() })
	c.obs.restarted(id, time.Now())
	tmp := filepath.Join(dir, "pid.tmp")
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, "pid"))
}

// err returns the chaos's failures so far, for a test to stop at once.
func (c *agentChaos) err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.errs) == 0 {
		return nil
	}
	return errors.New(strings.Join(c.errs, "\n"))
}

// readPIDFile reads a pid file; 0 when it cannot.
func readPIDFile(path string) int {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	return pid
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// procStrings reads a NUL-separated file of /proc/pid.
func procStrings(pid int, file string) ([]string, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, file))
	if err != nil {
		return nil, err
	}
	if len(data) == 0 {
		return nil, fmt.Errorf("/proc/%d/%s is empty", pid, file)
	}
	return strings.Split(string(bytes.TrimRight(data, "\x00")), "\x00"), nil
}

// observer follows, through the test's own etcd client, the unit agents'
// statuses (to account for every hook failure) and the agents' presence
// (to time the killed agents' return).
type observer struct {
	r      *run
	cancel context.CancelFunc
	done   sync.WaitGroup

	mu sync.Mutex
	// open are the hook failures not yet followed by the hook's success
	// nor shown as an error, by unit: the failed hook.
	open map[string]string
	// failures counts failures; retried those followed by the hook's
	// success; shown those that put the unit into the error state.
	failures, retried, shown int
	killed                   map[string]time.Time // machine → when its agent was killed
	restartedAt              map[string]time.Time
}

var (
	hookRetryingRE = regexp.MustCompile(`^hook failed: "(.+)" \(retry \d+ of \d+ in .+\)$`)
	hookErrorRE    = regexp.MustCompile(`^hook failed: "(.+)"$`)
	hookRunningRE  = regexp.MustCompile(`^running (.+) hook$`)
)

func startObserver(t *testing.T, st *state.State, r *run) *observer {
	ctx, cancel := context.WithCancel(context.Background())
	o := &observer{r: r, cancel: cancel, open: map[string]string{}, killed: map[string]time.Time{}, restartedAt: map[string]time.Time{}}
	statuses := st.Watch(ctx, state.StatusKey(state.StatusUnitAgent, ""), 0)
	presence := st.Watch(ctx, "presence/", 0)
	o.done.Add(2)
	go func() {
		defer o.done.Done()
		for b := range statuses {
			for _, e := range b.Events {
				if e.Type == state.EventDelete {
					o.removed(strings.TrimPrefix(e.Key, state.StatusKey(state.StatusUnitAgent, "")))
					continue
				}
				var s pb.Status
				if err := proto.Unmarshal(e.Value, &s); err != nil {
					continue
				}
				o.status(strings.TrimPrefix(e.Key, state.StatusKey(state.StatusUnitAgent, "")), &s)
			}
		}
	}()
	go func() {
		defer o.done.Done()
		// A listing again (Reset: the watch fell behind etcd's
		// compaction) holds every presence key, a killed agent's old one
		// too until its lease runs out; of those, only a key written
		// since the watch last saw it is news. A listing ignored whole
		// would miss a restarted agent's presence written meanwhile, and
		// time it by a later write, if any.
		seen := map[string]int64{}
		for b := range presence {
			for _, e := range b.Events {
				if e.Type == state.EventDelete {
					delete(seen, e.Key)
					continue
				}
				if !b.Reset || e.ModRevision > seen[e.Key] {
					o.present(strings.TrimPrefix(e.Key, "presence/machine-"))
				}
				seen[e.Key] = e.ModRevision
			}
		}
	}()
	t.Cleanup(o.stop)
	return o
}

func (o *observer) stop() {
	o.cancel()
	o.done.Wait()
}

// status follows one unit agent status report.
func (o *observer) status(unit string, s *pb.Status) {
	o.mu.Lock()
	defer o.mu.Unlock()
	open, isOpen := o.open[unit]
	var m []string
	switch {
	case s.Status == "error" && hookRetryingRE.MatchString(s.Message):
		// A failure to be retried; also how a hook cut short by a crash
		// shows.
		m = hookRetryingRE.FindStringSubmatch(s.Message)
	case s.Status == "error":
		if m := hookErrorRE.FindStringSubmatch(s.Message); m != nil && isOpen {
			o.shown++
			delete(o.open, unit)
		}
		return
	case s.Status == "executing" && hookRunningRE.MatchString(s.Message):
		if isOpen && hookRunningRE.FindStringSubmatch(s.Message)[1] != open {
			o.retried++ // it moved on to another hook
			delete(o.open, unit)
		}
		return
	case s.Status == "idle" && s.Message == "" || strings.HasPrefix(s.Message, "ran "):
		if isOpen {
			o.retried++
			delete(o.open, unit)
		}
		return
	default:
		return
	}
	if isOpen && open == m[1] {
		// Failed again: still the same failure.
		return
	}
	if isOpen {
		o.retried++ // the earlier one's hook got done
	}
	o.failures++
	o.open[unit] = m[1]
}

// removed follows a unit's removal (its status goes with it): a unit that
// ran its last hooks and died got done what had failed before (nothing
// here forces a unit).
func (o *observer) removed(unit string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.open[unit]; ok {
		o.retried++
		delete(o.open, unit)
	}
}

// expectPresence notes that machine id's agent was killed at when (zero:
// it will not come back).
func (o *observer) expectPresence(id string, when time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if when.IsZero() {
		delete(o.killed, id)
		return
	}
	o.killed[id] = when
}

func (o *observer) restarted(id string, when time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.restartedAt[id] = when
}

// present times a killed agent's return.
func (o *observer) present(id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	killed, ok := o.killed[id]
	if !ok {
		return
	}
	restarted, ok := o.restartedAt[id]
	if !ok || restarted.Before(killed) {
		return // a presence from before the kill, ending
	}
	delete(o.killed, id)
	delete(o.restartedAt, id)
	o.r.sample("machine agent: from its restart to present again", time.Since(restarted))
	o.r.sample("machine agent: from SIGKILL to present again (including its time down)", time.Since(killed))
}

// report records the hook failures' accounting and fails the test on any
// failure neither retried to success nor shown as an error.
func (o *observer) report(t *testing.T, units map[string]bool) {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	o.r.count("hook failures seen", o.failures)
	o.r.count("hook failures retried to success", o.retried)
	o.r.count("hook failures shown as an error state", o.shown)
	t.Logf("hook failures: %d seen, %d retried to success, %d shown as an error state", o.failures, o.retried, o.shown)
	var stuck []string
	for unit, hook := range o.open {
		if units == nil || units[unit] {
			stuck = append(stuck, fmt.Sprintf("%s (%s)", unit, hook))
		}
	}
	sort.Strings(stuck)
	if len(stuck) > 0 {
		t.Errorf("hook failures neither retried to success nor shown as an error: %s", compact(stuck))
	}
}
