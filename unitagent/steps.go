package unitagent

import (
	"context"
	"fmt"
)

// The unit agent's step protocol. Every step the resolver decides goes the
// same way: before it (ready), what the step's class says must be durable
// first is synced, and the departures held for the death call are sent if
// it acts where another unit may see it; then the step is prepared (a mark
// that it is under way, recorded before it acts), executed, and committed
// (its result recorded). How far each of these is recorded is not decided
// step by step but looked up by the step's kind in stepClasses, below. A
// hook (or host job) is the one step whose phases are spread over its run
// (runHook, runHostJob: a lock to take, a hook the charm may lack), and it
// too records each phase as its row says. docs/DESIGN.md, The unit agent,
// says what each class guarantees across a crash.

// durability is how far a change of the local state is recorded when a
// step's phase ends: what a crash after that point keeps.
type durability int

const (
	// commitNone records nothing: the phase changed nothing the local
	// state keeps (a call the controller answers the same way twice).
	commitNone durability = iota
	// commitLazy keeps the change in memory, written with the next record
	// (or by a barrier, below): a crash of the agent loses it, and the
	// step is done again, at no cost that matters.
	commitLazy
	// commitWritten writes a record without syncing it: it survives a
	// crash of the agent, and is synced before the agent next acts
	// outside its hooks (barrierSync). A crash of the machine may lose
	// it: only a hook's end is so recorded, and the hook then counts as
	// interrupted, a failed attempt, and runs again. It spares one fsync
	// a hook.
	commitWritten
	// commitSynced writes a record and syncs it (and every record written
	// before it) before the agent goes on: it survives a crash of the
	// machine.
	commitSynced
)

// barrier is what is made durable before a step acts.
type barrier int

const (
	// barrierNone makes nothing durable first: the step syncs its own
	// mark before it acts (a hook, a host job: commitSynced).
	barrierNone barrier = iota
	// barrierSync syncs a record written unsynced (commitWritten), if
	// any, with what was left in memory (commitLazy) in the same synced
	// record: once the unit acted on a hook's end, the hook is never run
	// again. What was left in memory alone stays there.
	barrierSync
	// barrierSettle is barrierSync for an agent about to wait; with
	// nothing to sync, what was left in memory is written (unsynced) if it
	// holds more than settleChanges members' changes, so that what an
	// agent holds in memory alone stays bounded.
	barrierSettle
)

// departures says what becomes of the departures a dying unit holds for
// the call that sets it dead to carry (Agent.leaving).
type departures int

const (
	// departKept keeps them: the step carries them (setting the unit
	// dead), adds to them (leaving a scope), exits, or is a host job,
	// which no other unit sees.
	departKept departures = iota
	// departFirst sends them, each on its own, before the step acts:
	// another unit may see what it does.
	departFirst
	// departBeforeRun sends them before a hook runs, but not for a hook
	// the charm lacks, which does nothing.
	departBeforeRun
)

// stepClass is how one kind of step becomes durable.
type stepClass struct {
	before     barrier
	departures departures
	// prepared records the step's mark that it is under way, made just
	// before it acts: a hook marked running (a crash then counts the run
	// as a failed attempt), a scope marked entering (so marked, the unit
	// leaves the scope of a dying relation whatever became of the call).
	prepared durability
	// executed records what a hook did that is not yet committed: the
	// relation settings it set, kept until the controller has them.
	executed durability
	// done records the step's result once committed; idle, instead, when
	// it did nothing outside the agent (a hook the charm lacks, a host job
	// with no task and no change of claims); failed, when it failed as a
	// hook fails (to be retried, or the unit in error until resolved).
	done, idle, failed durability
}

// stepClasses is the step protocol's table: how each kind of step becomes
// durable. A step that the agent can do again after a crash at no cost
// (read a spec, download a charm, enter or leave a scope, record a
// revision that config-changed already ran for) commits lazily; one that
// changes what the unit is in a way the resolver could not decide again
// (a hook's end, a resolved failure, a subordinate added, a move given
// up) commits a record; a call whose repetition does nothing (reports,
// dying, dead) records nothing.
var stepClasses = map[actionKind]stepClass{
	actWait:       {before: barrierSettle, departures: departFirst, done: commitNone},
	actExit:       {before: barrierSync, departures: departKept, done: commitNone},
	actDownload:   {before: barrierSync, departures: departFirst, done: commitLazy},
	actFetchSpec:  {before: barrierSync, departures: departFirst, done: commitLazy},
	actDropMove:   {before: barrierSync, departures: departFirst, done: commitSynced},
	actRecord:     {before: barrierSync, departures: departFirst, done: commitLazy},
	actReport:     {before: barrierSync, departures: departFirst, done: commitNone},
	actResolve:    {before: barrierSync, departures: departFirst, done: commitSynced},
	actSetDying:   {before: barrierSync, departures: departFirst, done: commitNone},
	actSubDying:   {before: barrierSync, departures: departFirst, done: commitNone},
	actEnterScope: {before: barrierSync, departures: departFirst, done: commitLazy, prepared: commitLazy},
	actLeaveScope: {before: barrierSync, departures: departKept, done: commitLazy},
	actAddSub:     {before: barrierSync, departures: departFirst, done: commitSynced},
	actRemoveSub:  {before: barrierSync, departures: departFirst, done: commitNone},
	actEnsureDead: {before: barrierSync, departures: departKept, done: commitNone},
	actHook: {before: barrierNone, departures: departBeforeRun, done: commitWritten,
		prepared: commitSynced, executed: commitSynced, idle: commitLazy, failed: commitSynced},
	actHostJob: {before: barrierNone, departures: departKept, done: commitSynced,
		prepared: commitSynced, idle: commitLazy, failed: commitSynced},
}

// classOf returns the class of the step act, for a unit whose hook
// operation in progress, if any, is op: a hook operation is a host job's
// when op is one (claims.go).
func classOf(act action, op *hookOp) stepClass {
	if act.kind == actHook && act.op != nil {
		op = act.op
	}
	if act.kind == actHook && op != nil && isHostOp(op) {
		return stepClasses[actHostJob]
	}
	return stepClasses[act.kind]
}

// record records the local state as d says.
func (a *Agent) record(d durability) error { return a.store.commit(a.l, d) }

// ready does what the step's class says comes before the step: its
// barrier, then the departures held for the death call, if it sends them
// first (a hook sends its own, as it runs).
func (ex *executor) ready(ctx context.Context, act action) error {
	a := ex.a
	c := classOf(act, a.l.Op)
	if err := a.store.sync(c.before); err != nil {
		return fmt.Errorf("sync the unit's state: %w", err)
	}
	if c.departures != departFirst {
		return nil
	}
	if err := ex.leaveNow(ctx); err != nil {
		return fmt.Errorf("leave a relation's scope: %w", err)
	}
	return nil
}

// do prepares, executes and commits the step act, once ready. A hook
// operation takes its phases itself (runHook); any other step is executed,
// marking itself prepared if it has a mark, and once it succeeds its
// result is committed as its class says. A step that fails commits
// nothing: the resolver decides again.
func (ex *executor) do(ctx context.Context, act action, r *modelView) error {
	a := ex.a
	if act.kind == actHook {
		if act.op != nil {
			// Not recorded yet: until it runs, a new hook records
			// nothing the resolver would not decide again after a crash.
			a.l.Op = act.op
		}
		return ex.runHook(ctx, r)
	}
	c := classOf(act, a.l.Op)
	if err := ex.execute(ctx, act, c, r); err != nil {
		return err
	}
	return a.record(c.done)
}
