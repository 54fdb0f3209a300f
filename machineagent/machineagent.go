package machineagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"

	"github.com/lifelinehq/lifeline/hooks"
	"github.com/lifelinehq/lifeline/internal/agentwatch"
	"github.com/lifelinehq/lifeline/internal/charm"
	"github.com/lifelinehq/lifeline/internal/hostexec"
	"github.com/lifelinehq/lifeline/internal/logship"
	"github.com/lifelinehq/lifeline/internal/names"
	"github.com/lifelinehq/lifeline/internal/pki"
	"github.com/lifelinehq/lifeline/internal/sdnotify"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/unitagent"
)

// API is what the machine agent needs from the controller, as its
// machine's credential.
type API interface {
	agentwatch.ManyWatcher
	EnsureMachineDead(ctx context.Context, in *pb.EnsureMachineDeadRequest, opts ...grpc.CallOption) (*pb.EnsureMachineDeadResponse, error)
	SetMachineStatus(ctx context.Context, in *pb.SetMachineStatusRequest, opts ...grpc.CallOption) (*pb.SetMachineStatusResponse, error)
	IssueUnitCredentials(ctx context.Context, in *pb.IssueUnitCredentialsRequest, opts ...grpc.CallOption) (*pb.IssueUnitCredentialsResponse, error)
	SetUnitStatuses(ctx context.Context, in *pb.SetUnitStatusesRequest, opts ...grpc.CallOption) (*pb.SetUnitStatusesResponse, error)
	GetAgentSettings(ctx context.Context, in *pb.GetAgentSettingsRequest, opts ...grpc.CallOption) (*pb.GetAgentSettingsResponse, error)
	RemoveUnit(ctx context.Context, in *pb.RemoveUnitRequest, opts ...grpc.CallOption) (*pb.RemoveUnitResponse, error)
	RemoveUnits(ctx context.Context, in *pb.RemoveUnitsRequest, opts ...grpc.CallOption) (*pb.RemoveUnitsResponse, error)
	Presence(ctx context.Context, opts ...grpc.CallOption) (grpc.BidiStreamingClient[pb.PresenceRequest, pb.PresenceResponse], error)
	TaskHeartbeat(ctx context.Context, in *pb.TaskHeartbeatRequest, opts ...grpc.CallOption) (*pb.TaskHeartbeatResponse, error)
}

// Config configures an Agent.
type Config struct {
	MachineID string
	// DataDir holds the machine agent's files and, under units/, each unit
	// agent's.
	DataDir string
	// Address is the machine's address, given to its units.
	Address string
	API     API
	// DialUnit connects a unit agent to the controller with the unit's own
	// credential, which the machine agent replaces should the controller
	// refuse it: each call carries cred's current one and reports a
	// refusal (apiclient.AsRenewable). Closing the Closer ends the
	// connection.
	DialUnit func(cred *UnitCredential) (unitagent.API, io.Closer, error)
	// Lifelined is the lifelined binary, which serves as the hook tools.
	Lifelined string
	Logger    hclog.Logger
	// UnitRetry and HookTimeout are passed to the unit agents (zero: their
	// defaults, and the controller's hook timeout, which the machine agent
	// asks for at most once a minute for the unit agents it starts).
	UnitRetry   unitagent.RetryPolicy
	HookTimeout time.Duration
	// HookMetrics counts its unit agents' hook runs; nil counts none.
	HookMetrics *unitagent.HookMetrics
	// PackageManager carries out the units' package claims (host.go);
	// nil is hostexec.None, which refuses them.
	PackageManager hostexec.PackageManager
	// ClaimsWindow is how long a pass of the check of the units' claims
	// against one another waits after an ask for another to join it
	// (conflicts.go); 75 ms when zero.
	ClaimsWindow time.Duration
	// Logs ships the process's log lines to the controller while Run
	// runs; none when nil.
	Logs *logship.Shipper
}

// Validate reports a configuration New cannot use.
func (c Config) Validate() error {
	switch {
	case !names.ValidMachine(c.MachineID):
		return fmt.Errorf("machine agent: invalid machine id %q", c.MachineID)
	case c.DataDir == "":
		return errors.New("machine agent: no data directory")
	case c.API == nil || c.DialUnit == nil:
		return errors.New("machine agent: no controller API")
	case c.Lifelined == "":
		return errors.New("machine agent: no lifelined binary for the hook tools")
	}
	return nil
}

// Agent is a machine agent.
type Agent struct {
	cfg      Config
	logger   hclog.Logger
	toolsDir string
	hookLock chan struct{}
	// charms is the machine's cache of unpacked charms, shared by its
	// units' charm directories as hard links.
	charms *charm.Cache
	// mux is the agent's one watch stream, which its unit agents share:
	// each follows its subjects on it as itself.
	mux *agentwatch.Mux
	// tools is the hook tool server its unit agents share, on agent.sock
	// in its data directory, while Run runs.
	tools *hooks.Server
	// statuses sends its unit agents' status reports together, while Run
	// runs.
	statuses *statusBatcher
	// unitRemovals sends its removals of dead units together, while Run
	// runs.
	unitRemovals *removalBatcher
	// host carries out its units' host claims (host.go), and gate checks
	// them against one another (conflicts.go), while Run runs.
	host *hostexec.Host
	gate *claimsGate
	// beats counts the tasks its unit agents run, for the machine's
	// heartbeat (heartbeat.go).
	beats *taskBeats
	// hookTimeout and updateStatus are the controller's hook timeout and
	// update-status interval as asked for at hookTimeoutAt, under
	// settingsMu: one unit start asks while the others wait for its
	// answer.
	settingsMu    sync.Mutex
	hookTimeout   time.Duration
	updateStatus  time.Duration
	hookTimeoutAt time.Time

	mu      sync.Mutex
	workers map[string]*worker
	// removed are the units this agent removed that its watch of the
	// machine's units may still show: not to be started again. Only the
	// agent's loop uses it.
	removed map[string]bool
	// fresh are the units assigned to the machine while the agent
	// watched (after its watch's first listing), whose agents it has not
	// started: no agent of them ran here before, so theirs starts as new
	// (unitagent.Config.New), without looking for a directory or asking
	// for its scopes. Only the agent's loop uses it.
	fresh map[string]bool
	// subs are the subordinates each principal's agent last told it has
	// (unitagent.Deployer.Subordinates), under mu.
	subs map[string][]string
	// leftovers are the units whose directories it found at start and
	// has not yet placed: an assigned principal, a subordinate some
	// principal tells, or neither (forced out while the agent was away:
	// ended). looked says it has looked. Only the agent's loop uses them.
	leftovers map[string]bool
	looked    bool
	// ending are the units to end (forced out: stopped, their sessions'
	// processes ended, their files removed), which the ender takes in
	// batches, under mu; endWake wakes it, and it reports each unit ended
	// on ended.
	ending  []string
	endWake chan struct{}
	ended   chan string
	// wake wakes the agent's loop: a principal told its subordinates.
	wake   chan struct{}
	exited chan exit // workers report here when they stop
	// removals report here when a dead unit's removal ends (removeDead);
	// removing bounds how many run at once.
	removals chan removal
	removing chan struct{}
	ctx      context.Context

	// instance is this run's id, previous the one before it on the data
	// directory (instance.go), while Run runs.
	instance, previous string
	// presentMu guards presentNow, which is closed while the agent holds
	// its machine's presence, and replaced when it loses it.
	presentMu  sync.Mutex
	presentNow chan struct{}
	present    bool
	// fenced receives the controller's refusal of the machine's presence
	// to this instance: another one holds it.
	fenced chan error
}

// New returns a machine agent.
func New(cfg Config) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	dir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	cfg.DataDir = dir
	return &Agent{
		cfg: cfg, logger: cfg.Logger.With("machine", cfg.MachineID),
		toolsDir: filepath.Join(dir, "tools"), hookLock: make(chan struct{}, 1),
		charms:  charm.NewCache(filepath.Join(dir, "charms")),
		workers: map[string]*worker{}, exited: make(chan exit, 16), removed: map[string]bool{},
		fresh: map[string]bool{}, subs: map[string][]string{},
		endWake: make(chan struct{}, 1), ended: make(chan string), wake: make(chan struct{}, 1),
		removals: make(chan removal), removing: make(chan struct{}, maxRemovals),
		mux:        agentwatch.NewMux(cfg.API, cfg.Logger.With("machine", cfg.MachineID)),
		presentNow: make(chan struct{}), fenced: make(chan error, 1),
		beats: &taskBeats{byUnit: map[string]int{}, wake: make(chan struct{}, 1)},
	}, nil
}

// ErrMachineDead is returned by Run once the machine is dead (or gone):
// the agent's work is over.
var ErrMachineDead = errors.New("machine is dead")

// Run runs the machine until ctx ends or the machine is dead. It runs
// nothing until the controller holds the machine's presence for it, and
// stops everything it runs, returning ErrFenced, once the controller says
// another instance of the machine's agent holds it.
func (a *Agent) Run(ctx context.Context) error {
	if err := os.MkdirAll(filepath.Join(a.cfg.DataDir, "units"), 0o700); err != nil {
		return fmt.Errorf("machine agent: %w", err)
	}
	instance, previous, release, err := claimDataDir(a.cfg.DataDir)
	if err != nil {
		return err
	}
	defer release()
	a.instance, a.previous = instance, previous
	host, err := a.openHost()
	if err != nil {
		return err
	}
	a.host = host
	a.gate = openGate(a.cfg.DataDir, a.cfg.ClaimsWindow, a.logger.Named("claims"))
	if err := hooks.InstallTools(a.toolsDir, a.cfg.Lifelined); err != nil {
		return fmt.Errorf("machine agent: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// One hook tool server for the machine's units, stopped once they
	// have (the deferred calls run last first).
	tools, err := hooks.NewServer(hooks.ServerConfig{Socket: filepath.Join(a.cfg.DataDir, "agent.sock"), Logger: a.logger})
	if err != nil {
		return fmt.Errorf("machine agent: %w", err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		if err := tools.Serve(ctx); err != nil && ctx.Err() == nil {
			a.logger.Warn("hook tool server stopped", "error", err)
		}
	}()
	defer func() {
		tools.Close()
		<-served
	}()
	a.tools = tools
	a.ctx = ctx
	a.statuses = newStatusBatcher(a.cfg.API)
	a.unitRemovals = newRemovalBatcher(a.cfg.API)
	defer a.stopAll()

	// The agent's own goroutines, and removals of dead units, end when Run
	// does, and are waited for (after ctx is cancelled, before the unit
	// agents are stopped).
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() { a.keepPresent(ctx) })
	wg.Go(func() { a.runEnder(ctx) })
	wg.Go(func() { a.heartbeat(ctx) })
	wg.Go(func() { a.statuses.run(ctx) })
	wg.Go(func() { a.unitRemovals.run(ctx) })
	wg.Go(func() { a.mux.Run(ctx) })
	wg.Go(func() { host.Supervisor.Run(ctx) })
	if a.cfg.Logs != nil {
		wg.Go(func() { a.cfg.Logs.Run(ctx) })
	}
	a.logger.Info("machine agent instance", "instance", instance, "previous", previous)
	select {
	case <-a.whenPresent():
	case err := <-a.fenced:
		return fenced(err)
	case <-ctx.Done():
		return ctx.Err()
	}
	a.setStatus(ctx, "started", "")
	// Under a systemd unit of Type=notify (docs/systemd) the agent has
	// started once it is present: its units run from here.
	if _, err := sdnotify.Notify(sdnotify.Ready); err != nil {
		a.logger.Warn("telling systemd the machine agent is ready", "error", err)
	}

	var mu sync.Mutex
	var machine *pb.Machine
	machineKnown := false
	units := map[string]bool{}
	unitsKnown := false
	// arrived are the units the watch showed assigned after a listing
	// that did not hold them; a listing again (Relisted) may hold units
	// assigned meanwhile, which are not known to be new.
	arrived := map[string]bool{}
	changed := make(chan struct{}, 1)
	notify := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	// Both watches share one stream, with the unit agents'.
	mux := a.mux
	wg.Add(2)
	go func() {
		defer wg.Done()
		mux.Follow(ctx, &pb.WatchSubject{Subject: &pb.WatchSubject_Machine{Machine: a.cfg.MachineID}}, func(resp *pb.WatchResponse) {
			mu.Lock()
			if resp.Relisted {
				machine = nil
			}
			for _, ch := range resp.Changes {
				if ch.Removed {
					machine = nil
				} else if m := ch.GetMachine(); m != nil {
					machine = m
				}
			}
			machineKnown = true
			mu.Unlock()
			notify()
		}, a.logger)
	}()
	go func() {
		defer wg.Done()
		mux.Follow(ctx, &pb.WatchSubject{Subject: &pb.WatchSubject_MachineUnits{MachineUnits: a.cfg.MachineID}}, func(resp *pb.WatchResponse) {
			mu.Lock()
			if resp.Relisted {
				units = map[string]bool{}
			}
			for _, ch := range resp.Changes {
				if ch.Removed {
					delete(units, ch.Id)
					delete(arrived, ch.Id)
				} else {
					if unitsKnown && !resp.Relisted && !units[ch.Id] {
						arrived[ch.Id] = true
					}
					units[ch.Id] = true
				}
			}
			unitsKnown = true
			mu.Unlock()
			notify()
		}, a.logger)
	}()

	retry := time.NewTimer(time.Hour)
	defer retry.Stop()
	setDead := false
	var deadSince time.Time
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-a.fenced:
			return fenced(err)
		case <-changed:
		case e := <-a.exited:
			a.workerExited(ctx, e, &wg)
		case r := <-a.removals:
			a.removalEnded(r)
		case u := <-a.ended:
			a.endDone(u)
		case <-a.wake:
		case <-retry.C:
		}
		mu.Lock()
		m, mk, want, uk := machine, machineKnown, copySet(units), unitsKnown
		for name := range arrived {
			a.fresh[name] = true
		}
		clear(arrived)
		mu.Unlock()
		if !mk || !uk {
			continue
		}
		if m == nil || m.Life == pb.Life_LIFE_DEAD {
			// Units forced out with their machine (destroy-machine
			// --force) are ended first, and the removals under way
			// finish, for a minute at most: the host keeps nothing of
			// them.
			if deadSince.IsZero() {
				deadSince = time.Now()
			}
			if a.forgone(want); !a.idle() && time.Since(deadSince) < deadWait {
				retry.Reset(time.Second)
				continue
			}
			// It says nothing as it goes: the machine's status goes with
			// the machine moments later, and a dead machine's agent
			// shows down meanwhile. Its report cost one write a machine
			// as the last units of a destroy went, and once the machine
			// was gone, five refused calls (its credential with it).
			a.logger.Info("machine is dead: the agent stops")
			return ErrMachineDead
		}
		again := a.reconcile(ctx, want)
		// Set dead, the machine is waited on to show so: the watch's view
		// lags, and once the provisioner removed it a call would be
		// refused.
		if m.Life == pb.Life_LIFE_DYING && len(want) == 0 && a.idle() && !setDead {
			cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
			_, err := a.cfg.API.EnsureMachineDead(cctx, &pb.EnsureMachineDeadRequest{Machine: a.cfg.MachineID})
			ccancel()
			if err != nil {
				a.logger.Warn("cannot set the machine dead yet", "error", err)
				again = true
			} else {
				a.logger.Info("machine set dead")
				setDead = true
			}
		}
		if again {
			retry.Reset(2 * time.Second)
		}
	}
}

func copySet(m map[string]bool) map[string]bool {
	out := make(map[string]bool, len(m))
	for k := range m {
		out[k] = true
	}
	return out
}

// reconcile runs an agent for every principal assigned, and ends the units
// forced out (forgone). It reports whether something is to be tried again.
func (a *Agent) reconcile(ctx context.Context, want map[string]bool) bool {
	again := false
	a.forgone(want)
	for name := range a.removed {
		if !want[name] {
			delete(a.removed, name) // the watch has seen it go
		}
	}
	for name := range a.fresh {
		if !want[name] {
			delete(a.fresh, name)
		}
	}
	var start []string
	a.mu.Lock()
	for name := range want {
		if _, ok := a.workers[name]; !ok && !a.removed[name] {
			start = append(start, name)
		}
	}
	a.mu.Unlock()
	sort.Strings(start)
	for len(start) > 0 {
		batch := start[:min(len(start), credentialBatch)]
		start = start[len(batch):]
		creds, err := a.issueCredentials(ctx, batch)
		switch {
		case err != nil && len(batch) == 1:
			a.logger.Warn("cannot start unit agent", "unit", batch[0], "error", err)
			again = true
			continue
		case err != nil:
			// One of them stands in the others' way (removed since the
			// watch listed it, say): each asks on its own (startWorker).
			a.logger.Warn("cannot issue the units' credentials together; one at a time", "units", batch, "error", err)
		}
		for i, name := range batch {
			var cred *pki.Credential
			if creds != nil {
				cred = &creds[i]
			}
			// A start that failed ran no agent: the unit stays new.
			if err := a.startWorker(ctx, name, "", cred, a.fresh[name]); err != nil {
				a.logger.Warn("cannot start unit agent", "unit", name, "error", err)
				again = true
			} else {
				delete(a.fresh, name)
			}
		}
	}
	return again
}

// credentialBatch is how many units' credentials the agent asks for in one
// call, within the controller's bound (state.MaxCredentialsAtOnce): the
// units of an AddUnits to the machine arrive together, and each call is a
// transaction.
const credentialBatch = 25

// issueCredentials asks the controller for new credentials for units, in
// one call: all of them, in order, or an error.
func (a *Agent) issueCredentials(ctx context.Context, units []string) ([]pki.Credential, error) {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := a.cfg.API.IssueUnitCredentials(cctx, &pb.IssueUnitCredentialsRequest{Units: units, Instance: a.instance})
	if err != nil {
		return nil, fmt.Errorf("credentials for %s: %w", strings.Join(units, ", "), err)
	}
	if len(resp.Credentials) != len(units) {
		return nil, fmt.Errorf("credentials for %s: the controller gave %d", strings.Join(units, ", "), len(resp.Credentials))
	}
	out := make([]pki.Credential, len(units))
	for i, c := range resp.Credentials {
		out[i] = pki.Credential{Tag: c.Tag, Secret: c.Secret}
	}
	return out, nil
}

// idle says whether no unit agent runs.
func (a *Agent) idle() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.workers) == 0
}

// unitDir is a unit's data directory, kept short: a unit agent run alone
// has its hook tools' socket in it.
func (a *Agent) unitDir(unit string) string {
	return filepath.Join(a.cfg.DataDir, "units", strings.ReplaceAll(unit, "/", "-"))
}

// settingsFor is how long the controller's hook timeout, once asked for,
// is given to the unit agents started.
const settingsFor = time.Minute

// unitSettings returns the hook timeout (the configured one, else the
// controller's) and the update-status interval for a unit agent, the
// controller's asked for at most once every settingsFor rather than by
// each unit agent; zero for what it cannot ask, which the unit agent then
// asks itself.
func (a *Agent) unitSettings(ctx context.Context) (hookTimeout, updateStatus time.Duration) {
	a.settingsMu.Lock()
	defer a.settingsMu.Unlock()
	if a.hookTimeoutAt.IsZero() || time.Since(a.hookTimeoutAt) >= settingsFor {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		s, err := a.cfg.API.GetAgentSettings(cctx, &pb.GetAgentSettingsRequest{})
		cancel()
		if err == nil && s.HookTimeoutMs > 0 {
			a.hookTimeout, a.hookTimeoutAt = time.Duration(s.HookTimeoutMs)*time.Millisecond, time.Now()
			a.updateStatus = time.Duration(s.UpdateStatusIntervalMs) * time.Millisecond
		}
	}
	hookTimeout = a.cfg.HookTimeout
	if hookTimeout == 0 {
		hookTimeout = a.hookTimeout
	}
	return hookTimeout, a.updateStatus
}

// setStatus reports the machine agent's status, trying a few times.
func (a *Agent) setStatus(ctx context.Context, st, msg string) {
	for i := 0; i < 5; i++ {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := a.cfg.API.SetMachineStatus(cctx, &pb.SetMachineStatusRequest{Machine: a.cfg.MachineID, Status: &pb.Status{Status: st, Message: msg}})
		cancel()
		if err == nil || ctx.Err() != nil {
			return
		}
		a.logger.Debug("cannot report machine status yet", "error", err)
		time.Sleep(time.Second)
	}
}
