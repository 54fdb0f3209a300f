package unitagent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lifelinehq/lifeline/internal/charm"
	"github.com/lifelinehq/lifeline/internal/hostclaims"
	"github.com/lifelinehq/lifeline/internal/hostexec"
	"github.com/lifelinehq/lifeline/internal/names"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// The unit's host claims (the host section of its charm's metadata.yaml)
// are carried out as jobs of tasks (package hostclaims makes them, the
// machine's hostexec.Host runs them), each a step of the state machine,
// run as a hook is (an operation in the local state: retried, then the
// unit in error, ctl resolved runs it again), in this order against the
// hooks:
//
//	new unit:  host-claims (packages, files), install, config-changed,
//	           host-daemons (daemons), start
//	move:      host-claims (the pruned REMOVED job: old daemons shut
//	           down, old files removed, old packages released; then the
//	           new packages and files), upgrade-charm, config-changed,
//	           host-daemons (daemons new or whose spec changed)
//	dying:     stop, host-release (daemons shut down, files removed,
//	           packages released), remove
//
// The local state keeps what the host holds for the unit (hostState): the
// claims applied, of the revision whose packages and files are in place,
// and whether its daemons are too. Each job is the difference between
// those and what the unit is to hold (hostclaims.Diff): an unchanged
// revision runs no task, and no daemon is restarted. A job's tasks run
// through the host's journal (host-job.json in the unit's directory): an
// agent killed mid-job runs the same tasks again as it starts, and the
// journal skips those done (no daemon is started twice).
//
// Before a host-claims job takes claims other than those the host holds
// for the unit (a new unit's first, or a revision that changes its ports,
// files or packages), the agent asks its machine's ClaimsGate, which
// weighs them against its other units' (hostclaims.Resolve). Refused
// (rolled back, or held), the job does not run: the unit keeps the
// claims, and daemons, of the revision it holds, enters its error state
// with the conflict as its status ("conflict: port 8080/tcp is claimed by
// kv/0: kept revision 3", or "...: not started" for a new unit) and does
// not report the revision, so that its rollout counts it failed. Its
// target moving on (a revert, an abort) gives the job up (actDropMove);
// ctl resolved asks again. The gate is told the claims the host holds as
// the agent starts, after each job, and when a move is given up.

// The operations of the host's jobs, named as hooks are in the local
// state and in the unit's status. No hook has these names (a relation
// hook is "<endpoint>-relation-<kind>").
const (
	opHostClaims  = "host-claims"
	opHostDaemons = "host-daemons"
	opHostRelease = "host-release"
)

// jobJournal is the host's journal of the unit's job in progress.
const jobJournal = "host-job.json"

// isHostOp says whether op is one of the host's jobs, not a hook.
func isHostOp(op *hookOp) bool {
	switch op.Hook {
	case opHostClaims, opHostDaemons, opHostRelease:
		return true
	}
	return false
}

// hostState is what the host holds of the unit's claims, as its jobs left
// it.
type hostState struct {
	// Applied are the claims in place: those of revision Rev once its
	// host-claims job ran, but for their daemons until Daemons; the
	// content of each file is kept as its digest (compact).
	Applied *hostclaims.Claims `json:"applied,omitempty"`
	// Rev is the revision whose packages and files are in place, 0
	// before the first.
	Rev int64 `json:"rev,omitempty"`
	// Daemons says Rev's daemons are in place too.
	Daemons bool `json:"daemons,omitempty"`
	// Released says the dying unit's host-release ran.
	Released bool `json:"released,omitempty"`
	// Last summarizes the last job that ran tasks, for status.
	Last *jobSummary `json:"last,omitempty"`
	// Conflicts are the machine's refusals of the unit's claims ("port
	// 8080/tcp is claimed by kv/0: kept revision 3"), reported with
	// them (hostreport.go).
	Conflicts []string `json:"conflicts,omitempty"`
}

// jobSummary is a compact record of a job: its operation, how many tasks
// ran, changed the host, and were pruned, and the failed task, if any.
type jobSummary struct {
	Op      string `json:"op"`
	Tasks   int    `json:"tasks"`
	Changed int    `json:"changed,omitempty"`
	Pruned  int    `json:"pruned,omitempty"`
	Failed  string `json:"failed,omitempty"`
}

func (s *jobSummary) String() string {
	msg := fmt.Sprintf("%s: %d tasks, %d changed, %d pruned", s.Op, s.Tasks, s.Changed, s.Pruned)
	if s.Failed != "" {
		msg += ", failed: " + s.Failed
	}
	return msg
}

// hostOpBefore returns the host's job due before the step the resolver
// would take next, if any: before "install", "upgrade-charm" or
// "config-changed", the revision's packages and files; before "record"
// (the revision recorded, and start), its daemons.
func hostOpBefore(l *localState, hook string) (action, bool) {
	h := l.Host
	if !l.HostClaims && (h == nil || isEmpty(h.Applied)) {
		// The charm claims nothing, and the host holds nothing of the
		// unit: no job (a unit of a charm without claims costs none).
		return action{}, false
	}
	rev := l.Spec.Revision
	switch hook {
	case "install", "upgrade-charm", "config-changed":
		if h == nil || h.Rev != rev {
			return hostAction(opHostClaims, rev), true
		}
	case "record":
		if h == nil || h.Rev != rev {
			return hostAction(opHostClaims, rev), true
		}
		if !h.Daemons {
			return hostAction(opHostDaemons, rev), true
		}
	}
	return action{}, false
}

// hostReleaseDue says whether the dying unit holds claims its host-release
// job must undo.
func hostReleaseDue(l *localState) bool {
	h := l.Host
	if h == nil || h.Released || h.Applied == nil {
		return false
	}
	return !isEmpty(h.Applied)
}

// isEmpty says whether claims hold nothing a job acts on or records
// (ports run no task, but their jobs tell the machine's gate).
func isEmpty(c *hostclaims.Claims) bool {
	return c == nil || len(c.Ports)+len(c.Packages)+len(c.Files)+len(c.Daemons) == 0
}

// claimsAnything says whether a charm's host claims hold anything a job
// acts on or records.
func claimsAnything(hc *charm.HostClaims) bool {
	return hc != nil && len(hc.Ports)+len(hc.Packages)+len(hc.Files)+len(hc.Daemons) > 0
}

// ClaimsGate is the machine's check of its units' host claims against one
// another: its machine agent's, which hears every unit's.
type ClaimsGate interface {
	// Check asks whether the unit may take claims (rendered, files'
	// contents as digests) in place of those it holds. It answers once
	// the pass the ask joins is decided: Kept, or RolledBack or Held with
	// the unit's conflicts.
	Check(ctx context.Context, unit string, claims *hostclaims.Claims) (hostclaims.UnitResult, error)
	// Holds tells the claims the host holds for the unit (nil: none).
	Holds(unit string, claims *hostclaims.Claims)
}

// tellGate tells the machine's gate, if any, the claims the host holds
// for the unit.
func (a *Agent) tellGate() {
	if a.cfg.Gate == nil {
		return
	}
	var c *hostclaims.Claims
	if a.l.Host != nil {
		c = a.l.Host.Applied
	}
	if c != nil || len(a.l.OpenedPorts) > 0 {
		// The ports its hooks opened are the unit's claims as well.
		c = a.l.withPortClaims(c)
	}
	a.cfg.Gate.Holds(a.cfg.Unit, c)
}

// checkClaims asks the gate whether op, a host-claims job, may take
// claims, when they differ from those the host holds; refused, the unit
// enters its error state with the conflict, the job not run, and
// checkClaims reports true.
func (ex *executor) checkClaims(ctx context.Context, op *hookOp, claims *hostclaims.Claims) (bool, error) {
	a := ex.a
	var held *hostclaims.Claims
	kept := a.l.Revision
	if h := a.l.Host; h != nil {
		held = h.Applied
		if h.Rev > 0 {
			// The revision whose claims the host holds: the one the
			// unit keeps, even when its record of running it was lost
			// (saved with a later record that did not come).
			kept = h.Rev
		}
	}
	// The ports its hooks opened count with its charm's, both held and
	// asked for.
	held, claims = a.l.withPortClaims(held), a.l.withPortClaims(claims)
	if a.cfg.Gate == nil || sameClaims(held, claims) {
		return false, nil
	}
	res, err := a.cfg.Gate.Check(ctx, a.cfg.Unit, claims)
	if err != nil || res.Outcome == hostclaims.Kept || len(res.Conflicts) == 0 {
		return false, err
	}
	why := res.Conflicts[0].String()
	if n := len(res.Conflicts); n > 1 {
		why += fmt.Sprintf(" (and %d more)", n-1)
	}
	if kept > 0 {
		why += fmt.Sprintf(": kept revision %d", kept)
	} else {
		why += ": not started"
	}
	a.logger.Warn("host claims refused: waiting for ctl resolved or another target", "revision", op.Version, "conflict", why)
	op.Attempts++
	op.Step, op.NotBefore, op.Task, op.Conflict = stepQueued, time.Time{}, why, true
	if a.l.Host == nil {
		a.l.Host = &hostState{}
	}
	a.l.Host.Conflicts = []string{why} // reported (hostreport.go)
	a.enterError(op)
	a.failed, a.failedOp = a.failureStatus(op, nil), op
	a.rep.set(a.failed)
	return true, a.record(stepClasses[actHostJob].failed)
}

// sameClaims says whether a and b claim the same ports, files and
// packages (daemons never conflict).
func sameClaims(a, b *hostclaims.Claims) bool {
	if a == nil {
		a = &hostclaims.Claims{}
	}
	if b == nil {
		b = &hostclaims.Claims{}
	}
	return slices.Equal(a.Ports, b.Ports) && slices.Equal(a.Packages, b.Packages) &&
		slices.EqualFunc(a.Files, b.Files, func(x, y hostclaims.File) bool {
			return x.Path == y.Path && x.Mode == y.Mode && bytes.Equal(x.Content, y.Content)
		})
}

func hostAction(op string, rev int64) action {
	return hook(&hookOp{Hook: op, Version: rev})
}

// applyHostSuccess records a host job done (or counted done by ctl
// resolved --no-retry): the claims it applied, when it computed them.
func applyHostSuccess(l *localState, op *hookOp, applied *hostclaims.Claims) {
	if l.Host == nil {
		l.Host = &hostState{}
	}
	h := l.Host
	switch op.Hook {
	case opHostClaims:
		h.Rev, h.Daemons, h.Conflicts = op.Version, false, nil
	case opHostDaemons:
		h.Rev, h.Daemons = op.Version, true
	case opHostRelease:
		h.Released = true
	}
	if applied != nil || op.Hook == opHostRelease {
		h.Applied = applied
	}
}

// runHostJob carries out the host job op: it computes its tasks from the
// claims in place and those the unit is to hold, runs them (none: done at
// once, nothing reported), and records the claims applied. A task that
// fails fails the operation, as a hook's failure does, the task named.
// Each phase is recorded as actHostJob's row of stepClasses says.
func (ex *executor) runHostJob(ctx context.Context) error {
	a := ex.a
	op := a.l.Op
	c := stepClasses[actHostJob]
	op.Conflict = false
	tasks, applied, pruned, err := ex.hostTasks(ctx, op)
	if err != nil {
		return ex.hostFailed(op, err.Error())
	}
	if op.Hook == opHostClaims {
		if refused, err := ex.checkClaims(ctx, op, applied); refused || err != nil {
			return err
		}
	}
	if len(tasks) > 0 {
		if a.cfg.Host == nil {
			return ex.hostFailed(op, "this machine agent carries out no host claims")
		}
		op.Step = stepRunning
		if err := a.record(c.prepared); err != nil {
			return err
		}
		a.rep.progress(&pb.Status{Status: "executing", Message: fmt.Sprintf("running job: %d tasks, %d pruned", len(tasks), pruned),
			Data: map[string]string{"state": a.l.State}, SyncedRevision: a.synced})
		outcomes, err := a.cfg.Host.RunJob(ctx, filepath.Join(a.cfg.DataDir, jobJournal), tasks)
		a.rep.progressEnded()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		sum := &jobSummary{Op: op.Hook, Tasks: len(tasks), Pruned: pruned}
		for _, o := range outcomes {
			if o.Result == hostexec.Changed {
				sum.Changed++
			}
		}
		if err != nil {
			if n := len(outcomes); n > 0 && outcomes[n-1].Result == hostexec.Failed {
				o := outcomes[n-1]
				sum.Failed = fmt.Sprintf("%s %s: %s", o.Kind, o.Target, o.Message)
			} else {
				sum.Failed = err.Error()
			}
		}
		a.recordHostJob(op, outcomes, sum)
		if err != nil {
			if a.l.Host == nil {
				a.l.Host = &hostState{}
			}
			a.l.Host.Last = sum
			return ex.hostFailed(op, sum.Failed)
		}
		if a.l.Host == nil {
			a.l.Host = &hostState{}
		}
		a.l.Host.Last = sum
		a.logger.Info("host job done", "job", sum.String())
	}
	var held *hostclaims.Claims
	if a.l.Host != nil {
		held = a.l.Host.Applied
	}
	told := op.Hook != opHostDaemons && !sameClaims(held, applied)
	applyHostSuccess(a.l, op, applied)
	a.l.Op = nil
	a.tellGate()
	if len(tasks) == 0 && !told {
		return a.record(c.idle)
	}
	// Recorded at once when the gate was told other claims: the agent
	// tells its record again as it starts.
	return a.record(c.done)
}

// hostFailed counts a failed run of the host job op, as hookFailed does a
// hook's; why names the task.
func (ex *executor) hostFailed(op *hookOp, why string) error {
	a := ex.a
	a.logger.Warn("host job failed", "job", op.Hook, "attempt", op.Attempts+1, "error", why)
	op.Task = why
	a.hookFailed(op)
	a.failed, a.failedOp = a.failureStatus(op, nil), op
	a.rep.set(a.failed)
	return a.record(stepClasses[actHostJob].failed)
}

// hostTasks returns op's tasks for the host, the claims in place once
// they ran, and how many tasks of the whole jobs were pruned.
func (ex *executor) hostTasks(ctx context.Context, op *hookOp) ([]hostexec.Task, *hostclaims.Claims, int, error) {
	a := ex.a
	var old *hostclaims.Claims
	if a.l.Host != nil {
		old = a.l.Host.Applied
	}
	var target *hostclaims.Claims
	if op.Hook != opHostRelease {
		c, err := ex.renderClaims(ctx)
		if err != nil {
			return nil, nil, 0, err
		}
		target = c
	}
	full := target
	applied := compact(target)
	removed, current, pruned := hostclaims.Diff(old, applied)
	var tasks []hostclaims.Task
	switch op.Hook {
	case opHostClaims:
		// The REMOVED job, then the packages and files: the daemons the
		// revision keeps run on as they are until host-daemons, whose
		// tasks are not counted pruned here.
		tasks = append(tasks, removed...)
		for _, t := range current {
			if t.Kind != hostclaims.Run {
				tasks = append(tasks, t)
			}
		}
		applied.Daemons = keptDaemons(old, applied)
	case opHostDaemons:
		for _, t := range current {
			if t.Kind == hostclaims.Run {
				tasks = append(tasks, t)
			}
		}
		pruned = len(applied.Daemons) - len(tasks)
	case opHostRelease:
		tasks = removed
	}
	out := make([]hostexec.Task, 0, len(tasks))
	for _, t := range tasks {
		out = append(out, a.hostTask(t, full))
	}
	return out, applied, max(pruned, 0), nil
}

// keptDaemons returns the daemons of old whose names the new claims keep:
// those that run on, with their old specs, until host-daemons.
func keptDaemons(old, new *hostclaims.Claims) []hostclaims.Daemon {
	if old == nil || new == nil {
		return nil
	}
	var out []hostclaims.Daemon
	for _, d := range old.Daemons {
		for _, n := range new.Daemons {
			if n.Name == d.Name {
				out = append(out, d)
				break
			}
		}
	}
	return out
}

// hostTask turns a task of hostclaims into the host's, with the file's
// content from full, the claims rendered whole (compact claims keep only
// its digest).
func (a *Agent) hostTask(t hostclaims.Task, full *hostclaims.Claims) hostexec.Task {
	out := hostexec.Task{Unit: a.cfg.Unit, UnitDir: a.cfg.DataDir}
	switch t.Kind {
	case hostclaims.Install:
		out.Kind = hostexec.TaskInstall
		out.Packages = []hostexec.Package{{Name: t.Package.Name, Version: t.Package.Version}}
	case hostclaims.Uninstall:
		out.Kind = hostexec.TaskUninstall
		out.Packages = []hostexec.Package{{Name: t.Package.Name}}
	case hostclaims.Manage:
		out.Kind = hostexec.TaskManage
		out.File = hostexec.File{Path: t.File.Path, Mode: t.File.Mode}
		if full != nil {
			for _, f := range full.Files {
				if f.Path == t.File.Path {
					out.File.Content = f.Content
				}
			}
		}
	case hostclaims.Remove:
		out.Kind = hostexec.TaskRemove
		out.File = hostexec.File{Path: t.File.Path}
	case hostclaims.Run:
		out.Kind = hostexec.TaskRun
		out.Daemon = hostexec.Daemon{Name: t.Daemon.Name, Command: t.Daemon.Command, Env: t.Daemon.Env, StopTimeout: t.Daemon.StopTimeout}
	case hostclaims.Shutdown:
		out.Kind = hostexec.TaskShutdown
		out.Daemon = hostexec.Daemon{Name: t.Daemon.Name}
	}
	return out
}

// compact returns a copy of c whose files hold the digests of their
// contents: what the local state keeps, and what Diff compares (two
// contents are the same exactly when their digests are).
func compact(c *hostclaims.Claims) *hostclaims.Claims {
	if c == nil {
		return nil
	}
	out := *c
	out.Files = make([]hostclaims.File, len(c.Files))
	for i, f := range c.Files {
		out.Files[i] = f
		if !isDigest(f.Content) {
			sum := sha256.Sum256(f.Content)
			out.Files[i].Content = []byte(digestPrefix + hex.EncodeToString(sum[:]))
		}
	}
	return &out
}

const digestPrefix = "sha256:"

func isDigest(b []byte) bool {
	return len(b) == len(digestPrefix)+64 && bytes.HasPrefix(b, []byte(digestPrefix))
}

// renderClaims renders the host claims of the unit's spec: its charm's,
// with its configuration and the unit's facts.
func (ex *executor) renderClaims(ctx context.Context) (*hostclaims.Claims, error) {
	a := ex.a
	ref := a.l.Spec.decoded().GetCharm()
	_, statErr := os.Stat(a.charmDir())
	hc, err := ex.charmHostClaims(ctx, ref, a.l.Charm == charmKey(ref) && statErr == nil)
	if err != nil {
		return nil, err
	}
	cfg := map[string]any{}
	for k, v := range a.l.config() {
		cfg[k] = charm.ConfigValueOf(v)
	}
	return hostclaims.Render(hc, cfg, hostclaims.Facts{
		Unit: a.cfg.Unit, Service: names.UnitService(a.cfg.Unit), MachineID: a.cfg.MachineID,
		UnitDir: a.cfg.DataDir, MachineAddress: a.cfg.Address,
	})
}

// charmClaims holds, by archive SHA-256, the host claims of the charms
// this process read: a unit of a charm without hooks has no charm
// directory to read them from, and the machine's charm cache may deploy
// it without fetching the archive. Charms are few; the map is bounded.
var charmClaims = struct {
	sync.Mutex
	m map[string]*charm.HostClaims
}{m: map[string]*charm.HostClaims{}}

const maxCharmClaims = 256

func rememberClaims(sha string, hc *charm.HostClaims) {
	if sha == "" {
		return
	}
	charmClaims.Lock()
	defer charmClaims.Unlock()
	if len(charmClaims.m) >= maxCharmClaims {
		clear(charmClaims.m)
	}
	charmClaims.m[sha] = hc
}

// charmHostClaims returns the host claims of charm ref: from this
// process's memory of it, else (inDir: the unit's charm directory holds
// it) its metadata.yaml, else its archive, downloaded again.
func (ex *executor) charmHostClaims(ctx context.Context, ref *pb.CharmRef, inDir bool) (*charm.HostClaims, error) {
	a := ex.a
	charmClaims.Lock()
	hc, ok := charmClaims.m[ref.GetSha256()]
	charmClaims.Unlock()
	if ok && ref.GetSha256() != "" {
		return hc, nil
	}
	if inDir {
		if c, err := charm.ReadDir(a.charmDir()); err == nil {
			rememberClaims(ref.GetSha256(), c.Meta.Host)
			return c.Meta.Host, nil
		}
	}
	data, err := ex.fetch(ctx, ref)
	if err != nil {
		return nil, err
	}
	return archiveClaims(ref.GetSha256(), data)
}

// archiveClaims reads the host claims of a charm archive, and remembers
// them.
func archiveClaims(sha string, data []byte) (*charm.HostClaims, error) {
	c, _, err := charm.ReadArchive(bytes.NewReader(data), 0)
	if err != nil {
		return nil, fmt.Errorf("read the charm's host claims: %w", err)
	}
	rememberClaims(sha, c.Meta.Host)
	return c.Meta.Host, nil
}

// hostFailureMessage is the status message of a failed host job.
func hostFailureMessage(op *hookOp) string {
	what := strings.TrimPrefix(op.Hook, "host-")
	if op.Conflict {
		return "conflict: " + op.Task
	}
	if op.Task == "" {
		return fmt.Sprintf("host job failed: %s", what)
	}
	return fmt.Sprintf("host job failed: %s: %s", what, op.Task)
}
