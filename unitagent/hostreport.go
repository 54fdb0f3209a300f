package unitagent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/lifelinehq/lifeline/internal/hostclaims"
	"github.com/lifelinehq/lifeline/internal/hostexec"
	"github.com/lifelinehq/lifeline/internal/pause"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// The unit's host report (AgentService.SetHostReport, the controller's
// host-reports/<unit>, ctl show-unit): the revision whose claims are in
// place, the claims as rendered (with the opened ports), the last host
// job's tasks with their outcomes, the machine's conflicts with the
// claims, and the daemons' states as the machine's supervisor knows them.
//
// The agent's goroutine keeps the report's base (all but the daemons)
// current: before each step it compares what the base is made of with
// what it last made it of (syncHostReport), and the last job is recorded
// as it ends (recordHostJob, called from runHostJob). The reporter's own
// goroutine sends the base with the daemons' states, when the base
// changed or the supervisor says a daemon's state did (Subscribe) and the
// states differ from those last sent: at most one report every
// hostReportEvery, the latest always sent in the end; refused for a while
// (the controller away, the agent's budget spent), it is sent again after
// a back-off. A unit whose charm claims nothing on its host and which
// opened no port makes no report.
//
// A unit held back by claims it did not ask for (it holds conflicting
// claims unchanged: taken with ctl resolved --no-retry, or from before the
// machine's check) has no refusal of its own to report: the machine's
// gate, when it is a standingGate, says its standing conflicts ("held:
// port 8080/tcp is claimed by kv/0"), which the report carries when the
// unit has none of its own, asked again whenever the gate's record
// changes.

// hostReportEvery spaces a unit's host reports: a daemon restarting in a
// loop, or jobs in quick succession, cost a report every few seconds.
const hostReportEvery = 3 * time.Second

// hostReportLinger lets a burst of changes settle into one report.
const hostReportLinger = 200 * time.Millisecond

// The bounds of a report: it must fit the controller's record
// (state.MaxHostReportBytes, 128 KiB). Its claims are bounded by the
// charm's limits; strings are cut to maxReportString bytes, the tasks
// listed to maxReportTasks, the conflicts to maxReportConflicts, and
// tasks are left out from the end while it would not fit.
const (
	maxReportTasks     = 200
	maxReportString    = 256
	maxReportConflicts = 16
	maxHostReportBytes = 128 << 10
)

// lastJobFile keeps the last host job's report in the unit's directory,
// so that an agent started again reports it too.
const lastJobFile = "host-last-job.json"

// hostReporter sends the unit's host reports.
type hostReporter struct {
	api    API
	unit   string
	logger hclog.Logger
	// sup is the machine's daemon supervisor; nil when the agent has no
	// host.
	sup   *hostexec.Supervisor
	every time.Duration

	mu sync.Mutex
	// base is the report but for its daemons (nil: nothing to report);
	// dirty says it changed since it was last sent.
	base  *pb.HostReport
	dirty bool
	kick  chan struct{}
	// gate is the machine's gate, when it tells standing conflicts.
	gate standingGate
}

// standingGate is a ClaimsGate that also tells the conflicts a unit's
// claims, held unchanged, stand in (machineagent's).
type standingGate interface {
	// Standing returns the conflicts that hold the unit back while it
	// asks for nothing; none when it is not held.
	Standing(unit string) []string
	// Changed returns a channel closed at the next change of the claims
	// the gate knows.
	Changed() <-chan struct{}
}

func newHostReporter(a *Agent) *hostReporter {
	r := &hostReporter{api: a.cfg.API, unit: a.cfg.Unit, logger: a.logger, every: hostReportEvery, kick: make(chan struct{}, 1)}
	if a.cfg.Host != nil {
		r.sup = a.cfg.Host.Supervisor
	}
	r.gate, _ = a.cfg.Gate.(standingGate)
	return r
}

// standing returns the unit's standing conflicts, as reported, and the
// channel closed at their next change (nil without a standingGate). The
// channel is taken first, so that no change after the conflicts are read
// goes untold.
func (r *hostReporter) standing() ([]string, <-chan struct{}) {
	if r.gate == nil {
		return nil, nil
	}
	ch := r.gate.Changed()
	var out []string
	cs := r.gate.Standing(r.unit)
	for i, c := range cs {
		if i == maxReportConflicts {
			out = append(out, fmt.Sprintf("and %d more", len(cs)-i))
			break
		}
		out = append(out, cut(c))
	}
	return out, ch
}

// set replaces the report's base, to be sent.
func (r *hostReporter) set(base *pb.HostReport) {
	r.mu.Lock()
	r.base, r.dirty = base, true
	r.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// run sends reports until ctx ends.
func (r *hostReporter) run(ctx context.Context) {
	var changed <-chan struct{}
	if r.sup != nil {
		ch, stop := r.sup.Subscribe()
		defer stop()
		changed = ch
	}
	bo := backoff.NewExponentialBackOff(backoff.WithInitialInterval(time.Second), backoff.WithMaxInterval(30*time.Second), backoff.WithMaxElapsedTime(0))
	var sent []*pb.DaemonReport // the daemons' states last sent
	var sentStanding []string   // the standing conflicts last sent
	_, gateChanged := r.standing()
	sentOnce := false
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.kick:
		case <-changed:
		case <-gateChanged:
		}
		if !pause.For(ctx, max(hostReportLinger, time.Until(last.Add(r.every)))) {
			return
		}
		retry := false
		for {
			r.mu.Lock()
			base, dirty := r.base, r.dirty
			r.dirty = false
			r.mu.Unlock()
			if base == nil {
				break
			}
			ds := r.daemons()
			var st []string
			st, gateChanged = r.standing()
			if !dirty && !retry && sentOnce && sameDaemons(ds, sent) && slices.Equal(st, sentStanding) {
				break
			}
			rep := proto.Clone(base).(*pb.HostReport)
			rep.Daemons, rep.ReportedUnixNano = ds, time.Now().UnixNano()
			if len(rep.Conflicts) == 0 {
				rep.Conflicts = st
			}
			fitReport(rep)
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, err := r.api.SetHostReport(cctx, &pb.SetHostReportRequest{Unit: r.unit, Report: rep})
			cancel()
			last = time.Now()
			if ctx.Err() != nil {
				return
			}
			switch status.Code(err) {
			case codes.OK:
				sent, sentStanding, sentOnce, retry = ds, st, true, false
				bo.Reset()
			case codes.InvalidArgument, codes.NotFound, codes.PermissionDenied:
				// Refused however often sent (the unit gone, say): the
				// next change makes another.
				r.logger.Warn("host report refused", "error", err)
				sent, sentStanding, sentOnce, retry = ds, st, true, false
			default:
				r.logger.Debug("cannot report the host yet", "error", err)
				retry = true
				if !pause.For(ctx, bo.NextBackOff()) {
					return
				}
				continue
			}
			break
		}
	}
}

// daemons returns the unit's daemons' states, as reported.
func (r *hostReporter) daemons() []*pb.DaemonReport {
	if r.sup == nil {
		return nil
	}
	var out []*pb.DaemonReport
	for _, d := range r.sup.States(r.unit) {
		dr := &pb.DaemonReport{Name: d.Name, State: d.State, Pid: int64(d.Pid), Restarts: int32(d.Restarts),
			LastExit: cut(d.LastExit)}
		if !d.Since.IsZero() {
			dr.SinceUnixNano = d.Since.UnixNano()
		}
		out = append(out, dr)
	}
	return out
}

// sameDaemons says whether a and b report the same states, whenever they
// were entered.
func sameDaemons(a, b []*pb.DaemonReport) bool {
	return slices.EqualFunc(a, b, func(x, y *pb.DaemonReport) bool {
		return x.Name == y.Name && x.State == y.State && x.Pid == y.Pid && x.Restarts == y.Restarts && x.LastExit == y.LastExit
	})
}

// fitReport leaves out the last job's tasks from the end while the
// report would not fit the controller's record.
func fitReport(r *pb.HostReport) {
	j := r.GetLastJob()
	for proto.Size(r) > maxHostReportBytes && j != nil && len(j.Tasks) > 0 {
		n := max(len(j.Tasks)/8, 1)
		j.Tasks = j.Tasks[:len(j.Tasks)-n]
		j.TasksCut += int32(n)
	}
}

// cut cuts s to maxReportString bytes, marking the cut.
func cut(s string) string {
	if len(s) <= maxReportString {
		return s
	}
	return strings.ToValidUTF8(s[:maxReportString-3], "") + "..."
}

// hostReportKey is what the report's base is made of, compared before
// each step: pointers and values the agent replaces rather than changes.
type hostReportKey struct {
	host              *hostState
	rev               int64
	daemons, released bool
	applied           *hostclaims.Claims
	conflicts, ports  string
	job               *pb.HostJob
}

// startHostReport loads the last job's report and starts the reporter,
// whose goroutine wg waits for.
func (a *Agent) startHostReport(ctx context.Context, wg *sync.WaitGroup) {
	a.hrep = newHostReporter(a)
	a.lastJob = a.loadLastJob()
	a.syncHostReport()
	wg.Go(func() { a.hrep.run(ctx) })
}

// syncHostReport makes the reporter's base again, to be sent, when what it
// is made of changed since it was last made, and as the agent starts (a
// report an agent killed before it sent it is sent then); a unit with
// nothing on its host has none.
func (a *Agent) syncHostReport() {
	l := a.l
	if l.Host == nil && len(l.OpenedPorts) == 0 && a.lastJob == nil {
		return
	}
	k := hostReportKey{host: l.Host, ports: strings.Join(l.OpenedPorts, " "), job: a.lastJob}
	if h := l.Host; h != nil {
		k.rev, k.daemons, k.released, k.applied = h.Rev, h.Daemons, h.Released, h.Applied
		k.conflicts = strings.Join(h.Conflicts, "\n")
	}
	if a.hostKey != nil && *a.hostKey == k {
		return
	}
	a.hostKey = &k
	a.hrep.set(a.hostReportBase())
}

// hostReportBase is the report but for its daemons.
func (a *Agent) hostReportBase() *pb.HostReport {
	r := &pb.HostReport{Claims: &pb.HostClaimsReport{OpenedPorts: slices.Clone(a.l.OpenedPorts)}, LastJob: a.lastJob}
	h := a.l.Host
	if h == nil {
		return r
	}
	r.AppliedRevision, r.DaemonsApplied = h.Rev, h.Daemons
	for i, c := range h.Conflicts {
		if i == maxReportConflicts {
			r.Conflicts = append(r.Conflicts, fmt.Sprintf("and %d more", len(h.Conflicts)-i))
			break
		}
		r.Conflicts = append(r.Conflicts, cut(c))
	}
	if c := h.Applied; c != nil {
		for _, p := range c.Ports {
			r.Claims.Ports = append(r.Claims.Ports, p.String())
		}
		for _, f := range c.Files {
			r.Claims.Files = append(r.Claims.Files, cut(f.Path))
		}
		for _, p := range c.Packages {
			r.Claims.Packages = append(r.Claims.Packages, &pb.HostPackage{Name: cut(p.Name), Version: cut(p.Version)})
		}
		for _, d := range c.Daemons {
			r.Claims.Daemons = append(r.Claims.Daemons, d.Name)
		}
	}
	return r
}

// recordHostJob records the host job op as it ended, its outcomes and
// summary, for the reports: kept in lastJobFile, so that it outlives the
// agent.
func (a *Agent) recordHostJob(op *hookOp, outcomes []hostexec.Outcome, sum *jobSummary) {
	j := &pb.HostJob{Job: op.Hook, Revision: op.Version, Run: int32(sum.Tasks), Changed: int32(sum.Changed),
		Pruned: int32(sum.Pruned), Failed: cut(sum.Failed), EndedUnixNano: a.cfg.Clock().UnixNano()}
	for i, o := range outcomes {
		if i == maxReportTasks {
			j.TasksCut = int32(len(outcomes) - maxReportTasks)
			break
		}
		j.Tasks = append(j.Tasks, &pb.HostTask{Kind: string(o.Kind), Target: cut(o.Target), Outcome: o.Result, Message: cut(o.Message)})
	}
	a.lastJob = j
	if err := writeLastJob(filepath.Join(a.cfg.DataDir, lastJobFile), j); err != nil {
		a.logger.Warn("cannot keep the last host job's report", "error", err)
	}
}

func writeLastJob(path string, j *pb.HostJob) error {
	b, err := protojson.Marshal(j)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// loadLastJob reads the last host job's report, nil when there is none
// (or it does not read: the next job writes it again).
func (a *Agent) loadLastJob() *pb.HostJob {
	b, err := os.ReadFile(filepath.Join(a.cfg.DataDir, lastJobFile))
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			a.logger.Warn("cannot read the last host job's report", "error", err)
		}
		return nil
	}
	j := &pb.HostJob{}
	if err := protojson.Unmarshal(b, j); err != nil {
		a.logger.Warn("cannot read the last host job's report", "error", err)
		return nil
	}
	return j
}
