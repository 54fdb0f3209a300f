package hostexec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/hashicorp/go-hclog"

	"github.com/lifelinehq/lifeline/internal/procfs"
)

// SupervisorConfig configures a Supervisor.
type SupervisorConfig struct {
	// StateFile records the daemons, their processes and specs, so that
	// a new supervisor (after the agent restarts) adopts those still
	// running and starts the others.
	StateFile string
	// UnitDir is a unit's directory: its daemons run in it and log to
	// daemons/<name>.log under it.
	UnitDir func(unit string) string
	// LogLimit is the size past which a daemon's log is moved to
	// <name>.log.1 (replacing the one before) and started afresh
	// (default 1 MiB).
	LogLimit int64
	// InitialBackoff, MaxBackoff: the delays before a daemon whose
	// process ended is started again, doubling from the first to the
	// second (defaults 1 s and 1 min); ResetAfter: a process that ran
	// this long starts the back-off from the first again (default 10 s).
	InitialBackoff, MaxBackoff, ResetAfter time.Duration
	// PollInterval is how often Run looks for ended processes and due
	// restarts (default 250 ms); it looks at the logs' sizes every second.
	PollInterval time.Duration
	Logger       hclog.Logger
}

// Validate checks the config and fills in its defaults.
func (c *SupervisorConfig) Validate() error {
	if c.StateFile == "" || !filepath.IsAbs(c.StateFile) {
		return fmt.Errorf("supervisor state file %q: not an absolute path", c.StateFile)
	}
	if c.UnitDir == nil {
		return errors.New("supervisor: no UnitDir")
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.InitialBackoff, time.Second)
	def(&c.MaxBackoff, time.Minute)
	def(&c.ResetAfter, 10*time.Second)
	def(&c.PollInterval, 250*time.Millisecond)
	if c.LogLimit <= 0 {
		c.LogLimit = 1 << 20
	}
	return nil
}

// A Supervisor keeps a machine's daemons running: one per machine agent.
// Daemons run as the agent's user.
// Ensure, Stop and StopAll change what runs; Run watches the processes,
// starting again with back-off those that end, until its context ends.
// Daemons outlive it: each runs in a session of its own, logging to a
// file, and a Supervisor made after the agent restarts (even after a
// SIGKILL) adopts those still running (same pid and process start time)
// and starts the others.
type Supervisor struct {
	cfg     SupervisorConfig
	log     hclog.Logger
	mu      sync.Mutex
	daemons map[key]*daemon
	// pendingStops are daemons found still running though stopped: an
	// agent died while stopping them. Run finishes their stop.
	pendingStops []*daemon
	running      bool // Run runs
	// logsChecked is when poll last looked at the logs' sizes: every
	// logCheckInterval, not every poll (each look is a stat per daemon).
	logsChecked time.Time
	// subs are the channels Subscribe gave, each told (without blocking)
	// of every change of the daemons' recorded state.
	subs map[chan struct{}]struct{}
}

const logCheckInterval = time.Second

type key struct{ unit, name string }

// daemon is one of a unit's daemons; mu guards all but spec, which is
// replaced only by Ensure while busy.
type daemon struct {
	unit      string
	spec      Daemon
	digest    string
	state     string
	pid       int
	startTime uint64
	mark      string
	started   time.Time // when its process started (or was adopted)
	since     time.Time
	due       time.Time // for Backoff: when to start again
	restarts  int
	lastExit  string
	bo        *backoff.ExponentialBackOff
	// busy: an Ensure or Stop is acting on it outside the lock; others wait.
	busy bool
	// child: this supervisor started the process (not adopted), so its
	// end is seen with one waitid, without reading /proc.
	child bool
}

// record is the state file's form of a daemon.
type daemonRecord struct {
	Unit      string `json:"unit"`
	Spec      Daemon `json:"spec"`
	Pid       int    `json:"pid,omitempty"`
	StartTime uint64 `json:"start_time,omitempty"`
	// Mark is the mark of a start under way: written before the process
	// starts, so a process whose pid was never recorded is found by it.
	Mark     string `json:"mark,omitempty"`
	Stopped  bool   `json:"stopped,omitempty"`
	Restarts int    `json:"restarts,omitempty"`
	LastExit string `json:"last_exit,omitempty"`
}

type supervisorRecord struct {
	Daemons []daemonRecord `json:"daemons"`
}

// NewSupervisor reads cfg.StateFile and adopts the daemons recorded
// there whose processes still run; the others are started by Run.
func NewSupervisor(cfg SupervisorConfig) (*Supervisor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Supervisor{cfg: cfg, log: cfg.Logger, daemons: map[key]*daemon{}}
	var rec supervisorRecord
	if _, err := readRecord(cfg.StateFile, &rec); err != nil {
		return nil, err
	}
	now := time.Now()
	for _, r := range rec.Daemons {
		d := &daemon{unit: r.Unit, spec: r.Spec, digest: r.Spec.Digest(), restarts: r.Restarts, lastExit: r.LastExit, since: now, bo: s.newBackoff()}
		pid, start := r.Pid, r.StartTime
		if pid == 0 && r.Mark != "" {
			pid, start, _ = findMarked(r.Mark)
		}
		alive := false
		if pid != 0 {
			alive, _ = processAlive(pid, start)
		}
		switch {
		case r.Stopped && alive:
			d.state, d.pid, d.startTime = Stopping, pid, start
			s.pendingStops = append(s.pendingStops, d)
		case r.Stopped:
			d.state = Stopped
		case alive:
			d.state, d.pid, d.startTime, d.started = Running, pid, start, now
			s.log.Info("adopted a running daemon", "unit", r.Unit, "daemon", r.Spec.Name, "pid", pid)
		default:
			d.state, d.due = Backoff, now
			if d.lastExit == "" {
				d.lastExit = "not running when the supervisor started"
			}
		}
		s.daemons[key{r.Unit, r.Spec.Name}] = d
	}
	if err := s.save(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Supervisor) newBackoff() *backoff.ExponentialBackOff {
	return backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(s.cfg.InitialBackoff),
		backoff.WithMaxInterval(s.cfg.MaxBackoff),
		backoff.WithMultiplier(2),
		backoff.WithRandomizationFactor(0.2),
		backoff.WithMaxElapsedTime(0),
	)
}

// Subscribe returns a channel told whenever the state of any daemon
// changes (started, ended, in back-off, stopping, stopped; several changes
// may be told once: the channel holds one notice, and the supervisor never
// waits for it to be taken), and the function that ends the subscription.
// A unit's agent reports its daemons' states (States) when told.
func (s *Supervisor) Subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.subs == nil {
		s.subs = map[chan struct{}]struct{}{}
	}
	s.subs[ch] = struct{}{}
	return ch, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.subs, ch)
	}
}

// save writes the state file, and tells the subscribers: every change of
// a daemon's state is saved; s.mu is held.
func (s *Supervisor) save() error {
	for ch := range s.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	rec := supervisorRecord{Daemons: []daemonRecord{}}
	for _, d := range s.daemons {
		rec.Daemons = append(rec.Daemons, daemonRecord{
			Unit: d.unit, Spec: d.spec, Pid: d.pid, StartTime: d.startTime, Mark: d.mark,
			Stopped: d.state == Stopped || d.state == Stopping, Restarts: d.restarts, LastExit: d.lastExit,
		})
	}
	sort.Slice(rec.Daemons, func(i, j int) bool {
		a, b := rec.Daemons[i], rec.Daemons[j]
		return a.Unit < b.Unit || a.Unit == b.Unit && a.Spec.Name < b.Spec.Name
	})
	return writeRecord(s.cfg.StateFile, rec)
}

func (s *Supervisor) logPath(unit, name string) string {
	return filepath.Join(s.cfg.UnitDir(unit), "daemons", name+".log")
}

// start starts d's process; s.mu is held. The mark is recorded before
// the process starts and its pid after, so that whenever the agent dies
// a new supervisor finds the process.
func (s *Supervisor) start(d *daemon) error {
	dir := s.cfg.UnitDir(d.unit)
	logPath := s.logPath(d.unit, d.spec.Name)
	if err := os.MkdirAll(filepath.Dir(logPath), 0o750); err != nil {
		return err
	}
	logFile, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return err
	}
	defer logFile.Close()
	d.mark, d.pid, d.startTime = newMark(), 0, 0
	if err := s.save(); err != nil {
		return err
	}
	cmd := exec.Command(d.spec.Command[0], d.spec.Command[1:]...)
	cmd.Dir = dir
	cmd.Env = d.spec.environ(d.mark)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// A session of its own: its own process group to signal, no
	// terminal, and no signal sent to the agent's group reaches it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		d.mark = ""
		return err
	}
	pid := cmd.Process.Pid
	// The supervisor collects the process itself (wait4 on the pid, as
	// for an adopted one it cannot wait for), not through os/exec.
	cmd.Process.Release()
	st, ok, err := procfs.ReadStat(pid)
	if err != nil || !ok {
		// Ended already, or /proc could not say: a start time of 0 makes
		// the next poll see it ended.
		st.StartTime = 0
	}
	now := time.Now()
	d.pid, d.startTime, d.mark, d.state, d.started, d.since, d.child = pid, st.StartTime, "", Running, now, now, true
	s.log.Info("started a daemon", "unit", d.unit, "daemon", d.spec.Name, "pid", pid)
	return s.save()
}

// Ensure makes unit's daemon run with exactly spec d: one so running is
// left alone (even in back-off, its process having ended); one running
// with another spec is stopped and started with this one. It reports
// whether it started a process.
func (s *Supervisor) Ensure(unit string, d Daemon) (changed bool, err error) {
	if err := d.Validate(); err != nil {
		return false, err
	}
	dg := d.Digest()
	s.mu.Lock()
	defer s.mu.Unlock()
	k := key{unit, d.Name}
	cur := s.daemons[k]
	if cur != nil && cur.busy {
		return false, fmt.Errorf("daemon %s of %s: being stopped or started", d.Name, unit)
	}
	if cur != nil && cur.digest == dg && (cur.state == Running || cur.state == Backoff) {
		return false, nil
	}
	if cur == nil && s.unitDaemons(unit) >= maxUnitDaemons {
		return false, fmt.Errorf("daemon %s of %s: the unit has %d daemons, at most %d", d.Name, unit, maxUnitDaemons, maxUnitDaemons)
	}
	if cur != nil && cur.pid != 0 {
		if err := s.stopLocked(cur); err != nil {
			return false, err
		}
	}
	now := time.Now()
	nd := &daemon{unit: unit, spec: d, digest: dg, state: Backoff, due: now, since: now, bo: s.newBackoff()}
	if cur != nil {
		nd.lastExit = cur.lastExit // how the process of the spec before ended
	}
	s.daemons[k] = nd
	if err := s.start(nd); err != nil {
		nd.lastExit = "start: " + err.Error()
		nd.due = now.Add(nd.bo.NextBackOff())
		s.save()
		return false, fmt.Errorf("start daemon %s of %s: %w", d.Name, unit, err)
	}
	return true, nil
}

func (s *Supervisor) unitDaemons(unit string) int {
	n := 0
	for k := range s.daemons {
		if k.unit == unit {
			n++
		}
	}
	return n
}

// stopLocked stops d's process, if it has one, with s.mu held on entry
// and on return, released while it waits for the process to end.
func (s *Supervisor) stopLocked(d *daemon) error {
	d.busy = true
	defer func() { d.busy = false }()
	if d.pid == 0 {
		d.state, d.startTime, d.since = Stopped, 0, time.Now()
		return s.save()
	}
	prev := d.state
	d.state, d.since = Stopping, time.Now()
	if err := s.save(); err != nil {
		d.state = prev
		return err
	}
	pid, start, timeout := d.pid, d.startTime, d.spec.stopTimeout()
	s.mu.Unlock()
	how, err := terminate(pid, start, timeout)
	s.mu.Lock()
	if err != nil {
		return fmt.Errorf("stop daemon %s of %s: %w", d.spec.Name, d.unit, err)
	}
	d.state, d.pid, d.startTime, d.lastExit, d.since = Stopped, 0, 0, how, time.Now()
	s.log.Info("stopped a daemon", "unit", d.unit, "daemon", d.spec.Name, "pid", pid, "exit", how)
	return s.save()
}

// Stop stops unit's daemon name: it is not started again; its process
// group gets SIGTERM, and SIGKILL if its process still runs after the
// daemon's stop timeout. It reports whether a process was stopped (or a
// back-off cancelled).
func (s *Supervisor) Stop(unit, name string) (changed bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.daemons[key{unit, name}]
	if d == nil || d.state == Stopped {
		return false, nil
	}
	if d.busy {
		return false, fmt.Errorf("daemon %s of %s: being stopped or started", name, unit)
	}
	return true, s.stopLocked(d)
}

// StopAll stops all of unit's daemons at once, as Stop does, and
// forgets them.
func (s *Supervisor) StopAll(unit string) error {
	s.mu.Lock()
	var names []string
	for k := range s.daemons {
		if k.unit == unit {
			names = append(names, k.name)
		}
	}
	s.mu.Unlock()
	if len(names) == 0 {
		return nil // nothing of the unit's to stop or to record
	}
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, n := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = s.Stop(unit, n)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range names {
		if d := s.daemons[key{unit, n}]; d != nil && d.state == Stopped && !d.busy {
			delete(s.daemons, key{unit, n})
		}
	}
	return s.save()
}

// States returns what the supervisor knows of unit's daemons, by name.
func (s *Supervisor) States(unit string) []DaemonState {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []DaemonState
	for k, d := range s.daemons {
		if k.unit != unit {
			continue
		}
		st := DaemonState{Name: k.name, State: d.state, Pid: d.pid, Restarts: d.restarts, LastExit: d.lastExit, Since: d.since, Log: s.logPath(unit, k.name)}
		if d.state == Backoff {
			st.Pid, st.Since = 0, d.due
		}
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Run watches the daemons until ctx ends, then returns, leaving them
// running: a daemon whose process ends is started again after its
// back-off; a log past its limit is rotated. It first finishes the
// stops an earlier agent left unfinished.
func (s *Supervisor) Run(ctx context.Context) error {
	s.mu.Lock()
	if s.running {
		s.mu.Unlock()
		return errors.New("supervisor: Run already running")
	}
	s.running = true
	pending := s.pendingStops
	s.pendingStops = nil
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.running = false
		s.mu.Unlock()
	}()
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, d := range pending {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.mu.Lock()
			defer s.mu.Unlock()
			if d.busy || d.pid == 0 {
				return // stopped meanwhile, by Stop or Ensure
			}
			if err := s.stopLocked(d); err != nil {
				s.log.Error("finish stopping a daemon", "unit", d.unit, "daemon", d.spec.Name, "error", err)
			}
		}()
	}
	t := time.NewTicker(s.cfg.PollInterval)
	defer t.Stop()
	for {
		s.poll()
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// poll notices ended processes, starts those due, rotates full logs.
func (s *Supervisor) poll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	checkLogs := now.Sub(s.logsChecked) >= logCheckInterval
	if checkLogs {
		s.logsChecked = now
	}
	for _, d := range s.daemons {
		if d.busy {
			continue
		}
		switch d.state {
		case Running:
			if d.child {
				if running, ok := childRunning(d.pid); ok && running {
					if checkLogs {
						s.rotate(d)
					}
					continue
				}
			}
			if done, how := ended(d.pid, d.startTime); done {
				if now.Sub(d.started) >= s.cfg.ResetAfter {
					d.bo.Reset()
				}
				delay := d.bo.NextBackOff()
				d.state, d.pid, d.startTime, d.lastExit, d.due, d.since = Backoff, 0, 0, how, now.Add(delay), now
				s.log.Warn("daemon ended", "unit", d.unit, "daemon", d.spec.Name, "exit", how, "restart_in", delay)
				if err := s.save(); err != nil {
					s.log.Error("save daemon state", "error", err)
				}
				continue
			}
			if checkLogs {
				s.rotate(d)
			}
		case Backoff:
			if now.Before(d.due) {
				continue
			}
			d.restarts++
			if err := s.start(d); err != nil {
				d.lastExit = "start: " + err.Error()
				d.due = now.Add(d.bo.NextBackOff())
				s.log.Error("start daemon", "unit", d.unit, "daemon", d.spec.Name, "error", err)
				s.save()
			}
		}
	}
}

// rotate moves a daemon's log past its limit to <log>.1 (its last
// LogLimit bytes) and truncates it; the daemon writes with O_APPEND, so
// it goes on at the new end. Lines written between the copy and the
// truncation are lost: the log is bounded, not complete.
func (s *Supervisor) rotate(d *daemon) {
	p := s.logPath(d.unit, d.spec.Name)
	st, err := os.Stat(p)
	if err != nil || st.Size() <= s.cfg.LogLimit {
		return
	}
	f, err := os.Open(p)
	if err != nil {
		return
	}
	defer f.Close()
	buf := make([]byte, s.cfg.LogLimit)
	n, err := f.ReadAt(buf, st.Size()-s.cfg.LogLimit)
	if err != nil && err != io.EOF {
		return
	}
	if err := writeAtomic(p+".1", buf[:n], 0o640); err != nil {
		s.log.Error("rotate daemon log", "log", p, "error", err)
		return
	}
	os.Truncate(p, 0)
}
