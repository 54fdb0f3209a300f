package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/lifelinehq/lifeline/cmd/lifeline-bench/internal/hostprobe"
	"github.com/lifelinehq/lifeline/internal/embedetcd"
	"github.com/lifelinehq/lifeline/internal/pause"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// namespace is where the controller keeps its model in etcd (lifelined's
// default --namespace).
const namespace = "/lifeline/"

// fewestTxnsPerUnit is the fewest etcd transactions a unit's whole life in
// a relation needs under the life rules: added (AddUnits puts 14 units in
// a transaction), entering the relation's scope (1), set dying (the
// cleaner's batches hold 15 units), leaving the scope (1), set dead (1),
// removed (1). Status reports, which the rules do not need, and the
// machines' own transactions are left out.
const fewestTxnsPerUnit = 1.0/14 + 1 + 1.0/15 + 1 + 1 + 1

func run(ctx context.Context, c config) (*results, error) {
	dir := c.dir
	if dir == "" {
		d, err := os.MkdirTemp("", "ll-bench-")
		if err != nil {
			return nil, err
		}
		dir = d
		if !c.keep {
			defer hostprobe.RemoveRunDir(dir)
		}
	}
	res := &results{Scenario: c.scenario, Units: c.units, Machines: c.machines, Related: c.related, Hooks: c.hooks, FleetProcs: min(c.fleetProcs, c.machines), FleetNice: c.fleetNice, FleetGC: c.fleetGC}
	if err := probeHost(dir, c.allowMemoryFS, res); err != nil {
		return nil, err
	}

	say("starting the controller (embedded etcd, fsync on) in %s", dir)
	ctl, err := startController(ctx, c.lifelined, dir)
	if err != nil {
		return nil, err
	}
	defer ctl.stop()
	etcd, err := embedetcd.NewClient(clientv3.Config{Endpoints: []string{ctl.etcdEndpoint()}})
	if err != nil {
		return nil, err
	}
	defer etcd.Close()
	st, err := state.New(etcd, state.Config{Namespace: namespace})
	if err != nil {
		return nil, err
	}

	say("raw etcd put-if-absent transactions, %d clients, %s", c.concurrency, c.rawTime)
	// A disk stall (the last run's files being discarded, say) can time
	// a request out: the measurement is taken again, twice at most.
	for try := 1; ; try++ {
		res.RawTxnPerSecond, err = rawCeiling(ctx, etcd, c.concurrency, c.rawTime)
		if err == nil {
			break
		}
		if try == 3 || ctx.Err() != nil {
			return nil, fmt.Errorf("raw etcd: %w", err)
		}
		say("  raw etcd failed (%v): measuring again", err)
	}
	res.CeilingUnitsPerSecond = res.RawTxnPerSecond / fewestTxnsPerUnit
	res.FewestTxnsPerUnit = fewestTxnsPerUnit
	say("  %.0f txn/s: the ceiling is %.0f units/s (%.2f transactions a unit's life, at least)", res.RawTxnPerSecond, res.CeilingUnitsPerSecond, fewestTxnsPerUnit)
	sizeBefore, _ := dbInUse(ctx, etcd, ctl.etcdEndpoint())

	if c.fleetNice > 0 {
		// The controller runs already; what this process starts from
		// now on (the fleet's processes, the related units' agents and
		// every hook) takes the nice value of the thread starting it.
		if err := reniceSelf(c.fleetNice); err != nil {
			return nil, err
		}
		say("the fleet runs at nice %d", c.fleetNice)
	}
	if c.fleetProcs == 0 {
		say("starting %d machine agents", c.machines)
	} else {
		say("starting %d machine agents in %d processes", c.machines, min(c.fleetProcs, c.machines))
	}
	fl, err := startFleet(ctx, ctl, dir, c.lifelined, c.machines, c.fleetProcs, c.fleetGC == "agents")
	if err != nil {
		return nil, err
	}
	defer fl.stop()
	idle, err := startAgentProc(ctx, ctl, dir, c.lifelined, "idle")
	if err != nil {
		return nil, err
	}
	defer idle.stop()
	// Each unit of the related service runs on a machine whose agent is a
	// process of its own, as on a host of its own: in the fleet's process
	// its hooks, one after another for every arrival, would queue behind
	// a thousand machines' goroutines on one Go scheduler.
	var related []*agentProc
	var relatedIDs []string
	for i := range c.related {
		a, err := startAgentProc(ctx, ctl, dir, c.lifelined, fmt.Sprintf("related-%d", i))
		if err != nil {
			return nil, err
		}
		defer a.stop()
		related, relatedIDs = append(related, a), append(relatedIDs, a.id)
	}
	// What the fleet uses: its processes, and the related units' agents.
	relatedUsage := func() usage {
		var u usage
		for _, a := range related {
			u = u.plus(a.usage(fl.workers == nil))
		}
		return u
	}
	fleetUsage := func() usage { return fl.usage().plus(relatedUsage()) }

	hook := hookProgram(c.hooks)
	front, err := writeCharm(dir, "front", "name: front\nrequires:\n  db: bench\n", []string{"db"}, hook)
	if err != nil {
		return nil, err
	}
	bench, err := writeCharm(dir, "bench", "name: bench\nprovides:\n  db: bench\n", []string{"db"}, hook)
	if err != nil {
		return nil, err
	}
	switch c.scenario {
	case "operations":
		err = writeActions(bench, c.hooks)
	case "rollout":
		err = writeRolloutConfig(bench)
	case "claims":
		err = writeClaimsCharm(dir, bench)
	}
	if err != nil {
		return nil, err
	}
	for _, d := range []string{front, bench} {
		if _, err := upload(ctx, ctl.op, d); err != nil {
			return nil, err
		}
	}

	fctx, stopFollowing := context.WithCancel(ctx)
	defer stopFollowing()
	model := follow(fctx, st, c.timeline)
	// The clock has a connection of its own, so that its reads never
	// wait behind changes the watch has yet to take in. (Its gaps of up
	// to 1.5 s while destroying came from sharing the harness's process
	// with the fleet: hence -fleet-procs 1 by default.)
	clockConn, err := embedetcd.NewClient(clientv3.Config{Endpoints: []string{ctl.etcdEndpoint()}})
	if err != nil {
		return nil, err
	}
	defer clockConn.Close()
	clock := startRevClock(fctx, clockConn)

	// The deploy starts once every machine's agent runs: a fleet in
	// processes of its own can take seconds to dial the controller a
	// thousand times, which would be counted as the deploy's.
	agents := c.machines + 1 + c.related
	if err := model.wait(ctx, time.Second, func() bool { return model.machinesStarted() >= agents }); err != nil {
		return nil, fmt.Errorf("waiting for the machine agents to start: %w (%d of %d)", err, model.machinesStarted(), agents)
	}
	say("  all %d machine agents started", agents)

	// The optional probes, each nil (doing nothing) unless its flag
	// asks for it: -pprof (profile.go), -timeline (timeline.go);
	// -dashboard-probe runs once every unit runs (dashprobe.go).
	prof, err := newProfiler(c.pprofDir, c.pprofSeconds, ctl, fl)
	if err != nil {
		return nil, err
	}
	timeline := newTimelineProbe(c.timeline, model, clock, ctl)

	if c.scenario == "manifest" {
		res.Manifest, err = runManifest(ctx, manifestEnv{ctl: ctl, ctlPath: c.ctl, dir: dir, hooks: c.hooks, machines: fl.ids,
			others: append([]string{idle.id}, relatedIDs...), model: model, etcd: etcd, timeout: c.timeout}, c.manifest)
		return res, err
	}
	prof.heap(ctx, "before")
	say("deploying %d units of bench on %d machines, related to %d of front", c.units, c.machines, c.related)
	start := time.Now()
	timeline.begin(ctx, start)
	startUsage, startRelated := fleetUsage(), relatedUsage()
	deployMeter := startPhase(ctl.cmd.Process.Pid)
	model.takeEvents()
	countsBefore, err := ctl.counters()
	if err != nil {
		return nil, err
	}
	prof.cpu(ctx, "deploy")
	if _, err := ctl.op.Deploy(ctx, &pb.DeployRequest{Charm: "front", NumUnits: 0}); err != nil {
		return nil, err
	}
	if _, err := ctl.op.Deploy(ctx, &pb.DeployRequest{Charm: "bench", NumUnits: 0}); err != nil {
		return nil, err
	}
	if _, err := ctl.op.AddRelation(ctx, &pb.AddRelationRequest{Endpoints: []string{"front", "bench"}}); err != nil {
		return nil, err
	}
	if err := addUnits(ctx, ctl.op, "front", spread(c.related, relatedIDs), c.addConcurrency); err != nil {
		return nil, err
	}
	if err := addUnits(ctx, ctl.op, "bench", spread(c.units, fl.ids), c.addConcurrency); err != nil {
		return nil, err
	}
	total := c.units + c.related
	res.SecondsToUnitsAdded = time.Since(start).Seconds()
	// The tail: every unit of bench idle, front's still running the
	// relation hooks of their arrivals, one after another.
	tail := func() {
		if c.pprofDir != "" && time.Since(start) > time.Duration(c.pprofSeconds+1)*time.Second {
			say("  profiling the tail: only the units of front are busy")
			prof.cpu(ctx, "tail")
		}
	}
	settled, firstRunning, err := waitSettled(ctx, model, total, c.units, start, fl, tail)
	if err != nil {
		return res, err
	}
	deployUsage := fleetUsage().since(startUsage)
	res.RelatedCPUSecondsDeploy = relatedUsage().since(startRelated).cpu.Seconds()
	deployUse := deployMeter.end()
	res.ControllerCPUSecondsDeploy, res.MachineBusyDeploy, res.HarnessCPUSecondsDeploy = deployUse.controller, deployUse.busy, deployUse.harness
	res.HarnessWatchEventsDeploy = model.takeEvents()
	res.FleetCPUSecondsDeploy, res.HookCPUSecondsDeploy = deployUsage.cpu.Seconds(), deployUsage.children.Seconds()
	res.FleetWrittenBytesDeploy = deployUsage.written
	res.ControllerSyscallsDeploy, res.FleetSyscallsDeploy = deployUse.controllerSyscalls, deployUsage.syscalls
	res.SecondsToRunning = settled.Sub(start).Seconds()
	res.UnitsPerSecond = float64(c.units) / res.SecondsToRunning
	res.RatioToCeiling = res.UnitsPerSecond / res.CeilingUnitsPerSecond
	res.UnitStartP50, res.UnitStartP99 = percentile(firstRunning, 0.50), percentile(firstRunning, 0.99)
	model.mu.Lock()
	res.FollowerLagSeconds = model.maxLag.Seconds()
	model.mu.Unlock()
	countsRunning, err := ctl.counters()
	if err != nil {
		return res, err
	}
	res.DiskDeploy = diskWrites(countsBefore, countsRunning)
	res.RetriesDeploy = perUnit(countsBefore.retries, countsRunning.retries, 1)
	res.CallsPerUnitDeploy = perUnit(countsBefore.calls, countsRunning.calls, total)
	res.FailedCallsDeploy = perUnit(countsBefore.failed, countsRunning.failed, 1)
	res.CallP99Deploy = slowest(countsBefore, countsRunning)
	res.ListingsDeploy = int64(countsRunning.listings - countsBefore.listings)
	res.ControllerGCsDeploy = int64(countsRunning.gcs - countsBefore.gcs)
	res.ListedTogetherDeploy = int64(countsRunning.together - countsBefore.together)
	res.ReportsPerUnitDeploy = model.takeReports(total)
	say("  all %d units running and idle after %.1f s", total, res.SecondsToRunning)
	timeline.end("deploying")

	if size, err := dbInUse(ctx, etcd, ctl.etcdEndpoint()); err == nil {
		res.EtcdBytesPerUnit = float64(size-sizeBefore) / float64(total)
	}
	res.PeakRSSBytesRunning = peakRSS(ctl.cmd.Process.Pid)
	res.StatusJSONSeconds, err = timeStatus(ctx, c.ctl, ctl.configPath)
	if err != nil {
		return res, err
	}
	if err := ctl.waitModelCache(ctx); err != nil {
		return res, err
	}
	// With -pprof, the controller's CPU profile covers this call alone
	// ("status": the fleet is idle).
	if prof != nil {
		if err := prof.wait(); err != nil {
			return res, err
		}
		prof.cpu(ctx, "status")
		if !pause.For(ctx, 300*time.Millisecond) {
			return res, ctx.Err()
		}
	}
	if res.StatusJSONAgainSeconds, err = timeStatus(ctx, c.ctl, ctl.configPath); err != nil {
		return res, err
	}
	if err := prof.wait(); err != nil {
		return res, err
	}
	// Selectors answer in time proportional to what they select: one
	// unit, one machine.
	if res.StatusUnitSeconds, err = timeStatus(ctx, c.ctl, ctl.configPath, "bench/0"); err != nil {
		return res, err
	}
	if res.StatusMachineSeconds, err = timeStatus(ctx, c.ctl, ctl.configPath, "machine", "0"); err != nil {
		return res, err
	}
	res.PeakRSSBytesStatus = peakRSS(ctl.cmd.Process.Pid)
	res.AgentRSSBytes = currentRSS(idle.cmd.Process.Pid)
	res.FleetRSSPerMachine = float64(fl.rss()) / float64(c.machines)
	res.RunningRSSBytes = currentRSS(ctl.cmd.Process.Pid)
	for _, m := range []struct {
		name string
		v    *int64
	}{
		{"go_memstats_heap_inuse_bytes", &res.RunningHeapInuseBytes},
		{"go_memstats_stack_inuse_bytes", &res.RunningStackBytes},
		{"go_goroutines", &res.RunningGoroutines},
		{"lifeline_watch_streams", &res.RunningWatchStreams},
		{"lifeline_agent_watch_rpcs", &res.RunningWatchRPCs},
	} {
		if v, err := ctl.metric(m.name); err == nil {
			*m.v = int64(v)
		}
	}
	if err := prof.wait(); err != nil {
		return res, err
	}
	prof.heap(ctx, "running")
	if c.dashboardProbe > 0 {
		if res.Dashboard, err = probeDashboard(ctx, ctl, st, "bench", c.units, c.dashboardProbe); err != nil {
			return res, err
		}
	}
	if c.scenario != "deploy" {
		env := opsEnv{ctl: ctl, st: st, clock: clock, fleetUsage: fleetUsage, raw: res.RawTxnPerSecond, units: c.units, machines: c.machines, prof: prof}
		switch c.scenario {
		case "operations":
			res.Operations, err = runOperations(ctx, env)
		case "rollout":
			res.Rollout, err = runRollout(ctx, env, c.rolloutMaxParallel)
		case "claims":
			res.Claims, err = runClaims(ctx, env, c.rolloutMaxParallel)
		}
		if err != nil {
			return res, err
		}
		// Destroying is counted from here: the scenario's calls and
		// reports are not its.
		if countsRunning, err = ctl.counters(); err != nil {
			return res, err
		}
		model.takeReports(total)
	}

	say("destroying everything")
	destroyStart := time.Now()
	timeline.begin(ctx, destroyStart)
	destroyUsage, destroyRelated := fleetUsage(), relatedUsage()
	destroyMeter := startPhase(ctl.cmd.Process.Pid)
	model.takeEvents()
	prof.cpu(ctx, "destroy")
	for _, svc := range []string{"bench", "front"} {
		if _, err := ctl.op.DestroyService(ctx, &pb.DestroyServiceRequest{Service: svc}); err != nil {
			return res, err
		}
	}
	// The machines are destroyed as an operator's script would, each as
	// soon as the rules allow it (M2: once no unit on it is alive), while
	// their units go. The removals are timed by the revisions at which
	// the watch saw them done; the watch's lag is not counted.
	machinesDone := make(chan error, 1)
	go func() {
		machinesDone <- destroyMachinesWhenFree(ctx, ctl.op, model, append(append(fl.ids, idle.id), relatedIDs...))
	}()
	unitsGoneRev, err := waitUnits(ctx, model, etcd, destroyStart)
	if err != nil {
		return res, err
	}
	unitsGone, lag := clock.seen(ctx, unitsGoneRev)
	res.SecondsToUnitsRemoved = unitsGone.Sub(destroyStart).Seconds()
	if err := <-machinesDone; err != nil {
		return res, err
	}
	emptyRev, err := waitEmpty(ctx, model, etcd, destroyStart)
	if err != nil {
		return res, err
	}
	empty, emptyLag := clock.seen(ctx, emptyRev)
	prof.heap(ctx, "removed")
	res.DestroyLagSeconds = max(lag, emptyLag).Seconds()
	res.SecondsToRemoved = empty.Sub(destroyStart).Seconds()
	destroyUsage = fleetUsage().since(destroyUsage)
	res.RelatedCPUSecondsDestroy = relatedUsage().since(destroyRelated).cpu.Seconds()
	destroyUse := destroyMeter.end()
	res.ControllerCPUSecondsDestroy, res.MachineBusyDestroy, res.HarnessCPUSecondsDestroy = destroyUse.controller, destroyUse.busy, destroyUse.harness
	res.HarnessWatchEventsDestroy = model.takeEvents()
	res.FleetCPUSecondsDestroy, res.HookCPUSecondsDestroy = destroyUsage.cpu.Seconds(), destroyUsage.children.Seconds()
	res.ControllerSyscallsDestroy, res.FleetSyscallsDestroy = destroyUse.controllerSyscalls, destroyUsage.syscalls
	res.UnitsPerSecondDestroy = float64(c.units) / res.SecondsToRemoved
	res.RatioToCeilingDestroy = res.UnitsPerSecondDestroy / res.CeilingUnitsPerSecond
	countsEnd, err := ctl.counters()
	if err != nil {
		return res, err
	}
	res.DiskDestroy = diskWrites(countsRunning, countsEnd)
	res.ControllerGCsDestroy = int64(countsEnd.gcs - countsRunning.gcs)
	res.RetriesDestroy = perUnit(countsRunning.retries, countsEnd.retries, 1)
	res.CallsPerUnitDestroy = perUnit(countsRunning.calls, countsEnd.calls, total)
	res.FailedCallsDestroy = perUnit(countsRunning.failed, countsEnd.failed, 1)
	res.CallP99Destroy = slowest(countsRunning, countsEnd)
	res.ReportsPerUnitDestroy = model.takeReports(total)
	say("  the keyspace holds no entity keys after %.1f s", res.SecondsToRemoved)
	timeline.end("destroying")

	txns, err := ctl.metric("lifeline_etcd_txns_total")
	if err != nil {
		return res, err
	}
	res.EtcdTxnsTotal = int64(txns)
	res.EtcdTxnsPerUnit = txns / float64(total)
	maxOps, err := ctl.metric("lifeline_etcd_txn_max_ops")
	if err != nil {
		return res, err
	}
	res.MaxTxnOps = int64(maxOps)
	if retries, err := ctl.metric("lifeline_etcd_txn_retries_total"); err == nil {
		res.EtcdTxnRetries = int64(retries)
	}
	if busy, err := ctl.metric("lifeline_etcd_busy_retries_total"); err == nil {
		res.EtcdBusyRetries = int64(busy)
	}
	if again, err := ctl.metric("lifeline_etcd_reads_again_total"); err == nil {
		res.EtcdReadsAgain = int64(again)
	}
	rss, cpu, err := procUsage(ctl.cmd.Process.Pid)
	if err != nil {
		return res, err
	}
	res.ControllerRSSBytes, res.ControllerCPUSeconds = rss, cpu.Seconds()
	res.ControllerBytesPerUnit = float64(rss) / float64(total)
	if err := prof.wait(); err != nil {
		return res, err
	}
	// Raw etcd again, last, so that nothing above counts it: how far the
	// machine's speed moved during the run, which the ratios do not see.
	say("raw etcd put-if-absent transactions again, after the run")
	if res.RawTxnPerSecondAfter, err = rawCeiling(ctx, etcd, c.concurrency, c.rawTime); err != nil {
		say("  raw etcd failed (%v): not measured after the run", err)
	} else {
		say("  %.0f txn/s (%.0f before the run)", res.RawTxnPerSecondAfter, res.RawTxnPerSecond)
	}
	res.SpeedAfter = hostprobe.MeasureSpeed()
	say("the machine's speed after the run: %s (%s before)", res.SpeedAfter, res.SpeedBefore)
	return res, fl.err()
}

func say(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}
