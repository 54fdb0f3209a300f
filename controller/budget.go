package controller

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lifelinehq/lifeline/internal/names"
	"github.com/lifelinehq/lifeline/state"
)

// Budgets bound what each agent credential may write: the calls that
// write, a second, and the bytes they write to etcd, a minute. Every
// version etcd keeps of a key until the next compaction takes space in
// its database, whose quota, once full, stops every write of the model;
// one unit's agent rewriting its relation settings as fast as it could
// filled 2 GiB in 80 s. A call over its credential's budget is answered
// ResourceExhausted with a sentence, and does nothing; the agent tries
// again later, as after any refusal.
//
// A machine agent sends its units' status reports and removals together,
// one call at a time, so an honest credential writes a few calls a second
// at most; the defaults leave ample room above what the scale harness's
// agents write (docs/PERFORMANCE.md).
type Budgets struct {
	// Writes is how many calls that write a credential may make a second
	// on average, and Burst how many at once; DefaultAgentWrites and
	// DefaultAgentBurst when zero, no limit when Writes is negative.
	Writes float64
	Burst  int
	// Bytes is how many bytes a credential's calls may write to etcd a
	// minute (the keys and values of its puts: state.Metered), at most a
	// minute's worth at once; DefaultAgentBytes when zero, no limit when
	// negative.
	Bytes int64
}

// The default budgets of an agent credential. On the scale harness (ten
// units a machine, 1,000 of them deployed and destroyed) no credential
// used more than 5 of its burst, nor 100 KiB of its bytes in a minute;
// the room above is for charms whose hooks set relation settings each
// time one of thousands of related units changes.
const (
	DefaultAgentWrites = 50
	DefaultAgentBurst  = 500
	DefaultAgentBytes  = 4 << 20
)

func (b Budgets) withDefaults() Budgets {
	if b.Writes == 0 {
		b.Writes = DefaultAgentWrites
	}
	if b.Burst <= 0 {
		b.Burst = DefaultAgentBurst
	}
	if b.Bytes == 0 {
		b.Bytes = DefaultAgentBytes
	}
	return b
}

// callKind is what a method does to the model.
type callKind int

const (
	// callRead writes nothing.
	callRead callKind = iota
	// callGrow may add to the model: refused while the storage is tight.
	callGrow
	// callKeep shrinks the model, or writes a little to keep it as it is
	// (presence, a resolved mark): taken while the storage is tight, so
	// that a model can be destroyed out of trouble.
	callKeep
)

// callKinds says what each method of the API does. A method missing here
// counts as callGrow (TestEveryMethodHasAKind).
var callKinds = map[string]callKind{
	"/lifeline.v1.AgentService/Watch":                callRead,
	"/lifeline.v1.AgentService/WatchMany":            callRead,
	"/lifeline.v1.AgentService/GetMachine":           callRead,
	"/lifeline.v1.AgentService/EnsureMachineDead":    callKeep,
	"/lifeline.v1.AgentService/SetMachineStatus":     callGrow,
	"/lifeline.v1.AgentService/IssueUnitCredentials": callGrow,
	"/lifeline.v1.AgentService/GetUnit":              callRead,
	"/lifeline.v1.AgentService/UnitScopes":           callRead,
	"/lifeline.v1.AgentService/RemoveUnit":           callKeep,
	"/lifeline.v1.AgentService/RemoveUnits":          callKeep,
	"/lifeline.v1.AgentService/GetService":           callRead,
	"/lifeline.v1.AgentService/DownloadCharm":        callRead,
	"/lifeline.v1.AgentService/SetUnitDying":         callKeep,
	"/lifeline.v1.AgentService/EnsureUnitDead":       callKeep,
	"/lifeline.v1.AgentService/AddSubordinate":       callGrow,
	"/lifeline.v1.AgentService/EnterScope":           callGrow,
	"/lifeline.v1.AgentService/LeaveScope":           callKeep,
	"/lifeline.v1.AgentService/ReadSettings":         callRead,
	"/lifeline.v1.AgentService/UpdateSettings":       callGrow,
	"/lifeline.v1.AgentService/SetUnitStatus":        callGrow,
	"/lifeline.v1.AgentService/SetUnitStatuses":      callGrow,
	"/lifeline.v1.AgentService/ClearResolved":        callKeep,
	"/lifeline.v1.AgentService/Presence":             callKeep,
	"/lifeline.v1.AgentService/GetAgentSettings":     callRead,
	// A unit's revisions: reading the spec it is to run, and reporting
	// that it runs it (one key rewritten, which frees its permit to be
	// released: taken while the storage is tight, or a rollout would
	// stall there).
	"/lifeline.v1.AgentService/GetRevision":     callRead,
	"/lifeline.v1.AgentService/SetUnitRevision": callKeep,
	// A unit's host report: one bounded record a unit, replaced by each
	// report (the agent sends one every few seconds at most).
	"/lifeline.v1.AgentService/SetHostReport": callGrow,
	// The tasks of operations: a task's record, checkpoint and log
	// chunks are bounded (state's limits, the log trimmed as it grows);
	// ending or stopping one shrinks what is open.
	"/lifeline.v1.AgentService/StartTask":      callKeep,
	"/lifeline.v1.AgentService/FinishTask":     callKeep,
	"/lifeline.v1.AgentService/ReportTaskLost": callKeep,
	"/lifeline.v1.AgentService/StopUnitTasks":  callKeep,
	"/lifeline.v1.AgentService/TaskHeartbeat":  callKeep,
	"/lifeline.v1.AgentService/SetCheckpoint":  callGrow,
	"/lifeline.v1.AgentService/GetCheckpoint":  callRead,
	"/lifeline.v1.AgentService/AppendTaskLog":  callGrow,
	"/lifeline.v1.OperatorService/TaskLogs":    callRead,
	// Log lines go to the controller's memory, not to etcd: each call
	// counts against the machine's calls (its shipper makes one call at a
	// time, about ten a second at most), and the ring bounds the
	// machine's share of memory (logring.go).
	"/lifeline.v1.AgentService/ShipLogs": callKeep,
	// Leadership: reading it, and the leader's writes of its settings
	// (one record a service, bounded by state.MaxLeaderSettingsBytes).
	"/lifeline.v1.AgentService/GetLeadership":     callRead,
	"/lifeline.v1.AgentService/SetLeaderSettings": callGrow,
	"/lifeline.v1.OperatorService/DebugLog":       callRead,

	"/lifeline.v1.OperatorService/Status":          callRead,
	"/lifeline.v1.OperatorService/WatchStatus":     callRead,
	"/lifeline.v1.OperatorService/UploadCharm":     callGrow,
	"/lifeline.v1.OperatorService/Deploy":          callGrow,
	"/lifeline.v1.OperatorService/AddUnits":        callGrow,
	"/lifeline.v1.OperatorService/AddMachines":     callGrow,
	"/lifeline.v1.OperatorService/AddRelation":     callGrow,
	"/lifeline.v1.OperatorService/DestroyRelation": callKeep,
	"/lifeline.v1.OperatorService/DestroyUnit":     callKeep,
	"/lifeline.v1.OperatorService/DestroyMachine":  callKeep,
	"/lifeline.v1.OperatorService/DestroyMachines": callKeep,
	"/lifeline.v1.OperatorService/DestroyService":  callKeep,
	"/lifeline.v1.OperatorService/Resolved":        callKeep,
	"/lifeline.v1.OperatorService/GetConfig":       callRead,
	"/lifeline.v1.OperatorService/SetConfig":       callGrow,
	"/lifeline.v1.OperatorService/ShowStatusLog":   callRead,
	"/lifeline.v1.OperatorService/ShowUnit":        callRead,
	"/lifeline.v1.OperatorService/ShowMachine":     callRead,
	"/lifeline.v1.OperatorService/AddController":   callGrow,
	"/lifeline.v1.OperatorService/IssueJoinToken":  callGrow,
	// One key rewritten, for ctl wait (after a destroy too).
	"/lifeline.v1.OperatorService/Barrier": callKeep,
	// The users: at most state.MaxUsers of them. A removal, a role or a
	// credential replaced keeps the model as it is.
	"/lifeline.v1.OperatorService/ListUsers":        callRead,
	"/lifeline.v1.OperatorService/WhoAmI":           callRead,
	"/lifeline.v1.OperatorService/Version":          callRead,
	"/lifeline.v1.OperatorService/Audit":            callRead,
	"/lifeline.v1.OperatorService/AddUser":          callGrow,
	"/lifeline.v1.OperatorService/RemoveUser":       callKeep,
	"/lifeline.v1.OperatorService/SetUserRole":      callKeep,
	"/lifeline.v1.OperatorService/RotateCredential": callKeep,
	// Operations: making one (and executing it, resuming its tasks)
	// adds tasks; deciding on one, pausing or stopping its tasks keeps
	// the model as it is.
	"/lifeline.v1.OperatorService/ListActions":      callRead,
	"/lifeline.v1.OperatorService/ListOperations":   callRead,
	"/lifeline.v1.OperatorService/ShowOperation":    callRead,
	"/lifeline.v1.OperatorService/ShowTask":         callRead,
	"/lifeline.v1.OperatorService/RunAction":        callGrow,
	"/lifeline.v1.OperatorService/ApproveOperation": callKeep,
	"/lifeline.v1.OperatorService/RejectOperation":  callKeep,
	"/lifeline.v1.OperatorService/ExecuteOperation": callGrow,
	"/lifeline.v1.OperatorService/PauseTasks":       callKeep,
	"/lifeline.v1.OperatorService/ResumeTasks":      callGrow,
	"/lifeline.v1.OperatorService/StopTasks":        callKeep,
	// Revisions: a rollback writes a revision (the oldest beyond the
	// history pruned), as SetConfig does.
	"/lifeline.v1.OperatorService/ListRevisions":   callRead,
	"/lifeline.v1.OperatorService/ShowRevision":    callRead,
	"/lifeline.v1.OperatorService/RollbackService": callGrow,
	"/lifeline.v1.OperatorService/RefreshService":  callGrow,
	// Rollouts: a policy is one record a service; the verbs rewrite the
	// rollout's record, and an abort writes a revision within the
	// history's bound: taken while the storage is tight, as stopping a
	// bad rollout is how an operator gets out of trouble.
	"/lifeline.v1.OperatorService/GetRolloutPolicy": callRead,
	"/lifeline.v1.OperatorService/RolloutStatus":    callRead,
	"/lifeline.v1.OperatorService/SetRolloutPolicy": callGrow,
	"/lifeline.v1.OperatorService/PauseRollout":     callKeep,
	"/lifeline.v1.OperatorService/ResumeRollout":    callKeep,
	"/lifeline.v1.OperatorService/PromoteRollout":   callKeep,
	"/lifeline.v1.OperatorService/AbortRollout":     callKeep,
	// A dashboard login link: one leased record, bounded a user.
	"/lifeline.v1.OperatorService/DashboardLogin": callGrow,
	// Manifests: a claim writes two small records an entity, bounded per
	// manifest.
	"/lifeline.v1.OperatorService/ClaimOwnership": callGrow,
	// Made without a credential (the join token, or the registration's
	// one-time secret, is the proof), all such calls on one budget.
	"/lifeline.v1.MachineJoinService/JoinMachine":       callGrow,
	"/lifeline.v1.ControllerJoinService/JoinController": callGrow,
	"/lifeline.v1.RegistrationService/GetCA":            callRead,
	"/lifeline.v1.RegistrationService/Register":         callGrow,
	// The health service: answered from memory, on its own budget
	// (health.go).
	"/grpc.health.v1.Health/Check": callRead,
	"/grpc.health.v1.Health/List":  callRead,
	"/grpc.health.v1.Health/Watch": callRead,
}

func kindOf(method string) callKind {
	if k, ok := callKinds[method]; ok {
		return k
	}
	return callGrow
}

// budgetUnary admits an authenticated unary call by its caller's budget
// and the storage, and meters what it writes. It runs after
// unaryInterceptor, which put the caller in ctx.
func (s *Server) budgetUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	kind := kindOf(info.FullMethod)
	if kind == callRead {
		return handler(ctx, req)
	}
	c := callerFrom(ctx)
	if err := s.admitStorage(c, kind); err != nil {
		return nil, err
	}
	b, err := s.budgets.admit(c, time.Now())
	if err != nil {
		s.limits.refused(budgetName(err))
		return nil, err
	}
	if b == nil {
		return handler(ctx, req)
	}
	var n atomic.Int64
	resp, err := handler(state.Metered(ctx, &n), req)
	b.charge(n.Load())
	return resp, err
}

// budgetStream is budgetUnary for streams: a stream that writes (an
// agent's presence, an operator's charm upload) counts as one call when it
// opens, and is metered while it lives.
func (s *Server) budgetStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	kind := kindOf(info.FullMethod)
	if kind == callRead {
		return handler(srv, ss)
	}
	c := callerFrom(ss.Context())
	if err := s.admitStorage(c, kind); err != nil {
		return err
	}
	b, err := s.budgets.admit(c, time.Now())
	if err != nil {
		s.limits.refused(budgetName(err))
		return err
	}
	if b == nil {
		return handler(srv, ss)
	}
	var n atomic.Int64
	err = handler(srv, &authedStream{ServerStream: ss, ctx: state.Metered(ss.Context(), &n)})
	b.charge(n.Load())
	return err
}

// budgetBook keeps each agent credential's budget.
type budgetBook struct {
	b      Budgets
	logger hclog.Logger

	mu    sync.Mutex
	byTag map[string]*bucket
	swept time.Time
}

// bucket is one credential's budget: tokens for calls and for bytes,
// filled as time passes up to their bursts. Bytes are charged once a call
// has written them, and may go below zero: the credential then waits
// until the debt is paid.
type bucket struct {
	mu     sync.Mutex
	writes float64
	bytes  float64
	at     time.Time
	// warned is when a refusal was last logged.
	warned time.Time
	b      *Budgets
	// owner begins its refusals: "machine 3's agent is over its".
	owner string
}

func newBudgetBook(b Budgets, logger hclog.Logger) *budgetBook {
	return &budgetBook{b: b.withDefaults(), logger: logger, byTag: map[string]*bucket{}}
}

// sweepEvery is how often the book forgets the credentials that have not
// written for long enough to have full budgets again.
const sweepEvery = time.Minute

// admit takes one call from c's budget, or says why it cannot. Users
// (operators) have no budget (nil, nil); nor has anyone when both budgets
// are off. The callers without a credential (a machine's host or a
// controller joining with a token) share one budget: whoever reaches the
// port can make such calls, and each costs a read of etcd before its
// token is known to be good.
func (k *budgetBook) admit(c caller, now time.Time) (*bucket, error) {
	if c.kind == names.KindUser || (k.b.Writes < 0 && k.b.Bytes < 0) {
		return nil, nil
	}
	// tag is "" for the callers without a credential, whose shared
	// budget says so in its refusals.
	tag, owner := "", "the calls made without a credential (joins) are over their"
	switch c.kind {
	case names.KindMachine:
		tag, owner = names.MachineTag(c.id), c.String()+" is over its"
	case names.KindUnit:
		tag, owner = names.UnitTag(c.id), c.String()+" is over its"
	}
	k.mu.Lock()
	if now.Sub(k.swept) > sweepEvery {
		k.sweep(now)
	}
	b := k.byTag[tag]
	if b == nil {
		b = &bucket{writes: float64(k.b.Burst), bytes: float64(k.b.Bytes), at: now, b: &k.b, owner: owner}
		k.byTag[tag] = b
	}
	k.mu.Unlock()
	return b, b.take(now, k.logger)
}

// sweep forgets the buckets that are full again. Under k.mu.
func (k *budgetBook) sweep(now time.Time) {
	k.swept = now
	for tag, b := range k.byTag {
		b.mu.Lock()
		b.refill(now)
		full := (k.b.Writes < 0 || b.writes >= float64(k.b.Burst)) && (k.b.Bytes < 0 || b.bytes >= float64(k.b.Bytes))
		b.mu.Unlock()
		if full {
			delete(k.byTag, tag)
		}
	}
}

// refill adds the tokens earned since b.at. Under b.mu.
func (b *bucket) refill(now time.Time) {
	dt := now.Sub(b.at).Seconds()
	if dt <= 0 {
		return
	}
	b.at = now
	if b.b.Writes > 0 {
		b.writes = min(b.writes+dt*b.b.Writes, float64(b.b.Burst))
	}
	if b.b.Bytes > 0 {
		b.bytes = min(b.bytes+dt*float64(b.b.Bytes)/60, float64(b.b.Bytes))
	}
}

// take takes one call's token, or refuses the call with a sentence.
func (b *bucket) take(now time.Time, logger hclog.Logger) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(now)
	who := b.owner
	var err error
	switch {
	case b.b.Writes > 0 && b.writes < 1:
		err = &budgetError{what: "writes", msg: fmt.Sprintf("%s budget of %g writes a second (%d at once): try again in a moment",
			who, b.b.Writes, b.b.Burst)}
	case b.b.Bytes > 0 && b.bytes < 0:
		wait := time.Duration(-b.bytes / (float64(b.b.Bytes) / 60) * float64(time.Second)).Round(time.Second)
		err = &budgetError{what: "bytes", msg: fmt.Sprintf("%s budget of %s written a minute: try again in %s",
			who, sizeOf(b.b.Bytes), max(wait, time.Second))}
	}
	if err != nil {
		if now.Sub(b.warned) > time.Minute {
			b.warned = now
			logger.Warn("writes refused for now: over a write budget", "refusal", err.Error())
		}
		return err
	}
	if b.b.Writes > 0 {
		b.writes--
	}
	return nil
}

// charge takes the bytes a call wrote from its credential's budget.
func (b *bucket) charge(n int64) {
	if n == 0 || b.b.Bytes <= 0 {
		return
	}
	b.mu.Lock()
	b.bytes -= float64(n)
	b.mu.Unlock()
}

// budgetError is a refusal for a budget: ResourceExhausted, saying which.
type budgetError struct {
	what string // "writes" or "bytes"
	msg  string
}

func (e *budgetError) Error() string { return e.msg }

func (e *budgetError) GRPCStatus() *status.Status {
	return status.New(codes.ResourceExhausted, e.msg)
}

// budgetName is the metric label of a budget's refusal.
func budgetName(err error) string {
	if be, ok := err.(*budgetError); ok {
		return be.what
	}
	return "writes"
}
