package unitagent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lifelinehq/lifeline/hooks"
	"github.com/lifelinehq/lifeline/internal/charm"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// executor carries out the resolver's decisions, recording each result in
// the local state before the next decision is taken.
type executor struct {
	a     *Agent
	tools *toolServer
	w     *watcher
	// pre is the read of a member's settings under way, if any
	// (prefetchFor): its goroutine is the executor's, ended by
	// endPrefetch.
	pre *prefetch
}

// execute carries out a step other than a hook operation (do): what it
// changes in the local state its class commits once it returns nil.
func (ex *executor) execute(ctx context.Context, act action, c stepClass, r *modelView) error {
	a := ex.a
	// A call's bound, made only for an action that calls: a hook the
	// charm lacks (most of a charm without hooks' actions) needs no timer.
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	switch act.kind {
	case actDownload:
		return ex.download(cctx, a.l.Spec.decoded().GetCharm())
	case actFetchSpec:
		return ex.fetchSpec(cctx, act.revision, act.adopt)
	case actDropMove:
		return ex.dropMove(cctx, r)
	case actRecord:
		// Lost to a crash, the revision is recorded again: config-changed
		// ran for it, and reporting it twice does nothing.
		a.l.Revision = a.l.Spec.Revision
		a.logger.Info("revision applied", "revision", a.l.Revision)
		return nil
	case actReport:
		_, err := a.cfg.API.SetUnitRevision(cctx, &pb.SetUnitRevisionRequest{Unit: a.cfg.Unit, Revision: a.l.Revision})
		if status.Code(err) == codes.FailedPrecondition || status.Code(err) == codes.NotFound {
			// The target moved on meanwhile (or the unit is gone): the
			// watch brings the news, and the agent looks again.
			a.logger.Info("revision report refused: looking again", "revision", a.l.Revision, "error", err)
			return nil
		}
		return err
	case actResolve:
		return ex.resolve(cctx, r.resolved)
	case actSetDying:
		a.logger.Info("setting the unit dying")
		_, err := a.cfg.API.SetUnitDying(cctx, &pb.SetUnitDyingRequest{Unit: a.cfg.Unit})
		return err
	case actSubDying:
		a.logger.Info("setting subordinate dying", "subordinate", act.unit)
		_, err := a.cfg.API.SetUnitDying(cctx, &pb.SetUnitDyingRequest{Unit: act.unit})
		return ignoreCode(err, codes.NotFound)
	case actEnterScope:
		// Marked, so that whatever becomes of the call a unit that may
		// be in the scope leaves it when the relation dies; the mark, and
		// the answer, are committed lazily. Lost to a crash, the agent
		// asks the controller which scopes its unit is in as it starts
		// again (checkScopes).
		lr := a.l.Relations[act.relation]
		lr.Entering = true
		if err := a.record(c.prepared); err != nil {
			return err
		}
		settings := map[string]string{"private-address": a.cfg.Address}
		_, err := a.cfg.API.EnterScope(cctx, &pb.EnterScopeRequest{Relation: act.relation, Unit: a.cfg.Unit, Settings: settings})
		if err != nil {
			return err
		}
		lr.InScope, lr.Entering = true, false
		if lr.own == nil {
			return a.keepOwn(act.relation, settings)
		}
		return nil
	case actLeaveScope:
		if err := ex.leaving(cctx, act.relation); err != nil {
			return err
		}
		if r.unit != nil && r.unit.Life != pb.Life_LIFE_ALIVE && len(a.leaving) < maxCarriedLeaves {
			// The unit is dying: the call that sets it dead carries the
			// departure, unless something comes first (Agent.leaving).
			a.leaving = append(a.leaving, act.relation)
		} else if _, err := a.cfg.API.LeaveScope(cctx, &pb.LeaveScopeRequest{Relation: act.relation, Unit: a.cfg.Unit}); err != nil {
			return err
		}
		// Lost to a crash, the agent leaves again, which does nothing:
		// every agent that starts over files it did not make asks which
		// scopes its unit is in (checkScopes), a departure it had left
		// for later included.
		lr := a.l.Relations[act.relation]
		lr.InScope, lr.Entering, lr.Left = false, false, true
		return nil
	case actAddSub:
		resp, err := a.cfg.API.AddSubordinate(cctx, &pb.AddSubordinateRequest{Principal: a.cfg.Unit, Service: act.unit})
		if status.Code(err) == codes.FailedPrecondition {
			// Refused by a rule (its host claims conflict with a unit's
			// of the machine, say): asked for again a while on, the
			// unit's other hooks running meanwhile, the refusal in its
			// host report. Committed as a success is.
			a.logger.Warn("subordinate refused: asking again later", "service", act.unit, "in", subRefusedFor, "error", status.Convert(err).Message())
			if a.l.SubordinatesRefused == nil {
				a.l.SubordinatesRefused = map[int64]time.Time{}
			}
			a.l.SubordinatesRefused[act.relation] = a.cfg.Clock().Add(subRefusedFor)
			if a.l.Host == nil {
				a.l.Host = &hostState{}
			}
			a.l.Host.Conflicts = []string{status.Convert(err).Message()}
			return nil
		}
		if err != nil {
			return err
		}
		a.logger.Info("subordinate added", "subordinate", resp.Unit.Name)
		a.l.AddedSubordinates[act.relation] = resp.Unit.Name
		if h := a.l.Host; h != nil && len(h.Conflicts) == 1 && strings.HasPrefix(h.Conflicts[0], "cannot place") {
			h.Conflicts = nil // the refusal reported is over
		}
		return nil
	case actRemoveSub:
		if d := a.cfg.Deployer; d != nil {
			if err := d.Recall(act.unit); err != nil {
				return fmt.Errorf("recall subordinate %s: %w", act.unit, err)
			}
		}
		_, err := a.cfg.API.RemoveUnit(cctx, &pb.RemoveUnitRequest{Unit: act.unit})
		if err == nil {
			a.logger.Info("subordinate removed", "subordinate", act.unit)
		}
		return ignoreCode(err, codes.NotFound)
	case actEnsureDead:
		a.logger.Info("setting the unit dead")
		_, err := a.cfg.API.EnsureUnitDead(cctx, &pb.EnsureUnitDeadRequest{Unit: a.cfg.Unit, LeaveScopes: a.leaving})
		if err == nil {
			a.leaving = nil
			return nil
		}
		// Refused (or not answered): the departures go on their own
		// before the next try, which carries none.
		if lerr := ex.leaveNow(ctx); lerr != nil {
			return lerr
		}
		return err
	}
	return fmt.Errorf("unknown action %v", act)
}

// subRefusedFor is how long a subordinate the controller refused waits
// before its principal's agent asks again.
const subRefusedFor = time.Minute

// maxCarriedLeaves is the most departures one EnsureUnitDead call carries
// (the controller's bound): beyond them, each goes in a call of its own.
const maxCarriedLeaves = 256

// leaveNow leaves, each in a call of its own, the scopes the agent left
// for its death call to carry (Agent.leaving).
func (ex *executor) leaveNow(ctx context.Context) error {
	a := ex.a
	for len(a.leaving) > 0 {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := a.cfg.API.LeaveScope(cctx, &pb.LeaveScopeRequest{Relation: a.leaving[0], Unit: a.cfg.Unit})
		cancel()
		if err != nil {
			return err
		}
		a.leaving = a.leaving[1:]
	}
	a.leaving = nil
	return nil
}

func ignoreCode(err error, c codes.Code) error {
	if status.Code(err) == c {
		return nil
	}
	return err
}

// runHook takes the hook in progress through its phases, each recorded
// as the hook's row of stepClasses says: prepared (marked running, synced,
// before it starts, so that a crash during the hook counts against it);
// executed, when it set relation settings (kept, synced, until
// committed); done, once the settings are committed and the state machine
// has moved on (written, synced before the agent acts outside its hooks);
// idle when the charm has no such hook; failed. A crash between the hook's
// end and the sync of its record counts as a crash during the hook, a
// failed attempt.
func (ex *executor) runHook(ctx context.Context, r *modelView) error {
	a := ex.a
	op := a.l.Op
	if isHostOp(op) {
		return ex.runHostJob(ctx)
	}
	c := stepClasses[actHook]
	if op.Step == stepDone {
		return ex.commit(ctx, op, c.done)
	}
	seen, values, err := ex.deliver(ctx, op, r)
	if err != nil {
		return err
	}
	pre := ex.prefetchFor(ctx, op, r)
	if !a.hasHook(op.Hook) {
		// Nothing to run (the charm has no such hook): done at once,
		// without the machine's hook lock and without a status report.
		op.Step, op.Settings, op.Seen = stepDone, nil, seen
		return ex.commit(ctx, op, c.idle)
	}
	// A hook runs: another unit may see what it does, so the departures
	// left for the death call go first (departBeforeRun).
	if err := ex.leaveNow(ctx); err != nil {
		return err
	}
	executing := func(msg string) {
		a.rep.progress(&pb.Status{Status: "executing", Message: msg, Data: map[string]string{"state": a.l.State}, SyncedRevision: a.synced})
	}
	select {
	case a.cfg.HookLock <- struct{}{}:
	default:
		// Queued behind another unit's hook: executing all the same.
		executing(fmt.Sprintf("waiting to run %s hook", op.Hook))
		select {
		case a.cfg.HookLock <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	defer func() { <-a.cfg.HookLock }()
	op.Step = stepRunning
	if err := a.record(c.prepared); err != nil {
		return err
	}
	executing(fmt.Sprintf("running %s hook", op.Hook))
	hc := newHookContext(a, op, r)
	if values != nil {
		hc.preset(op.Relation, op.Remote, values)
	}
	hc.pre = pre
	res, err := ex.tools.run(ctx, a, op, hc)
	a.hookNames, a.hookEach = nil, true
	a.rep.progressEnded()
	if ctx.Err() != nil {
		// The agent is stopping: the hook was cut short. Like a crash, it
		// counts as a failed attempt when the agent starts again.
		return ctx.Err()
	}
	a.noteMissingTools(op.Hook, res.missing)
	op.StartFailure = ""
	if se := (*hooks.StartError)(nil); errors.As(err, &se) {
		op.StartFailure = se.Error()
		res.lastLines = append(res.lastLines, se.Error())
	}
	if err != nil || !res.ok {
		a.logger.Warn("hook failed", "hook", op.Hook, "duration", res.took, "status", res.why, "attempt", op.Attempts+1, "error", errString(err, res))
		a.hookFailed(op)
		// Shown at once, as it will be while the agent waits to run
		// it again (reportWaiting).
		a.failed, a.failedOp = a.failureStatus(op, res.lastLines), op
		a.rep.set(a.failed)
		return a.record(c.failed)
	}
	// One line a run, for the operator (ctl debug-log).
	a.logger.Info("hook ran", "hook", op.Hook, "duration", res.took, "status", res.why)
	if len(res.lastLines) > 0 {
		// The hook's last words go into the unit's status history.
		a.rep.set(&pb.Status{Status: "executing", Message: fmt.Sprintf("ran %s hook", op.Hook),
			Data: map[string]string{"state": a.l.State, "output": strings.Join(res.lastLines, "\n")}, SyncedRevision: a.synced})
	}
	op.Step, op.Settings, op.Seen, op.Ports = stepDone, hc.buffered(), seen, hc.portsChange()
	if len(op.Settings) > 0 {
		// Kept until committed, even if the controller is away meanwhile.
		if err := a.record(c.executed); err != nil {
			return err
		}
	}
	return ex.commit(ctx, op, c.done)
}

// hasHook reports whether the charm has a file for the hook. A missing one
// is skipped; anything else there (even a file that cannot run) is run, so
// that hooks.Run names what is wrong with it. Until a hook runs, the
// hooks directory is read once (a charm without hooks had a lookup for
// each it lacks); once one ran, which may change its charm, each hook is
// looked up on its own again, until the next charm is unpacked (a charm
// with hooks would read its directory before each).
func (a *Agent) hasHook(hook string) bool {
	if !a.hookEach && a.hookNames == nil {
		names, err := os.ReadDir(filepath.Join(a.charmDir(), "hooks"))
		if err == nil || errors.Is(err, fs.ErrNotExist) {
			a.hookNames = make(map[string]bool, len(names))
			for _, n := range names {
				a.hookNames[n.Name()] = true
			}
		} // else not a directory we can list: the hook is looked up itself
	}
	if a.hookNames != nil {
		return a.hookNames[hook]
	}
	_, err := os.Lstat(filepath.Join(a.charmDir(), "hooks", hook))
	return !errors.Is(err, fs.ErrNotExist)
}

func errString(err error, res hookResult) string {
	if err != nil {
		return err.Error()
	}
	return res.why
}

// commit writes a successful hook's relation settings, all in one call,
// then records the hook done as d says: its class's done if it ran, idle
// if the charm has no such hook.
func (ex *executor) commit(ctx context.Context, op *hookOp, d durability) error {
	a := ex.a
	if len(op.Settings) > 0 {
		req := &pb.UpdateSettingsRequest{Unit: a.cfg.Unit}
		for _, s := range op.Settings {
			u := &pb.SettingsUpdate{Relation: s.Relation, Set: s.Set, Unset: s.Unset}
			if s.App {
				req.AppUpdates = append(req.AppUpdates, u)
			} else {
				req.Updates = append(req.Updates, u)
			}
		}
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := a.cfg.API.UpdateSettings(cctx, req)
		cancel()
		switch status.Code(err) {
		case codes.OK:
			if err := ex.wrote(op.Settings); err != nil {
				return err
			}
		case codes.FailedPrecondition, codes.NotFound, codes.PermissionDenied:
			// The unit left the relation meanwhile: its settings went
			// with it.
			a.logger.Warn("relation settings dropped", "hook", op.Hook, "error", err)
		case codes.InvalidArgument:
			// The controller will not take these settings however
			// often asked (too large, say): the hook failed, for the
			// operator to resolve, rather than be committed again and
			// again.
			return ex.settingsRefused(op, err)
		default:
			return err
		}
	}
	applySuccess(a.l, op)
	a.l.Op = nil
	if op.Ports != nil {
		// The ports it opened or closed are the unit's claims from now:
		// the machine's gate weighs others' against them.
		a.tellGate()
	}
	a.logger.Debug("hook done", "hook", op.Hook)
	if err := a.record(d); err != nil {
		return err
	}
	if strings.HasSuffix(op.Hook, "-relation-broken") {
		ex.w.forgetRelation(op.Relation) // done with it: stop watching
	}
	return nil
}

// settingsRefused ends a hook whose relation settings the controller
// refused as it ends a hook that failed its last attempt: the unit enters
// the error state of the transition, the settings dropped, and waits for
// the operator (ctl resolved runs the hook again; --no-retry counts it
// done without them). The refusal is the error's output.
func (ex *executor) settingsRefused(op *hookOp, refusal error) error {
	a := ex.a
	a.logger.Error("relation settings refused: waiting for ctl resolved", "hook", op.Hook, "error", refusal)
	op.Attempts++
	op.Step, op.Settings, op.Ports, op.NotBefore = stepQueued, nil, nil, time.Time{}
	a.enterError(op)
	a.rep.set(&pb.Status{Status: "error", Message: fmt.Sprintf("hook failed: %q", op.Hook), Data: map[string]string{
		"state":  a.l.State,
		"output": "the controller refused the hook's relation settings: " + status.Convert(refusal).Message(),
	}})
	return a.record(stepClasses[actHook].failed)
}

// hookFailed counts a failed run of op: it is retried after a pause that
// doubles each time, until the attempts run out and the unit enters the
// error state of the transition.
func (a *Agent) hookFailed(op *hookOp) {
	op.Attempts++
	op.Step = stepQueued
	op.Settings = nil
	if op.Attempts >= a.cfg.Retry.Attempts {
		op.NotBefore = time.Time{}
		a.enterError(op)
		a.logger.Error("hook failed: waiting for ctl resolved", "hook", op.Hook, "attempts", op.Attempts)
		return
	}
	d := a.cfg.Retry.Initial << (op.Attempts - 1)
	if d > a.cfg.Retry.Max || d <= 0 {
		d = a.cfg.Retry.Max
	}
	d = d/2 + time.Duration(rand.Int64N(int64(d/2)+1)) // jitter
	op.NotBefore = a.cfg.Clock().Add(d)
}

// enterError puts the unit in the error state of op's transition.
func (a *Agent) enterError(op *hookOp) {
	switch prev := a.l.State; op.Hook {
	case "install":
		a.l.State = StateInstallError
	case "start":
		a.l.State = StateStartError
	case "stop":
		a.l.State = StateStopError
	default:
		a.l.State, a.l.Resume = StateHookError, prev
	}
}

// applySuccess records a hook done in the local state.
func applySuccess(l *localState, op *hookOp) {
	if op.Ports != nil {
		l.OpenedPorts = op.Ports.Opened
	}
	switch op.Hook {
	case opHostClaims, opHostDaemons, opHostRelease:
		// Counted done (ctl resolved --no-retry): the claims in place
		// are taken to be as they were.
		applyHostSuccess(l, op, nil)
	case "install":
		l.State = StateReady
	case "start":
		l.State, l.Started = StateRunning, true
	case "stop":
		l.State, l.Started, l.Stopped = StateReady, false, true
	case "remove":
		l.Removed = true
	case "config-changed":
		if l.Spec != nil {
			// (An agent of before revisions, answered --no-retry before
			// it read its spec, runs config-changed again.)
			l.ConfigRan = l.Spec.configDigest()
		}
	case "upgrade-charm":
		l.Upgrade = false
	case "leader-elected", "leader-settings-changed":
		applyLeadership(l, op)
	default:
		switch {
		case strings.HasSuffix(op.Hook, "-relation-created"):
			l.createRelation(op.Relation, op.Endpoint)
		case l.Relations[op.Relation] == nil:
		case strings.HasSuffix(op.Hook, "-relation-joined"):
			l.setMember(op.Relation, op.Remote, 0, nil)
		case strings.HasSuffix(op.Hook, "-relation-changed") && op.Remote == "" && op.RemoteService != "":
			l.Relations[op.Relation].App = op.Version
		case strings.HasSuffix(op.Hook, "-relation-changed"):
			l.setMember(op.Relation, op.Remote, op.Version, op.Seen)
		case strings.HasSuffix(op.Hook, "-relation-departed"):
			l.departMember(op.Relation, op.Remote)
		case strings.HasSuffix(op.Hook, "-relation-broken"):
			l.breakRelation(op.Relation)
		}
	}
}

// resolve acts on the operator's answer to the failed hook: run it again,
// or count it done (committed as actResolve's class says). The mark is
// cleared first, so that it cannot answer a later failure.
func (ex *executor) resolve(ctx context.Context, mode pb.ResolvedMode) error {
	a := ex.a
	if _, err := a.cfg.API.ClearResolved(ctx, &pb.ClearResolvedRequest{Unit: a.cfg.Unit}); err != nil {
		return err
	}
	op := a.l.Op
	switch a.l.State {
	case StateInstallError:
		a.l.State = StateNew
	case StateStartError:
		a.l.State = StateReady
	case StateStopError:
		a.l.State = StateRunning
	case StateHookError:
		a.l.State, a.l.Resume = a.l.Resume, ""
	}
	if op == nil {
		return nil
	}
	if mode == pb.ResolvedMode_RESOLVED_MODE_NO_RETRY {
		a.logger.Info("resolved: counting the failed hook as done", "hook", op.Hook)
		applySuccess(a.l, op)
		a.l.Op = nil
	} else {
		a.logger.Info("resolved: running the failed hook again", "hook", op.Hook)
		op.Attempts, op.NotBefore = 0, time.Time{}
	}
	return nil
}

// download fetches the service's charm and unpacks it as the unit's charm
// directory, replacing the previous one only once the new one is whole. A
// charm without hooks is not unpacked, and the unit then has no charm
// directory (a previous charm's is removed): a unit's copy of its charm
// is where its hooks run, and nothing else reads it.
// With the machine's cache of charms, a charm another unit of the machine
// downloaded is not downloaded again. A unit's first download, when the
// unit's directory holds nothing (it is not there yet), unpacks in place,
// the directory made first: there is nothing to replace, and a try cut
// short (an error, a crash) leaves the next try to go the way of
// replacing.
func (ex *executor) download(ctx context.Context, ref *pb.CharmRef) error {
	a := ex.a
	dir := a.charmDir()
	tmp := dir + ".new"
	inPlace := a.newDir
	a.newDir = false
	if inPlace {
		tmp = dir
	} else if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	var fetchErr error
	fetch := func() ([]byte, error) {
		data, err := ex.fetch(ctx, ref)
		fetchErr = err
		if err == nil {
			// Its host claims are read now, while the archive is at
			// hand: a charm without hooks gets no directory to read
			// them from (claims.go).
			if _, cerr := archiveClaims(ref.GetSha256(), data); cerr != nil {
				a.logger.Warn("cannot read the charm's host claims", "charm", charmKey(ref), "error", cerr)
			}
		}
		return data, err
	}
	var err error
	made := false
	if a.cfg.Charms != nil {
		made, err = a.cfg.Charms.DeployHooksFrom(ref.Sha256, tmp, fetch, a.store.makeDir)
	} else if data, ferr := fetch(); ferr == nil {
		if made, err = charm.HasHooks(data); made {
			if err = a.store.makeDir(); err == nil {
				err = charm.Extract(data, tmp)
			}
		}
	}
	switch {
	case fetchErr != nil:
		return fetchErr
	case err != nil:
		return fmt.Errorf("unpack charm %s: %w", charmKey(ref), err)
	}
	if !inPlace {
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
		if made {
			if err := os.Rename(tmp, dir); err != nil {
				return err
			}
		}
	}
	// Its host claims are known before it counts as unpacked: the next
	// steps depend on them.
	hc, err := ex.charmHostClaims(ctx, ref, made)
	if err != nil {
		return err
	}
	a.l.HostClaims = claimsAnything(hc)
	a.l.Charm, a.hookNames, a.hookEach = charmKey(ref), nil, false
	if a.l.State != StateNew {
		// A move to another charm: upgrade-charm runs next, then
		// config-changed, whatever the configuration.
		a.l.Upgrade, a.l.ConfigRan = true, ""
	}
	if !made {
		// A charm without hooks gets no directory: nothing would run
		// there. Its hooks are all missing, and skipped.
		a.hookNames = map[string]bool{}
		a.logger.Info("charm has no hooks: not unpacked", "charm", a.l.Charm)
	} else {
		a.logger.Info("charm unpacked", "charm", a.l.Charm, "dir", dir)
	}
	// Committed lazily (actDownload's class): written with the next
	// record (the first hook's), if any, a crash before then loses only
	// the record of the download, and the charm is downloaded again.
	return nil
}

// fetch downloads the charm's archive.
func (ex *executor) fetch(ctx context.Context, ref *pb.CharmRef) ([]byte, error) {
	stream, err := ex.a.cfg.API.DownloadCharm(ctx, &pb.DownloadCharmRequest{Name: ref.Name, Revision: ref.Revision})
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return buf.Bytes(), nil
		}
		if err != nil {
			return nil, fmt.Errorf("download charm %s: %w", charmKey(ref), err)
		}
		if int64(buf.Len()+len(resp.Chunk)) > charm.MaxSize {
			return nil, fmt.Errorf("download charm %s: over %d bytes", charmKey(ref), charm.MaxSize)
		}
		buf.Write(resp.Chunk)
	}
}

func (a *Agent) charmDir() string { return filepath.Join(a.cfg.DataDir, "charm") }
