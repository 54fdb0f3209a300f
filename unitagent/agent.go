package unitagent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/lifelinehq/lifeline/hooks"
	"github.com/lifelinehq/lifeline/internal/agentwatch"
	"github.com/lifelinehq/lifeline/internal/charm"
	"github.com/lifelinehq/lifeline/internal/hostexec"
	"github.com/lifelinehq/lifeline/internal/names"
	"github.com/lifelinehq/lifeline/internal/pause"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// API is what a unit agent needs from the controller: the AgentService
// methods it calls, which the generated client satisfies.
type API interface {
	Watch(ctx context.Context, in *pb.WatchRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[pb.WatchResponse], error)
	WatchMany(ctx context.Context, opts ...grpc.CallOption) (grpc.BidiStreamingClient[pb.WatchManyRequest, pb.WatchManyResponse], error)
	DownloadCharm(ctx context.Context, in *pb.DownloadCharmRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[pb.DownloadCharmResponse], error)
	SetUnitDying(ctx context.Context, in *pb.SetUnitDyingRequest, opts ...grpc.CallOption) (*pb.SetUnitDyingResponse, error)
	EnsureUnitDead(ctx context.Context, in *pb.EnsureUnitDeadRequest, opts ...grpc.CallOption) (*pb.EnsureUnitDeadResponse, error)
	UnitScopes(ctx context.Context, in *pb.UnitScopesRequest, opts ...grpc.CallOption) (*pb.UnitScopesResponse, error)
	RemoveUnit(ctx context.Context, in *pb.RemoveUnitRequest, opts ...grpc.CallOption) (*pb.RemoveUnitResponse, error)
	AddSubordinate(ctx context.Context, in *pb.AddSubordinateRequest, opts ...grpc.CallOption) (*pb.AddSubordinateResponse, error)
	EnterScope(ctx context.Context, in *pb.EnterScopeRequest, opts ...grpc.CallOption) (*pb.EnterScopeResponse, error)
	LeaveScope(ctx context.Context, in *pb.LeaveScopeRequest, opts ...grpc.CallOption) (*pb.LeaveScopeResponse, error)
	ReadSettings(ctx context.Context, in *pb.ReadSettingsRequest, opts ...grpc.CallOption) (*pb.ReadSettingsResponse, error)
	UpdateSettings(ctx context.Context, in *pb.UpdateSettingsRequest, opts ...grpc.CallOption) (*pb.UpdateSettingsResponse, error)
	SetUnitStatus(ctx context.Context, in *pb.SetUnitStatusRequest, opts ...grpc.CallOption) (*pb.SetUnitStatusResponse, error)
	ClearResolved(ctx context.Context, in *pb.ClearResolvedRequest, opts ...grpc.CallOption) (*pb.ClearResolvedResponse, error)
	GetAgentSettings(ctx context.Context, in *pb.GetAgentSettingsRequest, opts ...grpc.CallOption) (*pb.GetAgentSettingsResponse, error)
	// The unit's revisions (spec.go).
	GetRevision(ctx context.Context, in *pb.GetRevisionRequest, opts ...grpc.CallOption) (*pb.GetRevisionResponse, error)
	SetUnitRevision(ctx context.Context, in *pb.SetUnitRevisionRequest, opts ...grpc.CallOption) (*pb.SetUnitRevisionResponse, error)
	// The service's leadership (leadertools.go).
	GetLeadership(ctx context.Context, in *pb.GetLeadershipRequest, opts ...grpc.CallOption) (*pb.GetLeadershipResponse, error)
	SetLeaderSettings(ctx context.Context, in *pb.SetLeaderSettingsRequest, opts ...grpc.CallOption) (*pb.SetLeaderSettingsResponse, error)
	// The unit's host report (hostreport.go).
	SetHostReport(ctx context.Context, in *pb.SetHostReportRequest, opts ...grpc.CallOption) (*pb.SetHostReportResponse, error)
	// The unit's tasks (tasks.go).
	StartTask(ctx context.Context, in *pb.StartTaskRequest, opts ...grpc.CallOption) (*pb.StartTaskResponse, error)
	FinishTask(ctx context.Context, in *pb.FinishTaskRequest, opts ...grpc.CallOption) (*pb.FinishTaskResponse, error)
	ReportTaskLost(ctx context.Context, in *pb.ReportTaskLostRequest, opts ...grpc.CallOption) (*pb.ReportTaskLostResponse, error)
	StopUnitTasks(ctx context.Context, in *pb.StopUnitTasksRequest, opts ...grpc.CallOption) (*pb.StopUnitTasksResponse, error)
	TaskHeartbeat(ctx context.Context, in *pb.TaskHeartbeatRequest, opts ...grpc.CallOption) (*pb.TaskHeartbeatResponse, error)
	SetCheckpoint(ctx context.Context, in *pb.SetCheckpointRequest, opts ...grpc.CallOption) (*pb.SetCheckpointResponse, error)
	GetCheckpoint(ctx context.Context, in *pb.GetCheckpointRequest, opts ...grpc.CallOption) (*pb.GetCheckpointResponse, error)
	AppendTaskLog(ctx context.Context, in *pb.AppendTaskLogRequest, opts ...grpc.CallOption) (*pb.AppendTaskLogResponse, error)
}

// Deployer runs the agents of a principal's subordinate units beside it.
// The machine agent provides it, one for each principal's agent.
type Deployer interface {
	// Deploy makes sure the named subordinate's agent runs; it is called
	// again and again and must be idempotent.
	Deploy(unit string) error
	// Recall stops the named subordinate's agent and removes its files: the
	// unit is dead and about to be removed.
	Recall(unit string) error
	// Subordinates tells every subordinate the principal has (dead ones
	// included), once the agent knows them and again whenever they
	// change. A subordinate the deployer runs, or has files of, that is
	// not among them was removed without its principal (forced out): the
	// deployer ends what is left of it on the host.
	Subordinates(units []string)
}

// RetryPolicy says how failing hooks are retried before the unit enters
// its error state.
type RetryPolicy struct {
	// Initial is the first pause (5 s when zero); it doubles up to Max
	// (5 min when zero), with jitter.
	Initial, Max time.Duration
	// Attempts is how many times a hook runs before the unit enters its
	// error state (5 when zero).
	Attempts int
}

// Config configures an Agent.
type Config struct {
	// Unit is the unit's name, "kv/0".
	Unit string
	// MachineID and Address are the unit's machine and its address, for
	// hooks (LIFELINE_MACHINE_ID, unit-get).
	MachineID string
	Address   string
	// DataDir is the unit's own directory: its state file, its charm, its
	// hook tools' socket. It is made when the agent first writes there: a
	// unit of a charm without hooks, which writes nothing, has none. Every
	// hook carries it as the unit's session mark (hooks.EnvSession).
	DataDir string
	// PrincipalDir is, for a subordinate, the data directory of its
	// principal on the machine: its hooks carry it as their principal's
	// session mark (hooks.EnvPrincipalSession), so that ending the
	// principal's processes ends the subordinate's too.
	PrincipalDir string
	// New says that no agent of the unit has run on this machine before
	// (a machine agent knows it of a unit assigned to its machine while it
	// watched): the agent has nothing on disk to read and nothing to ask
	// the controller about (checkScopes). Otherwise an agent that finds no
	// data directory cannot tell a unit never run from one whose agent
	// wrote nothing before it stopped, and asks.
	New bool
	// ToolsDir holds the hook tools (symlinks to lifelined); it leads each
	// hook's PATH.
	ToolsDir string
	API      API
	// Watches follows the unit's watch subjects; when nil, the agent
	// opens a watch stream of its own through API. A machine agent gives
	// its units its own stream, followed as each unit (agentwatch.Mux.As).
	Watches agentwatch.Follower
	Logger  hclog.Logger
	// HookLock is shared by every unit agent of a machine: hooks run one
	// at a time per machine. A channel with room for one.
	HookLock chan struct{}
	// HookTimeout bounds each hook; when zero, the controller's setting
	// (GetAgentSettings), or 5 minutes while it cannot be asked.
	HookTimeout time.Duration
	// UpdateStatusInterval is how often the unit runs update-status
	// (updatestatus.go); when zero, the controller's setting, or 5
	// minutes while it cannot be asked; never when negative.
	UpdateStatusInterval time.Duration
	// HookMetrics counts the hooks run; nil counts none.
	HookMetrics *HookMetrics
	Retry       RetryPolicy
	// Deployer runs subordinates' agents; nil leaves them undeployed.
	Deployer Deployer
	// Charms, when set, is the machine's cache of unpacked charms: the
	// unit's charm directory is then made of hard links to its files
	// (charm.Cache). When nil, the agent unpacks a copy of its own.
	Charms *charm.Cache
	// Tools, when set, is the machine's hook tool server, which its unit
	// agents share: each hook's context id tells its unit. When nil, the
	// agent serves its hooks' tools on a socket of its own, agent.sock in
	// its data directory.
	Tools *hooks.Server
	// Clock is the time; time.Now when nil.
	Clock func() time.Time
	// Beats, when set, is told how many tasks the agent runs, for its
	// machine's heartbeat (the machine agent); when nil, the agent
	// reports its machine's heartbeat itself while it runs any.
	Beats TaskBeats
	// Host carries out the unit's host claims (claims.go): its machine
	// agent's, shared by its units. When nil, the agent refuses a charm
	// that claims anything on its host.
	Host *hostexec.Host
	// Gate, when set, is the machine's check of its units' claims against
	// each other (claims.go), asked before a job takes new claims; nil
	// checks nothing.
	Gate ClaimsGate
}

// Validate reports a configuration New cannot use.
func (c Config) Validate() error {
	switch {
	case !names.ValidUnit(c.Unit):
		return fmt.Errorf("unit agent: invalid unit name %q", c.Unit)
	case c.DataDir == "":
		return errors.New("unit agent: no data directory")
	case c.API == nil:
		return errors.New("unit agent: no controller API")
	case c.HookLock == nil || cap(c.HookLock) != 1:
		return errors.New("unit agent: the hook lock must be a channel with room for one")
	}
	return nil
}

// Agent runs one unit.
type Agent struct {
	cfg    Config
	logger hclog.Logger
	store  *stateStore
	l      *localState
	rep    *reporter
	// workload is the status the charm last set, for status-get.
	workload atomic.Pointer[pb.Status]
	// missingTools, when a hook last called Juju hook tools Lifeline does
	// not provide, says so: the idle status's message (noteMissingTools);
	// missingHook is that hook, whose next clean run clears it.
	missingTools, missingHook string
	// service is the service status this unit's charm last set
	// (status-set --application), for status-get --application.
	service atomic.Pointer[pb.Status]
	// hookNames are the names in the charm's hooks directory, as read
	// (nil: to be read); hookEach says a hook ran since the charm was
	// unpacked, and each is looked up on its own (hasHook).
	hookNames map[string]bool
	hookEach  bool
	// newDir says the unit's directory holds nothing yet (it is not
	// there): the first download unpacks straight into place.
	newDir bool
	// fresh says no agent of the unit ran on this machine before
	// (Config.New): it has lost no mark of a scope.
	fresh bool
	// synced is the latest barrier the agent has seen everything up to
	// and acted on, as it last went on to wait: every report carries it
	// (pb.Status.SyncedRevision), for ctl wait.
	synced int64
	// failed is the status reported when failedOp last failed: its
	// message says when it runs again, and its output is the hook's.
	failed   *pb.Status
	failedOp *hookOp
	// leaving holds the relations whose scopes the dying unit has left in
	// its local state but not yet at the controller: the call that sets
	// it dead carries them, when nothing comes in between that another
	// could see (a hook run, a wait, any other call); otherwise they are
	// sent on their own first (executor.leaveNow).
	leaving []int64
	// toldSubs are the subordinates last told the deployer, sorted; nil
	// before the first time.
	toldSubs []string
	// hrep sends the unit's host reports, lastJob is the last host job's
	// and hostKey what the report's base was last made of
	// (hostreport.go).
	hrep    *hostReporter
	lastJob *pb.HostJob
	hostKey *hostReportKey
}

// New returns an agent for cfg.Unit.
func New(cfg Config) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.Retry.Initial == 0 {
		cfg.Retry.Initial = 5 * time.Second
	}
	if cfg.Retry.Max == 0 {
		cfg.Retry.Max = 5 * time.Minute
	}
	if cfg.Retry.Attempts == 0 {
		cfg.Retry.Attempts = 5
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	dir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("unit agent: %w", err)
	}
	cfg.DataDir = dir
	empty := cfg.New
	if !empty {
		if empty, err = dataDirAbsent(cfg.DataDir); err != nil {
			return nil, fmt.Errorf("unit agent: %w", err)
		}
	}
	store := newStateStore(cfg.DataDir)
	store.empty, store.dirMade = empty, !empty
	return &Agent{
		cfg:    cfg,
		logger: cfg.Logger.With("unit", cfg.Unit),
		store:  store,
		newDir: empty,
		fresh:  cfg.New,
	}, nil
}

// dataDirAbsent reports whether the unit's directory is not there, and
// refuses one that is not a directory. A new unit's agent (Config.New)
// does not look: its directory is made when it first writes there
// (stateStore.makeDir), which a unit of a charm without hooks never does,
// and so costs its machine no directory to make and remove.
func dataDirAbsent(dir string) (bool, error) {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return true, nil
	case err != nil:
		return false, err
	case !fi.IsDir():
		return false, fmt.Errorf("%s is not a directory", dir)
	}
	return false, nil
}

// ErrDead is returned by Run when the unit is dead (or gone): the agent's
// work is over and its files may be removed.
var ErrDead = errors.New("unit is dead")

// ErrForcedOut is returned by Run, and matches ErrDead, when the unit is
// dead or gone though its agent did not take it there: it has not run its
// remove hook (nor, so, its stop hook), and a unit that ran hooks may
// have left processes behind. The controller forced it out (destroy
// --force), or took its records while the agent was away.
var ErrForcedOut = fmt.Errorf("%w: forced out before its agent finished", ErrDead)

// Run runs the unit until ctx ends or the unit is dead (ErrDead).
func (a *Agent) Run(ctx context.Context) error {
	fresh := a.fresh
	l, err := a.store.load()
	if err != nil {
		return err
	}
	a.l = l
	if l.Host != nil {
		// What the host holds for the unit, as last recorded; an agent
		// without a record leaves the gate's (its unit may have lost it).
		a.tellGate()
	}
	dropUpdateStatus(l)
	if op := l.Op; op != nil && op.Step == stepRunning && isHostOp(op) {
		// The agent died while a host job ran: run again, its journal
		// resumes it after the tasks done. Not a failed attempt.
		a.logger.Info("host job interrupted by a restart: resuming it", "job", op.Hook)
		op.Step = stepQueued
	} else if op != nil && op.Step == stepRunning {
		// The agent died while the hook ran: that run failed, and the
		// hook, if it still runs, is ended before it runs again.
		if pgid := a.endLeftHook(); pgid != 0 {
			a.logger.Warn("ended the hook a previous run of the agent left running", "hook", op.Hook, "pgid", pgid)
		}
		a.logger.Warn("hook interrupted by a restart: counted as a failed attempt", "hook", op.Hook, "attempt", op.Attempts+1)
		a.hookFailed(op)
		if err := a.record(stepClasses[actHook].failed); err != nil {
			return err
		}
	}
	if !fresh {
		// Not new to the machine, the agent may have lost its mark of a
		// scope it entered (committed lazily): it asks.
		if err := a.checkScopes(ctx); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if a.cfg.HookTimeout == 0 || a.cfg.UpdateStatusInterval == 0 {
		sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
		s, err := a.cfg.API.GetAgentSettings(sctx, &pb.GetAgentSettingsRequest{})
		scancel()
		if err != nil {
			a.logger.Warn("cannot ask the controller for the hook timeout and update-status interval: using 5 minutes", "error", err)
		}
		if a.cfg.HookTimeout == 0 {
			a.cfg.HookTimeout = 5 * time.Minute
			if s.GetHookTimeoutMs() > 0 {
				a.cfg.HookTimeout = time.Duration(s.GetHookTimeoutMs()) * time.Millisecond
			}
		}
		if a.cfg.UpdateStatusInterval == 0 {
			a.cfg.UpdateStatusInterval = 5 * time.Minute
			if ms := s.GetUpdateStatusIntervalMs(); ms != 0 {
				a.cfg.UpdateStatusInterval = time.Duration(ms) * time.Millisecond
			}
		}
	}
	tools, err := a.startTools(ctx)
	if err != nil {
		return err
	}
	defer tools.close()
	// The reporter, and the agent's own watch stream when its machine
	// agent does not lend one, run until Run returns.
	var own sync.WaitGroup
	defer own.Wait()
	defer cancel()
	a.rep = newReporter(a.cfg.API, a.cfg.Unit, a.logger)
	own.Go(func() { a.rep.run(ctx) })
	a.startHostReport(ctx, &own)
	follow := a.cfg.Watches
	if follow == nil {
		mux := agentwatch.NewMux(a.cfg.API, a.logger)
		own.Go(func() { mux.Run(ctx) })
		follow = mux
	}
	w := newWatcher(ctx, follow, a.cfg.Unit, a.logger)
	defer w.wait()
	defer cancel()
	runner := newTaskRunner(ctx, a, tools)
	defer runner.wait()
	defer cancel()
	ex := &executor{a: a, tools: tools, w: w}
	defer ex.endPrefetch()
	var idleSince string
	var serviceDyingSince time.Time
	updates := newUpdateStatus(a.cfg.UpdateStatusInterval, a.cfg.Clock())
	for {
		a.syncHostReport()
		w.watchResolved(a.l.inError() || a.l.retrying())
		r := w.snapshot()
		a.deploySubordinates(r)
		now := a.cfg.Clock()
		if r.service != nil && r.service.Life != pb.Life_LIFE_ALIVE && serviceDyingSince.IsZero() {
			serviceDyingSince = now
		}
		r.serviceDyingSince = serviceDyingSince
		r.updateStatusAt = updates.at
		w.forgetRelations(r, a.l)
		runner.sync(r)
		for id, again := range a.l.SubordinatesRefused {
			if !now.Before(again) {
				delete(a.l.SubordinatesRefused, id) // asked for again
			}
		}
		act := decide(a.l, r, a.cfg.Unit, now)
		updates.decided(act, now)
		if err := ex.ready(ctx, act); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			a.logger.Warn("not ready to act; trying again", "step", act.String(), "error", err)
			if !pause.For(ctx, time.Second) {
				return ctx.Err()
			}
			continue
		}
		if act.kind == actExit {
			return a.exitDead(ctx, !a.tornDown())
		}
		if act.kind == actWait {
			if !act.catchUp {
				// Waiting for its watches, the agent is not idle: a
				// new unit shows its first report when it acts. It
				// has acted on everything up to the barrier once its
				// picture holds every change up to there.
				if r.barrier > 0 && r.synced >= r.barrier {
					a.synced = max(a.synced, r.barrier)
				}
				a.reportWaiting(act)
			}
			if idleSince != act.why {
				a.logger.Debug("waiting", "for", act.why)
				idleSince = act.why
			}
			var timer <-chan time.Time
			if !act.until.IsZero() {
				timer = time.After(time.Until(act.until))
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-w.changed:
			case <-timer:
			}
			continue
		}
		if (act.kind == actEnsureDead || act.kind == actDownload) && runner.running() > 0 {
			// Its tasks stopped (the unit is dying), their ends are
			// reported before the unit goes; the charm directory the
			// running actions run from is replaced only once they end.
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-w.changed:
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		idleSince = ""
		err := ex.do(ctx, act, r)
		if err == nil && act.kind == actEnsureDead {
			// Dead, by the controller's word: nothing is left to decide,
			// whatever the watches say yet.
			return a.exitDead(ctx, false)
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			// The controller refused or could not be reached: look again
			// after a pause rather than spin.
			a.logger.Warn("step failed; trying again", "step", act.String(), "error", err)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-w.changed:
			case <-time.After(time.Second):
			}
		}
	}
}

// exitDead ends the agent of a dead unit, forced out or not. No status
// says so: the unit's life does, and its statuses go with it when it is
// removed, moments later; only the reports worth keeping that are not sent
// yet (a hook's output, an error) are waited for, briefly.
func (a *Agent) exitDead(ctx context.Context, forced bool) error {
	if forced {
		a.logger.Info("unit was forced out: the agent stops")
	} else {
		a.logger.Info("unit is dead: the agent's work is done")
	}
	a.rep.flushKept(ctx)
	if forced {
		return ErrForcedOut
	}
	return ErrDead
}

// tornDown says whether the unit's way out is done on this host: its
// remove hook ran (after stop), or no hook ever ran for it.
func (a *Agent) tornDown() bool {
	return a.l.Removed || (a.l.State == StateNew && a.l.Op == nil)
}

// subsTold says whether subs are the subordinates last told the deployer.
func (a *Agent) subsTold(subs map[string]*pb.Unit) bool {
	if a.toldSubs == nil || len(subs) != len(a.toldSubs) {
		return false
	}
	for _, name := range a.toldSubs {
		if _, ok := subs[name]; !ok {
			return false
		}
	}
	return true
}

// reportWaiting reports the agent idle, or in error: in an error state,
// or waiting to run a failed hook again. Either way it says which barrier
// it is synced to.
func (a *Agent) reportWaiting(act action) {
	op := a.l.Op
	var st *pb.Status
	switch {
	case op != nil && (a.l.inError() || a.l.retrying()):
		if op != a.failedOp {
			// Failed before the agent started again: said once, not
			// with a new pause at each look.
			a.failed, a.failedOp = a.failureStatus(op, nil), op
		}
		st = proto.Clone(a.failed).(*pb.Status)
	default:
		st = &pb.Status{Status: "idle", Data: map[string]string{"state": a.l.State}}
		if w := a.missingTools; w != "" {
			st.Message = "warning: " + w
		}
	}
	st.SyncedRevision = a.synced
	a.rep.set(st)
}

// failureStatus is the agent's status once op failed (hookFailed): error,
// with when it runs again, or that the unit is in its error state; the
// hook's last lines of output, if any.
func (a *Agent) failureStatus(op *hookOp, output []string) *pb.Status {
	msg := fmt.Sprintf("hook failed: %q", op.Hook)
	if op.StartFailure != "" {
		msg = op.StartFailure
	}
	if isHostOp(op) {
		msg = hostFailureMessage(op)
	}
	if !a.l.inError() {
		in := max(op.NotBefore.Sub(a.cfg.Clock()), 0).Round(time.Second)
		msg += fmt.Sprintf(" (retry %d of %d in %s)", op.Attempts+1, a.cfg.Retry.Attempts, in)
	}
	st := &pb.Status{Status: "error", Message: msg, Data: map[string]string{"state": a.l.State}, SyncedRevision: a.synced}
	if len(output) > 0 {
		st.Data["output"] = strings.Join(output, "\n")
	}
	return st
}

// deploySubordinates tells the deployer this principal's subordinates,
// when they changed (a subordinate has none to tell), and has it run the
// agents of the living ones.
func (a *Agent) deploySubordinates(r *modelView) {
	if a.cfg.Deployer == nil {
		return
	}
	if r.subsKnown && r.unit != nil && r.unit.Principal == "" && !a.subsTold(r.subs) {
		told := make([]string, 0, len(r.subs))
		for name := range r.subs {
			told = append(told, name)
		}
		sort.Strings(told)
		a.cfg.Deployer.Subordinates(told)
		a.toldSubs = told
	}
	for name, u := range r.subs {
		if u != nil && u.Life != pb.Life_LIFE_DEAD {
			if err := a.cfg.Deployer.Deploy(name); err != nil {
				a.logger.Warn("cannot deploy subordinate", "subordinate", name, "error", err)
			}
		}
	}
}
