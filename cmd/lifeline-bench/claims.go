package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// The claims scenario (-scenario claims) gives bench host claims: every
// unit claims three files under its directory and one daemon, a sleeping
// program (sleepProgram, or sleep(1) where the harness has none), which
// its machine agent starts before the unit runs and keeps running. Once
// every unit runs, it sets bench's rollout policy to -rollout-max-parallel
// and changes the one option that only the first file's template reads:
// each unit's move is then a host job that rewrites that file, with the
// other files' and the daemon's tasks pruned, and no daemon restarted. It
// is timed from the SetConfig call until every unit's host report (the
// controller's host-reports/<unit>, followed by a watch of etcd) says the
// new revision is applied; the reports' last jobs give the tasks run,
// changed and pruned, and their daemons' pids whether any was restarted.

// claimsSleepSeconds is how long a daemon's process sleeps: longer than
// any run, so that none ends (and is restarted) while measured, and short
// enough that a run killed before it removed its units leaves no process
// for long.
const claimsSleepSeconds = 4 * 3600

// claimsHost is bench's host section: three files, the first templated
// on the option the scenario changes, and the daemon running sleeper.
func claimsHost(sleeper []string) string {
	var cmd []string
	for _, a := range sleeper {
		cmd = append(cmd, fmt.Sprintf("%q", a))
	}
	return `host:
  files:
    - {path: bench/changes.conf, template: "generation={{ config.` + rolloutOption + ` }}\n"}
    - {path: bench/static.conf, content: "static\n"}
    - {path: bench/unit.conf, template: "unit={{ unit_name }}\n"}
  daemons:
    - name: sleeper
      command: [` + strings.Join(cmd, ", ") + `]
      stop-timeout: 5s
`
}

// writeClaimsCharm gives the charm in cdir the scenario's option and host
// claims, the daemon's program written under dir.
func writeClaimsCharm(dir, cdir string) error {
	if err := writeRolloutConfig(cdir); err != nil {
		return err
	}
	sleeper := []string{"sleep", fmt.Sprint(claimsSleepSeconds)}
	if p := sleepProgram(claimsSleepSeconds); p != nil {
		path := filepath.Join(dir, "bin", "sleeper")
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, p, 0o755); err != nil {
			return err
		}
		sleeper = []string{path}
	}
	meta := filepath.Join(cdir, "metadata.yaml")
	b, err := os.ReadFile(meta)
	if err != nil {
		return err
	}
	return os.WriteFile(meta, append(b, claimsHost(sleeper)...), 0o644)
}

// claimsResults are the claims scenario's figures.
type claimsResults struct {
	Units       int    `json:"units"`
	MaxParallel string `json:"max_parallel"`
	// SecondsToApplied is from the SetConfig call until every unit's
	// host report had the new revision applied; SecondsToRolloutDone
	// until the rollout was seen done; SetConfigSeconds the call's own.
	SecondsToApplied     float64 `json:"seconds_to_applied"`
	SecondsToRolloutDone float64 `json:"seconds_to_rollout_done"`
	SetConfigSeconds     float64 `json:"set_config_seconds"`
	// The last jobs of the units' reports at the new revision: how many
	// units had one, and their tasks run, changed and pruned, summed.
	// Each unit's is expected to run 1 task (the changed file) and prune
	// 7 (the removed job's 4 and the current job's other 3).
	UnitsWithJob int `json:"units_with_job"`
	TasksRun     int `json:"tasks_run"`
	TasksChanged int `json:"tasks_changed"`
	TasksPruned  int `json:"tasks_pruned"`
	// DaemonsRestarted counts the units whose daemon's pid differs from
	// the one reported before the change (0 expected); DaemonsRunning
	// those whose daemon runs at the end.
	DaemonsRestarted int `json:"daemons_restarted"`
	DaemonsRunning   int `json:"daemons_running"`
	// ReportsPerUnit is the host reports written from the call until
	// every unit's was applied, ÷ units.
	ReportsPerUnit       float64 `json:"host_reports_per_unit"`
	EtcdTxnsPerUnit      float64 `json:"etcd_txns_per_unit"`
	ControllerCPUSeconds float64 `json:"controller_cpu_seconds"`
	FleetCPUSeconds      float64 `json:"fleet_cpu_seconds"`
	MachineBusy          float64 `json:"machine_busy"`
}

// runClaims runs the scenario on bench.
func runClaims(ctx context.Context, e opsEnv, maxParallel string) (*claimsResults, error) {
	res := &claimsResults{Units: e.units, MaxParallel: maxParallel}
	if _, err := e.ctl.op.SetRolloutPolicy(ctx, &pb.SetRolloutPolicyRequest{Service: "bench", MaxParallel: &maxParallel}); err != nil {
		return res, fmt.Errorf("set bench's rollout policy: %w", err)
	}
	wctx, stopWatching := context.WithCancel(ctx)
	defer stopWatching()
	reports := followHostReports(wctx, e.st, "bench")
	// The reports of the running units, with their daemons' pids, are
	// listed before the change.
	if err := waitFor(ctx, func() bool { return reports.count(func(r *pb.HostReport) bool { return daemonPID(r) != 0 }) >= e.units }); err != nil {
		return res, fmt.Errorf("waiting for every unit's host report with its daemon running: %w (%d of %d)", err, reports.count(func(r *pb.HostReport) bool { return daemonPID(r) != 0 }), e.units)
	}
	before := reports.pids()

	txnsBefore, err := e.ctl.metric("lifeline_etcd_txns_total")
	if err != nil {
		return res, err
	}
	fleetBefore := e.fleetUsage()
	meter := startPhase(e.ctl.cmd.Process.Pid)
	e.prof.cpu(ctx, "claims")
	say("changing bench's configuration: %d units with 3 files and a daemon each, max-parallel %s", e.units, maxParallel)
	puts0 := reports.putCount()
	start := time.Now()
	if _, err := e.ctl.op.SetConfig(ctx, &pb.SetConfigRequest{Service: "bench", Set: map[string]string{rolloutOption: "1"}}); err != nil {
		return res, fmt.Errorf("set bench's configuration: %w", err)
	}
	res.SetConfigSeconds = time.Since(start).Seconds()
	var target int64
	last := time.Now()
	err = waitFor(ctx, func() bool {
		ro, err := e.st.Rollout(ctx, "bench")
		if err != nil || ro.Target <= 1 {
			return false
		}
		target = ro.Target
		if ro.State == pb.RolloutState_ROLLOUT_STATE_DONE && res.SecondsToRolloutDone == 0 {
			res.SecondsToRolloutDone = time.Since(start).Seconds()
		}
		applied := reports.count(func(r *pb.HostReport) bool { return r.AppliedRevision >= target })
		if time.Since(last) >= 5*time.Second {
			last = time.Now()
			say("  revision %d: %d of %d units report it applied, rollout %s (%.0f s)", target, applied, e.units, state.RolloutStateName(ro.State), time.Since(start).Seconds())
		}
		return applied >= e.units
	})
	if err != nil {
		return res, fmt.Errorf("waiting for every unit to report revision %d applied: %w", target, err)
	}
	res.SecondsToApplied = time.Since(start).Seconds()
	if res.SecondsToRolloutDone == 0 {
		res.SecondsToRolloutDone = res.SecondsToApplied
	}
	use := meter.end()
	res.ControllerCPUSeconds, res.MachineBusy = use.controller, use.busy
	res.FleetCPUSeconds = e.fleetUsage().since(fleetBefore).cpu.Seconds()
	res.ReportsPerUnit = float64(reports.putCount()-puts0) / float64(e.units)
	if txnsAfter, err := e.ctl.metric("lifeline_etcd_txns_total"); err == nil {
		res.EtcdTxnsPerUnit = (txnsAfter - txnsBefore) / float64(e.units)
	}
	reports.each(func(unit string, r *pb.HostReport) {
		if j := r.LastJob; j != nil && j.Revision == target {
			res.UnitsWithJob++
			res.TasksRun += int(j.Run)
			res.TasksChanged += int(j.Changed)
			res.TasksPruned += int(j.Pruned)
		}
		if pid := daemonPID(r); pid != 0 {
			res.DaemonsRunning++
			if pid != before[unit] {
				res.DaemonsRestarted++
			}
		}
	})
	say("  every unit reports revision %d applied after %.1f s: %d tasks run (%d changed), %d pruned; %d daemons restarted",
		target, res.SecondsToApplied, res.TasksRun, res.TasksChanged, res.TasksPruned, res.DaemonsRestarted)
	return res, nil
}

// waitFor polls cond every 250 ms until it holds or ctx ends.
func waitFor(ctx context.Context, cond func() bool) error {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}

// daemonPID is the pid of the report's running daemon, 0 when none runs.
func daemonPID(r *pb.HostReport) int64 {
	for _, d := range r.Daemons {
		if d.State == "running" {
			return d.Pid
		}
	}
	return 0
}

// hostReportFollower keeps the last host report of each unit of a
// service, as a watch of the controller's records sees them.
type hostReportFollower struct {
	mu      sync.Mutex
	reports map[string]*pb.HostReport
	puts    int
}

func followHostReports(ctx context.Context, st *state.State, service string) *hostReportFollower {
	f := &hostReportFollower{reports: map[string]*pb.HostReport{}}
	prefix := state.HostReportKey(service + "/")
	go func() {
		for b := range st.Watch(ctx, prefix, 0) {
			f.mu.Lock()
			if b.Reset {
				clear(f.reports)
			}
			for _, e := range b.Events {
				unit, ok := strings.CutPrefix(e.Key, state.HostReportKey(""))
				if !ok || !strings.HasPrefix(e.Key, prefix) {
					continue
				}
				if e.Type != state.EventPut {
					delete(f.reports, unit)
					continue
				}
				r := &pb.HostReport{}
				if proto.Unmarshal(e.Value, r) == nil {
					f.reports[unit] = r
					if !b.Reset {
						f.puts++
					}
				}
			}
			f.mu.Unlock()
		}
	}()
	return f
}

// count is how many units' reports match.
func (f *hostReportFollower) count(match func(*pb.HostReport) bool) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, r := range f.reports {
		if match(r) {
			n++
		}
	}
	return n
}

// pids returns each unit's running daemon's pid.
func (f *hostReportFollower) pids() map[string]int64 {
	out := map[string]int64{}
	f.each(func(unit string, r *pb.HostReport) { out[unit] = daemonPID(r) })
	return out
}

func (f *hostReportFollower) each(fn func(unit string, r *pb.HostReport)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for u, r := range f.reports {
		fn(u, r)
	}
}

// putCount is how many reports the watch saw written since it listed.
func (f *hostReportFollower) putCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.puts
}

// print adds the scenario's lines to the harness's summary.
func (r *claimsResults) print(row func(k, format string, v ...any)) {
	row("claims: every unit applied", "%.1f s after the config call (the call %.1f s; rollout done after %.1f s, max-parallel %s)",
		r.SecondsToApplied, r.SetConfigSeconds, r.SecondsToRolloutDone, r.MaxParallel)
	row("claims: last jobs' tasks", "%d units: %d run (%d changed), %d pruned; %.2f run and %.2f pruned a unit",
		r.UnitsWithJob, r.TasksRun, r.TasksChanged, r.TasksPruned, float64(r.TasksRun)/float64(max(r.UnitsWithJob, 1)), float64(r.TasksPruned)/float64(max(r.UnitsWithJob, 1)))
	row("claims: daemons", "%d running, %d restarted by the change", r.DaemonsRunning, r.DaemonsRestarted)
	row("claims: cost", "%.2f etcd txns and %.2f host reports a unit; CPU: controller %.1f s, fleet %.1f s; machine's CPUs %.0f%% busy",
		r.EtcdTxnsPerUnit, r.ReportsPerUnit, r.ControllerCPUSeconds, r.FleetCPUSeconds, 100*r.MachineBusy)
}
