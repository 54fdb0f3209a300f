package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/lifelinehq/lifeline/embedetcd"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
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
			defer removeRunDir(dir)
		}
	}
	res := &results{Scenario: c.scenario, Units: c.units, Machines: c.machines, Related: c.related, Hooks: c.hooks, FleetProcs: min(c.fleetProcs, c.machines), FleetNice: c.fleetNice, FleetGC: c.fleetGC}
	fsName, inMemory, err := filesystemOf(dir)
	if err != nil {
		return nil, fmt.Errorf("filesystem of %s: %w", dir, err)
	}
	if inMemory && !c.allowMemoryFS {
		return nil, fmt.Errorf("%s is on %s, where fsync returns at once: etcd would pay nothing for its disk and the figures would not be a disk's; give -dir on a disk (or TMPDIR), or -allow-memory-fs to measure anyway", dir, fsName)
	}
	res.Filesystem = fsName
	cost, err := mkdirCost(dir)
	if err != nil {
		return nil, fmt.Errorf("filesystem probe: %w", err)
	}
	res.FSMkdirMicroseconds = float64(cost) / float64(time.Microsecond)
	say("a directory takes %.0f µs of CPU to make in %s, on %s (recently freed inodes slow it: docs/PERFORMANCE.md)", res.FSMkdirMicroseconds, dir, fsName)
	if inMemory {
		say("WARNING: %s keeps its files in memory and fsync there returns at once: these figures are not a disk's (-allow-memory-fs)", fsName)
	}
	if ago, ok := sinceLastRemoval(filepath.Dir(dir)); ok {
		res.PreviousRunRemovedSecondsAgo = ago.Seconds()
		if ago < settleTime {
			say("WARNING: a run removed its files from %s %s ago: the agents' directories made now pay for them (on ext4 without a journal, for up to %s): these figures are not a settled disk's", filepath.Dir(dir), ago.Round(time.Second), settleTime)
		}
	}
	res.SpeedBefore = measureSpeed()
	say("the machine's speed: %s (speedprobe.go)", res.SpeedBefore)

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

	prof, err := newProfiler(c.pprofDir, c.pprofSeconds, ctl, fl)
	if err != nil {
		return nil, err
	}

	if c.scenario == "manifest" {
		res.Manifest, err = runManifest(ctx, manifestEnv{ctl: ctl, ctlPath: c.ctl, dir: dir, hooks: c.hooks, machines: fl.ids,
			others: append([]string{idle.id}, relatedIDs...), model: model, etcd: etcd, timeout: c.timeout}, c.manifest)
		return res, err
	}
	prof.heap(ctx, "before")
	say("deploying %d units of bench on %d machines, related to %d of front", c.units, c.machines, c.related)
	start := time.Now()
	sampledNames := sampledMetrics()
	sampled := func() ([]float64, error) { return ctl.metrics(sampledNames...) }
	stopSampling := func() {}
	if c.timeline {
		model.timeline.begin(start)
		stopSampling = model.timeline.sample(ctx, sampled)
	}
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
	if c.timeline {
		stopSampling()
		model.timeline.print(os.Stdout, "deploying", clock)
	}

	if size, err := dbInUse(ctx, etcd, ctl.etcdEndpoint()); err == nil {
		res.EtcdBytesPerUnit = float64(size-sizeBefore) / float64(total)
	}
	res.PeakRSSBytesRunning = peakRSS(ctl.cmd.Process.Pid)
	res.StatusJSONSeconds, err = timeStatus(ctx, c.ctl, ctl.configPath)
	if err != nil {
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
	if c.timeline {
		model.timeline.begin(destroyStart)
		stopSampling = model.timeline.sample(ctx, sampled)
	}
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
	if c.timeline {
		stopSampling()
		model.timeline.print(os.Stdout, "destroying", clock)
	}

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
	res.SpeedAfter = measureSpeed()
	say("the machine's speed after the run: %s (%s before)", res.SpeedAfter, res.SpeedBefore)
	return res, fl.err()
}

func say(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// spread returns how many units go on each machine: n spread evenly.
func spread(n int, machines []string) map[string]int {
	out := map[string]int{}
	for i := 0; i < n; i++ {
		out[machines[i%len(machines)]]++
	}
	return out
}

// addUnits adds a service's units machine by machine, concurrency calls
// at once.
func addUnits(ctx context.Context, op pb.OperatorServiceClient, svc string, per map[string]int, concurrency int) error {
	sem := make(chan struct{}, concurrency)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for m, n := range per {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if _, err := op.AddUnits(ctx, &pb.AddUnitsRequest{Service: svc, NumUnits: int32(n), To: m}); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("add %d units of %s to machine %s: %w", n, svc, m, err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// machinesACall is how many machines destroyMachinesWhenFree names in a
// call: as many as the controller destroys in one transaction.
const machinesACall = 16

// destroyMachinesWhenFree destroys each of the machines ids as soon as the
// watch sees no alive unit on it, those free at once together, as an
// operator's `ctl destroy-machine` of them all would (DestroyMachines,
// machinesACall machines a call at most, which the controller writes in
// one transaction; 16 calls at once), and returns once all are destroyed. A
// machine the controller still finds an alive unit on (the watch runs
// behind) is tried again later.
func destroyMachinesWhenFree(ctx context.Context, op pb.OperatorServiceClient, f *follower, ids []string) error {
	left := make(map[string]bool, len(ids))
	for _, id := range ids {
		left[id] = true
	}
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for {
		mu.Lock()
		free := f.free(left)
		for _, id := range free {
			delete(left, id)
		}
		pending, failed := len(left), len(errs) > 0
		mu.Unlock()
		if failed {
			break
		}
		for todo := free; len(todo) > 0; {
			call := todo[:min(len(todo), machinesACall)]
			todo = todo[len(call):]
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				resp, err := op.DestroyMachines(ctx, &pb.DestroyMachinesRequest{Machines: call})
				mu.Lock()
				defer mu.Unlock()
				if err == nil && len(resp.GetResults()) != len(call) {
					err = fmt.Errorf("DestroyMachines answered %d machines of %d", len(resp.GetResults()), len(call))
				}
				if err != nil {
					errs = append(errs, err)
					return
				}
				for i, id := range call {
					switch r := resp.GetResults()[i]; codes.Code(r.GetCode()) {
					case codes.OK:
					case codes.FailedPrecondition:
						left[id] = true
					default:
						errs = append(errs, fmt.Errorf("destroy machine %s: %s", id, r.GetMessage()))
					}
				}
			}()
		}
		if pending == 0 && len(free) == 0 {
			wg.Wait()
			mu.Lock()
			pending = len(left)
			mu.Unlock()
			if pending == 0 {
				break
			}
		}
		select {
		case <-ctx.Done():
			wg.Wait()
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	wg.Wait()
	return errors.Join(errs...)
}

// settleQuiet is how long no unit agent's status may change for the
// units to count as settled: the related unit goes idle between its
// relation hooks, and should not be taken for done.
const settleQuiet = time.Second

// waitSettled waits until total units run and are idle, with no unit
// agent's status changing for settleQuiet, and returns when that state
// began (the last change) and how long after start each unit was first
// running, both by the times the controller stamped on the statuses.
//
// onTail is called once, when idleTail units are idle but not all (only
// the related units are busy).
func waitSettled(ctx context.Context, f *follower, total, idleTail int, start time.Time, fl *fleet, onTail func()) (time.Time, []float64, error) {
	p := newProgress(start)
	tailSeen := false
	var fleetErr error
	var units, running, idle int
	err := f.wait(ctx, 100*time.Millisecond, func() bool {
		if fleetErr = fl.err(); fleetErr != nil {
			return true
		}
		units, running, idle = f.agentCounts()
		if !tailSeen && units == total && idle >= idleTail && idle < total {
			tailSeen = true
			onTail()
		}
		if p.due() {
			p.say("%d units, %d running, %d idle", units, running, idle)
		}
		f.mu.Lock()
		quiet := time.Since(f.lastAgentChange) >= settleQuiet
		f.mu.Unlock()
		return units == total && idle == total && quiet
	})
	if fleetErr != nil {
		return time.Time{}, nil, fleetErr
	}
	if err != nil {
		return time.Time{}, nil, fmt.Errorf("waiting for units to run: %w (%d of %d running, %d idle)", err, running, total, idle)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]float64, 0, len(f.firstRunning))
	for _, t := range f.firstRunning {
		out = append(out, t.Sub(start).Seconds())
	}
	return f.lastAgentStamp, out, nil
}

// waitUnits waits until no unit is left, saying how many are left (and
// how long since start) as it goes, and returns the revision of the model
// at which the watch saw the last go.
func waitUnits(ctx context.Context, f *follower, etcd *clientv3.Client, start time.Time) (rev int64, err error) {
	p := newProgress(start)
	if err := f.wait(ctx, time.Second, func() bool {
		var inEtcd string
		if p.due() {
			// What etcd holds now, beside what the watch has seen.
			inEtcd = "?"
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			if r, err := etcd.Get(rctx, namespace+unitsPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly()); err == nil {
				inEtcd = strconv.FormatInt(r.Count, 10)
			}
			cancel()
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if inEtcd != "" {
			p.say("%d units left as the watch sees them (%d dying or dead; %s in etcd), %d machines", len(f.units), f.notAlive(), inEtcd, len(f.machines))
		}
		rev = f.rev[unitsPrefix]
		return len(f.units) == 0
	}); err != nil {
		f.mu.Lock()
		defer f.mu.Unlock()
		return 0, fmt.Errorf("waiting for units to go: %w (%d left)", err, len(f.units))
	}
	return rev, nil
}

// waitEmpty waits until etcd holds no entity keys, saying how many are
// left as it goes, and returns the first revision at which it held none.
// The follower does not watch every entity prefix: once it has seen the
// units and the machines go, the others are counted from etcd, at its
// current revision until none is left, then at each revision since the
// last that still held one, so that the revision is the one at which the
// last key went, as a watch of everything would have seen it.
func waitEmpty(ctx context.Context, f *follower, etcd *clientv3.Client, start time.Time) (rev int64, err error) {
	p := newProgress(start)
	var checked int64 // the latest revision known to hold an entity key
	var readErr error
	if err := f.wait(ctx, 20*time.Millisecond, func() bool {
		f.mu.Lock()
		machines := len(f.machines)
		seen := max(f.rev[unitsPrefix], f.rev[machinesPrefix])
		f.mu.Unlock()
		if machines > 0 {
			if p.due() {
				p.say("%d machines left", machines)
			}
			return false
		}
		if checked == 0 {
			checked = seen - 1
		}
		empty, left, cur, err := emptyAfter(ctx, etcd, namespace, checked)
		if err != nil {
			readErr = err
			return true
		}
		if left > 0 {
			checked = cur
			if p.due() {
				p.say("%d entity keys left", left)
			}
			return false
		}
		rev = empty
		return true
	}); err != nil {
		return 0, fmt.Errorf("waiting for the model to empty: %w", err)
	}
	if readErr != nil {
		return 0, fmt.Errorf("waiting for the model to empty: %w", readErr)
	}
	return rev, nil
}

// emptyAfter counts the keys under the model's entity prefixes in
// namespace ns. When there are some, it returns how many (left) and the
// current revision (cur), the next call's after. When there are none, it
// returns the first revision after after at which there were none (empty),
// reading each revision since in turn.
func emptyAfter(ctx context.Context, etcd *clientv3.Client, ns string, after int64) (empty, left, cur int64, err error) {
	left, cur, err = entityKeysAt(ctx, etcd, ns, 0)
	if err != nil || left > 0 {
		return 0, left, cur, err
	}
	for r := after + 1; r < cur; r++ {
		n, _, err := entityKeysAt(ctx, etcd, ns, r)
		if err != nil {
			return 0, 0, cur, err
		}
		if n == 0 {
			return r, 0, cur, nil
		}
	}
	return cur, 0, cur, nil
}

// entityKeysAt counts the keys under the model's entity prefixes in
// namespace ns at revision rev (the current one when 0), and returns the
// revision read.
func entityKeysAt(ctx context.Context, etcd *clientv3.Client, ns string, rev int64) (n, at int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ops := make([]clientv3.Op, len(state.EntityPrefixes))
	for i, p := range state.EntityPrefixes {
		ops[i] = clientv3.OpGet(ns+p, clientv3.WithPrefix(), clientv3.WithCountOnly(), clientv3.WithRev(rev))
	}
	resp, err := etcd.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return 0, 0, err
	}
	for _, r := range resp.Responses {
		n += r.GetResponseRange().Count
	}
	return n, resp.Header.Revision, nil
}

// progress says how a wait is going every progressEvery, with the seconds
// since it began, so that a run that stops making progress shows it.
type progress struct{ start, last time.Time }

const progressEvery = 5 * time.Second

// newProgress starts saying how a wait that began at start is going.
func newProgress(start time.Time) *progress { return &progress{start: start, last: time.Now()} }

// due reports whether it is time to say how the wait goes, and if so
// counts the time from now.
func (p *progress) due() bool {
	if time.Since(p.last) < progressEvery {
		return false
	}
	p.last = time.Now()
	return true
}

// say says how the wait goes, with the seconds since it began.
func (p *progress) say(format string, args ...any) {
	say("  "+format+" (%.0f s)", append(args, time.Since(p.start).Seconds())...)
}
