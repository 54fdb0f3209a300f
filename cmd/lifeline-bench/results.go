package main

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/lifelinehq/lifeline/cmd/lifeline-bench/internal/hostprobe"
)

// results are the harness's figures; the JSON names are stable, as
// scripts and docs/PERFORMANCE.md read them.
type results struct {
	Scenario              string  `json:"scenario"`
	Units                 int     `json:"units"`
	Machines              int     `json:"machines"`
	Related               int     `json:"related_units"`
	Hooks                 string  `json:"hooks"`
	FleetProcs            int     `json:"fleet_procs"`
	FleetNice             int     `json:"fleet_nice"`
	FleetGC               string  `json:"fleet_gc"`
	SecondsToUnitsAdded   float64 `json:"seconds_to_units_added"`
	SecondsToRunning      float64 `json:"seconds_to_running"`
	UnitStartP50          float64 `json:"unit_start_p50_s"`
	UnitStartP99          float64 `json:"unit_start_p99_s"`
	SecondsToUnitsRemoved float64 `json:"seconds_to_units_removed"`
	SecondsToRemoved      float64 `json:"seconds_to_removed"`
	UnitsPerSecond        float64 `json:"units_per_second"`
	UnitsPerSecondDestroy float64 `json:"units_per_second_destroy"`
	EtcdTxnsTotal         int64   `json:"etcd_txns_total"`
	EtcdTxnsPerUnit       float64 `json:"etcd_txns_per_unit"`
	EtcdTxnRetries        int64   `json:"etcd_txn_retries"`
	// EtcdBusyRetries counts the writes etcd refused as too many (behind
	// applying), each sent again by the controller.
	EtcdBusyRetries int64 `json:"etcd_busy_retries"`
	// EtcdReadsAgain counts the controller's reads made again for being
	// before what its watch hub had handed out.
	EtcdReadsAgain  int64   `json:"etcd_reads_again"`
	MaxTxnOps       int64   `json:"max_txn_ops"`
	RawTxnPerSecond float64 `json:"raw_etcd_txn_per_second"`
	// RawTxnPerSecondAfter is raw etcd measured again once everything
	// is measured: the ceiling and ratios use the figure from before. 0
	// when it could not be measured (a disk stall timed it out).
	RawTxnPerSecondAfter float64 `json:"raw_etcd_txn_per_second_after"`
	// FSMkdirMicroseconds is the CPU a directory took to make in the
	// run's directory before the run (internal/hostprobe).
	FSMkdirMicroseconds float64 `json:"fs_mkdir_microseconds"`
	// Filesystem is the kind of filesystem the run's directory (etcd's
	// data, the agents') is on: with tmpfs (-allow-memory-fs) etcd's
	// fsyncs cost nothing, and the figures are not a disk's.
	Filesystem string `json:"filesystem"`
	// PreviousRunRemovedSecondsAgo is how long before this run the last
	// run in the same parent directory removed its files (internal/hostprobe); 0
	// when no run left the time there.
	PreviousRunRemovedSecondsAgo float64 `json:"previous_run_removed_seconds_ago,omitempty"`
	// SpeedBefore and SpeedAfter are the machine's speed before the run
	// and once everything is measured (internal/hostprobe): runs whose figures
	// differ were made on a machine of a different speed.
	SpeedBefore            hostprobe.Speed `json:"speed_before"`
	SpeedAfter             hostprobe.Speed `json:"speed_after"`
	FewestTxnsPerUnit      float64         `json:"fewest_txns_per_unit"`
	CeilingUnitsPerSecond  float64         `json:"ceiling_units_per_second"`
	RatioToCeiling         float64         `json:"ratio_to_ceiling"`
	RatioToCeilingDestroy  float64         `json:"ratio_to_ceiling_destroy"`
	ControllerRSSBytes     int64           `json:"controller_rss_bytes"`
	ControllerBytesPerUnit float64         `json:"controller_bytes_per_unit"`
	ControllerCPUSeconds   float64         `json:"controller_cpu_seconds"`
	// The controller's CPU in each phase, and the fraction of the
	// machine's CPU time (all its cores) that was busy in each.
	ControllerCPUSecondsDeploy  float64 `json:"controller_cpu_seconds_deploy"`
	ControllerCPUSecondsDestroy float64 `json:"controller_cpu_seconds_destroy"`
	MachineBusyDeploy           float64 `json:"machine_busy_deploy"`
	MachineBusyDestroy          float64 `json:"machine_busy_destroy"`
	// The harness's own CPU in each phase (its watch of the model, its
	// calls, its clock; with -fleet-procs 0 the fleet's too), and the
	// events its watch of the model received.
	HarnessCPUSecondsDeploy   float64 `json:"harness_cpu_seconds_deploy"`
	HarnessCPUSecondsDestroy  float64 `json:"harness_cpu_seconds_destroy"`
	HarnessWatchEventsDeploy  int64   `json:"harness_watch_events_deploy"`
	HarnessWatchEventsDestroy int64   `json:"harness_watch_events_destroy"`
	// The controller's garbage collections in each phase.
	ControllerGCsDeploy  int64 `json:"controller_gc_cycles_deploy"`
	ControllerGCsDestroy int64 `json:"controller_gc_cycles_destroy"`
	// The read and write system calls (on sockets and files alike) of the
	// controller and of the fleet's processes in each phase: most of them
	// are their gRPC connections' and the controller's etcd's.
	ControllerSyscallsDeploy  int64 `json:"controller_syscalls_deploy"`
	ControllerSyscallsDestroy int64 `json:"controller_syscalls_destroy"`
	FleetSyscallsDeploy       int64 `json:"fleet_syscalls_deploy"`
	FleetSyscallsDestroy      int64 `json:"fleet_syscalls_destroy"`
	// What the fleet (this process: the machine and unit agents) used
	// from the deploy until every unit ran, and while destroying: its CPU,
	// its hook processes' CPU, and the bytes it sent to the disk (the
	// agents' local state and charms).
	FleetCPUSecondsDeploy   float64 `json:"fleet_cpu_seconds_deploy"`
	FleetCPUSecondsDestroy  float64 `json:"fleet_cpu_seconds_destroy"`
	HookCPUSecondsDeploy    float64 `json:"hook_cpu_seconds_deploy"`
	HookCPUSecondsDestroy   float64 `json:"hook_cpu_seconds_destroy"`
	FleetWrittenBytesDeploy int64   `json:"fleet_written_bytes_deploy"`
	// Of the fleet's CPU, the related units' agents' (their processes'
	// own, their hooks' apart).
	RelatedCPUSecondsDeploy  float64 `json:"related_cpu_seconds_deploy"`
	RelatedCPUSecondsDestroy float64 `json:"related_cpu_seconds_destroy"`
	// What the controller holds once every unit runs: its resident
	// memory, Go heap in use, goroutine stacks, goroutines, and the
	// watch subscriptions its agents keep open (the watch hub's streams),
	// and the gRPC watch streams (Watch and WatchMany) that carry them.
	RunningRSSBytes int64 `json:"running_controller_rss_bytes"`
	// The controller's peak resident memory so far (VmHWM) once every
	// unit runs, and again after the timed ctl status: where in the run
	// controller_rss_bytes, the whole run's peak, was reached.
	PeakRSSBytesRunning   int64   `json:"controller_peak_rss_bytes_running"`
	PeakRSSBytesStatus    int64   `json:"controller_peak_rss_bytes_after_status"`
	RunningHeapInuseBytes int64   `json:"running_controller_heap_inuse_bytes"`
	RunningStackBytes     int64   `json:"running_controller_stack_bytes"`
	RunningGoroutines     int64   `json:"running_controller_goroutines"`
	RunningWatchStreams   int64   `json:"running_watch_streams"`
	RunningWatchRPCs      int64   `json:"running_watch_rpcs"`
	AgentRSSBytes         int64   `json:"agent_rss_bytes"`
	FleetRSSPerMachine    float64 `json:"fleet_rss_per_machine_bytes"`
	EtcdBytesPerUnit      float64 `json:"etcd_bytes_per_unit"`
	// StatusJSONSeconds times the first ctl status --format json of the
	// whole model, which the controller reads from etcd while it starts
	// keeping the decoded model (controller/modelcache), and
	// StatusJSONAgainSeconds the next, answered from that model.
	StatusJSONSeconds      float64 `json:"status_json_seconds"`
	StatusJSONAgainSeconds float64 `json:"status_json_again_seconds"`
	// StatusUnitSeconds and StatusMachineSeconds time ctl status
	// --format json bench/0 and machine 0.
	StatusUnitSeconds    float64 `json:"status_unit_seconds"`
	StatusMachineSeconds float64 `json:"status_machine_seconds"`
	// API calls a unit by method, every caller's (agents, and the
	// harness's own), from the deploy until every unit ran and while
	// destroying.
	CallsPerUnitDeploy  map[string]float64 `json:"api_calls_per_unit_deploy"`
	CallsPerUnitDestroy map[string]float64 `json:"api_calls_per_unit_destroy"`
	// Of those, the calls that failed, by method and gRPC code
	// ("LeaveScope Unavailable"), in all.
	FailedCallsDeploy  map[string]float64 `json:"api_calls_failed_deploy"`
	FailedCallsDestroy map[string]float64 `json:"api_calls_failed_destroy"`
	// The slowest calls of each phase: by method, the duration in seconds
	// (a bucket's bound of grpc_server_handling_seconds) that 99% of its
	// calls took at most; -1 when that is over the last bound (65.5 s).
	CallP99Deploy  map[string]float64 `json:"api_call_p99_seconds_deploy"`
	CallP99Destroy map[string]float64 `json:"api_call_p99_seconds_destroy"`
	// The unit agents' status reports a unit, as stored (`status
	// "message" (state)`), in the same phases: what the SetUnitStatus
	// calls said.
	ReportsPerUnitDeploy  map[string]float64 `json:"agent_reports_per_unit_deploy"`
	ReportsPerUnitDestroy map[string]float64 `json:"agent_reports_per_unit_destroy"`
	// FollowerLagSeconds is the longest the harness's watch of the model
	// took to see a unit agent's status after the controller stamped it,
	// while deploying. Seconds to running and the unit start times are
	// taken from the stamps, so the lag does not count in them.
	FollowerLagSeconds float64 `json:"follower_lag_seconds"`
	// DestroyLagSeconds is how long after the units, then the last
	// entity keys, were gone the watch saw it, by the revision clock
	// (revClock). Seconds to removed does not count it.
	DestroyLagSeconds float64 `json:"destroy_lag_seconds"`
	// Transactions retried after a conflict, by the state operation that
	// retried them, in the same phases.
	RetriesDeploy  map[string]float64 `json:"etcd_txn_retries_by_operation_deploy"`
	RetriesDestroy map[string]float64 `json:"etcd_txn_retries_by_operation_destroy"`
	// The listings the controller's watch hub read for the agents' watch
	// subscriptions while deploying, and how many of them were read
	// several at once (watchhub.Hub.List).
	ListingsDeploy       int64 `json:"watch_listings_deploy"`
	ListedTogetherDeploy int64 `json:"watch_listings_together_deploy"`
	// The embedded etcd's disk writes in the same phases: its backend's
	// commits and its WAL's fsyncs.
	DiskDeploy  map[string]diskFigures `json:"etcd_disk_deploy"`
	DiskDestroy map[string]diskFigures `json:"etcd_disk_destroy"`
	// Operations are the operations scenario's figures (operations.go).
	Operations *opsResults     `json:"operations,omitempty"`
	Rollout    *rolloutResults `json:"rollout,omitempty"`
	Claims     *claimsResults  `json:"claims,omitempty"`
	// Dashboard is the dashboard probe's figures (-dashboard-probe).
	Dashboard *dashResults `json:"dashboard,omitempty"`
	// Manifest is the manifest scenario's figures (manifest.go), which
	// has no deploy of bench and leaves the deploy's figures zero.
	Manifest *manifestResults `json:"manifest,omitempty"`
}

// diskFigures are one kind of etcd's disk writes in a phase.
type diskFigures struct {
	Count   float64 `json:"count"`
	Seconds float64 `json:"seconds"`
	// P99Seconds bounds what 99% of them took (-1: beyond the largest
	// bound).
	P99Seconds float64 `json:"p99_seconds"`
}

// diskLine says a phase's disk writes briefly.
func diskLine(d map[string]diskFigures) string {
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(d)) {
		f := d[name]
		p99 := "≤ " + seconds(f.P99Seconds)
		if f.P99Seconds < 0 {
			p99 = "beyond the largest bound"
		}
		parts = append(parts, fmt.Sprintf("%.0f %s, %.1f s in all, 99%% %s", f.Count, name, f.Seconds, p99))
	}
	return strings.Join(parts, "; ")
}

// slowCalls says the n methods whose calls took longest (p99 bounds),
// slowest first.
func slowCalls(p99 map[string]float64, n int) string {
	methods := slices.Collect(maps.Keys(p99))
	key := func(m string) float64 {
		if p99[m] < 0 {
			return math.Inf(1)
		}
		return p99[m]
	}
	slices.SortFunc(methods, func(a, b string) int {
		if c := cmp.Compare(key(b), key(a)); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	var out []string
	for _, m := range methods[:min(n, len(methods))] {
		out = append(out, fmt.Sprintf("%s ≤ %s", m, seconds(p99[m])))
	}
	return strings.Join(out, ", ")
}

// seconds says a duration bound in seconds briefly: "4 ms", "1.0 s", or
// "over 65 s" for -1.
func seconds(s float64) string {
	switch {
	case s < 0:
		return "over 65 s"
	case s < 1:
		return fmt.Sprintf("%.0f ms", s*1000)
	}
	return fmt.Sprintf("%.1f s", s)
}

// topCalls says the most made calls (or reports) a unit of a phase, most
// first.
func topCalls(calls map[string]float64, n int) string { return top(calls, n, "%.2f") }

// top says the n largest of counts, largest first, each formatted with
// verb, after their sum.
func top(calls map[string]float64, n int, verb string) string {
	methods := slices.Collect(maps.Keys(calls))
	slices.SortFunc(methods, func(a, b string) int { return cmp.Compare(calls[b], calls[a]) })
	var out []string
	sum := 0.0
	for i, m := range methods {
		sum += calls[m]
		if i < n {
			out = append(out, fmt.Sprintf("%s "+verb, m, calls[m]))
		}
	}
	return fmt.Sprintf(verb+": %s", sum, strings.Join(out, ", "))
}

func (r *results) print(w io.Writer) {
	t := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, format string, v ...any) { fmt.Fprintf(t, "%s\t"+format+"\n", append([]any{k}, v...)...) }
	if m := r.Manifest; m != nil {
		row("machines, hooks", "%d, %s", r.Machines, r.Hooks)
		row("raw etcd txn/s", "%.0f", r.RawTxnPerSecond)
		row("machine's speed", "%s before the run", r.SpeedBefore)
		m.print(row)
		t.Flush()
		return
	}
	row("units, machines, related, hooks", "%d, %d, %d, %s", r.Units, r.Machines, r.Related, r.Hooks)
	row("seconds to running", "%.1f (units added after %.1f; p50 %.1f, p99 %.1f per unit)", r.SecondsToRunning, r.SecondsToUnitsAdded, r.UnitStartP50, r.UnitStartP99)
	row("seconds to removed", "%.1f (units gone after %.1f)", r.SecondsToRemoved, r.SecondsToUnitsRemoved)
	row("harness's watch lag", "%.1f s at most deploying, %.1f s destroying (not counted in the times above)", r.FollowerLagSeconds, r.DestroyLagSeconds)
	row("units per second", "%.0f deploying, %.0f destroying", r.UnitsPerSecond, r.UnitsPerSecondDestroy)
	after := "not measured after the run"
	if r.RawTxnPerSecondAfter > 0 {
		after = fmt.Sprintf("%.0f after the run", r.RawTxnPerSecondAfter)
	}
	row("raw etcd txn/s", "%.0f: ceiling %.0f units/s at %.2f txns a unit; %s", r.RawTxnPerSecond, r.CeilingUnitsPerSecond, r.FewestTxnsPerUnit, after)
	previous := ""
	if r.PreviousRunRemovedSecondsAgo > 0 {
		previous = fmt.Sprintf("; the run before in this directory removed its files %.0f s before", r.PreviousRunRemovedSecondsAgo)
	}
	row("filesystem", "%s, %.0f µs of CPU a directory made, before the run%s", r.Filesystem, r.FSMkdirMicroseconds, previous)
	row("machine's speed", "%s before the run, %s after", r.SpeedBefore, r.SpeedAfter)
	row("ratio to ceiling", "%.2f deploying, %.2f destroying", r.RatioToCeiling, r.RatioToCeilingDestroy)
	row("etcd txns", "%d, %.1f a unit, largest %d ops; %d retried after a conflict, %d refused as too many and sent again; %d reads made again",
		r.EtcdTxnsTotal, r.EtcdTxnsPerUnit, r.MaxTxnOps, r.EtcdTxnRetries, r.EtcdBusyRetries, r.EtcdReadsAgain)
	row("controller", "%.0f MiB peak RSS (%.1f KiB a unit), %.1f CPU s (%.1f deploying, %.1f destroying); %d garbage collections deploying, %d destroying", float64(r.ControllerRSSBytes)/(1<<20), r.ControllerBytesPerUnit/1024, r.ControllerCPUSeconds, r.ControllerCPUSecondsDeploy, r.ControllerCPUSecondsDestroy, r.ControllerGCsDeploy, r.ControllerGCsDestroy)
	row("controller's peak RSS so far", "%.0f MiB once every unit ran, %.0f MiB after ctl status", float64(r.PeakRSSBytesRunning)/(1<<20), float64(r.PeakRSSBytesStatus)/(1<<20))
	row("machine's CPUs busy", "%.0f%% deploying, %.0f%% destroying", 100*r.MachineBusyDeploy, 100*r.MachineBusyDestroy)
	row("reads and writes (syscalls)", "the controller %d deploying, %d destroying; the fleet %d and %d",
		r.ControllerSyscallsDeploy, r.ControllerSyscallsDestroy, r.FleetSyscallsDeploy, r.FleetSyscallsDestroy)
	row("harness (this process)", "%.1f CPU s deploying, %.1f destroying; its watch of the model %d events deploying, %d destroying",
		r.HarnessCPUSecondsDeploy, r.HarnessCPUSecondsDestroy, r.HarnessWatchEventsDeploy, r.HarnessWatchEventsDestroy)
	where := "in the harness's process"
	if r.FleetProcs > 0 {
		where = fmt.Sprintf("in %d processes", r.FleetProcs)
	}
	if r.FleetNice > 0 {
		where += fmt.Sprintf(" at nice %d", r.FleetNice)
	}
	if r.FleetGC == "process" {
		where += ", collecting as one process"
	}
	row("fleet (agents), "+where, "%.1f CPU s deploying (hooks %.1f), %.1f destroying (hooks %.1f); %.0f MiB written deploying; the related units' agents %.1f and %.1f of it",
		r.FleetCPUSecondsDeploy, r.HookCPUSecondsDeploy, r.FleetCPUSecondsDestroy, r.HookCPUSecondsDestroy, float64(r.FleetWrittenBytesDeploy)/(1<<20), r.RelatedCPUSecondsDeploy, r.RelatedCPUSecondsDestroy)
	row("controller, all running", "%.0f MiB RSS: Go heap %.0f MiB in use, stacks %.0f MiB; %d goroutines, %d watch streams on %d gRPC streams",
		float64(r.RunningRSSBytes)/(1<<20), float64(r.RunningHeapInuseBytes)/(1<<20), float64(r.RunningStackBytes)/(1<<20), r.RunningGoroutines, r.RunningWatchStreams, r.RunningWatchRPCs)
	row("idle machine agent", "%.1f MiB RSS (the fleet: %.1f MiB a machine)", float64(r.AgentRSSBytes)/(1<<20), r.FleetRSSPerMachine/(1<<20))
	row("etcd bytes a unit", "%.0f", r.EtcdBytesPerUnit)
	row("ctl status --format json", "%.2f s first, %.2f s again (from the controller's decoded model)", r.StatusJSONSeconds, r.StatusJSONAgainSeconds)
	row("ctl status bench/0, machine 0", "%.3f s, %.3f s", r.StatusUnitSeconds, r.StatusMachineSeconds)
	row("API calls a unit, deploying", "%s", topCalls(r.CallsPerUnitDeploy, 6))
	row("API calls a unit, destroying", "%s", topCalls(r.CallsPerUnitDestroy, 6))
	row("failed calls, deploying", "%s", top(r.FailedCallsDeploy, 6, "%.0f"))
	row("failed calls, destroying", "%s", top(r.FailedCallsDestroy, 6, "%.0f"))
	row("slowest calls (p99), deploying", "%s", slowCalls(r.CallP99Deploy, 5))
	row("slowest calls (p99), destroying", "%s", slowCalls(r.CallP99Destroy, 5))
	row("watch listings, deploying", "%d, %d of them read together", r.ListingsDeploy, r.ListedTogetherDeploy)
	row("etcd's disk, deploying", "%s", diskLine(r.DiskDeploy))
	row("etcd's disk, destroying", "%s", diskLine(r.DiskDestroy))
	row("retried, deploying", "%s", top(r.RetriesDeploy, 6, "%.0f"))
	row("retried, destroying", "%s", top(r.RetriesDestroy, 6, "%.0f"))
	row("agent reports a unit, deploying", "%s", topCalls(r.ReportsPerUnitDeploy, 5))
	row("agent reports a unit, destroying", "%s", topCalls(r.ReportsPerUnitDestroy, 5))
	if o := r.Operations; o != nil {
		o.print(row)
	}
	if c := r.Claims; c != nil {
		c.print(row)
	}
	if d := r.Dashboard; d != nil {
		d.print(row)
	}
	t.Flush()
}
