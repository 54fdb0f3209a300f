// Command lifeline-bench measures Lifeline at scale on one host: it starts
// a real controller (lifelined controller, embedded etcd with fsync on, the
// manual provider) in a process of its own, runs M machine agents — the
// real machineagent and unitagent code, in a process of their own, joined
// as manual machines: only the local provider's process spawning is
// replaced — deploys a charm to N units spread over them, relates it to a second
// service, waits until every unit runs and is idle, then destroys
// everything and waits until etcd holds no entity keys. It measures raw
// etcd put-if-absent transactions at the same concurrency in the same run,
// for the ceiling the figures are compared with, and again at its end, to
// show how far the machine's speed moved meanwhile.
//
// It prints the figures, and writes them as one JSON object with -json.
//
//	controller (process) ── etcd (embedded, fsync on)
//	     ▲ gRPC+TLS, one connection per machine
//	lifeline-bench -fleet-worker: M × machineagent ─► unitagents ─► hooks (processes or none)
//
// run.go is the core's steps in order. The optional probes each do
// nothing unless their flag asks: -pprof (profile.go), -timeline
// (timeline.go), -dashboard-probe (dashprobe.go) and the scenarios beyond
// deploy (operations.go, rollout.go, claims.go, manifest.go). The host's
// own figures (filesystem, a directory's cost, the machine's speed) come
// from internal/hostprobe.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"
	"time"
)

// config is the harness's flags.
type config struct {
	units, machines, related int
	hooks                    string
	jsonPath                 string
	dir                      string
	lifelined, ctl           string
	timeout                  time.Duration
	rawTime                  time.Duration
	concurrency              int
	addConcurrency           int
	keep                     bool
	allowMemoryFS            bool
	pprofDir                 string
	pprofSeconds             int
	fleetProcs               int
	fleetNice                int
	fleetGC                  string
	timeline                 bool
	scenario                 string
	rolloutMaxParallel       string
	dashboardProbe           int
	manifest                 manifestConfig
}

func main() {
	var c config
	flag.IntVar(&c.units, "units", 10000, "units of the measured service")
	flag.IntVar(&c.machines, "machines", 1000, "machines to spread them over")
	flag.IntVar(&c.related, "related", 1, "units of the second service it is related to")
	flag.StringVar(&c.hooks, "hooks", "process", "hooks: process (every hook a no-op executable, a static program that exits 0: see noop.go), sh (every hook a no-op shell script) or none (the charm has none)")
	flag.StringVar(&c.jsonPath, "json", "", "write the figures to this file as one JSON object")
	flag.StringVar(&c.dir, "dir", "", "working directory (default: a new temporary one, removed at the end)")
	flag.StringVar(&c.lifelined, "lifelined", "bin/lifelined", "the lifelined binary")
	flag.StringVar(&c.ctl, "ctl", "bin/ctl", "the ctl binary, for timing ctl status --format json")
	flag.DurationVar(&c.timeout, "timeout", 30*time.Minute, "give up after this long")
	flag.DurationVar(&c.rawTime, "raw-time", 5*time.Second, "how long to measure raw etcd transactions")
	flag.IntVar(&c.concurrency, "concurrency", 0, "clients of the raw etcd measurement (default: the number of machines, at most 256)")
	flag.IntVar(&c.addConcurrency, "add-concurrency", 16, "AddUnits calls at once (one a machine) while deploying")
	flag.BoolVar(&c.keep, "keep", false, "keep the working directory")
	flag.BoolVar(&c.allowMemoryFS, "allow-memory-fs", false, "run even when the working directory is on tmpfs or ramfs, where fsync returns at once: the figures are then not a disk's, and not comparable with docs/PERFORMANCE.md's")
	flag.StringVar(&c.pprofDir, "pprof", "", "write CPU profiles of the controller and of the fleet (each of its processes) for the first -pprof-seconds of deploying, of the tail (when only the related units are busy), of the second whole-model ctl status and of destroying, and heap profiles of both before deploying, once the units run and once everything is removed (what was allocated between two of them, by pprof -diff_base, is a phase's), into this directory")
	flag.IntVar(&c.pprofSeconds, "pprof-seconds", 15, "how long each CPU profile of -pprof lasts")
	flag.IntVar(&c.fleetProcs, "fleet-procs", 1, "run the machine agents in this many processes of their own (0: in the harness's process, whose watch of the model and clock the agents' bursts then starve)")
	flag.IntVar(&c.fleetNice, "fleet-nice", 0, "run the fleet (its agents, their hooks, the related units' agents) at this nice value, the controller at 0: on one host the hooks' processes otherwise take the controller's CPU, which machines of their own would not (0: the same)")
	flag.StringVar(&c.fleetGC, "fleet-gc", "agents", "how the fleet's processes collect garbage: agents (as seldom as its machines' agents would, each in a process of its own: heapfloor.go) or process (as any one Go process would, whenever its heap doubles)")
	flag.BoolVar(&c.timeline, "timeline", false, "print, for deploying and for destroying, the life changes of units and machines and the scope entries made and removed that the harness's watch saw in each quarter second, the transactions the controller retried after a conflict, and its garbage collector's CPU")
	flag.StringVar(&c.scenario, "scenario", "deploy", "deploy (deploy, then destroy), operations (deploy; run a no-op action on every unit of the service, timed until every task ended; run a sleeping one and pause it all, timed until every task is paused; then destroy: operations.go) or rollout (deploy; change the service's configuration with -rollout-max-parallel, timed until every unit runs the new revision; then destroy: rollout.go), claims (deploy units each claiming 3 files and a daemon; change the option one file's template reads, with -rollout-max-parallel, timed until every unit's host report has the new revision applied, counting the tasks run and pruned; then destroy: claims.go) or manifest (generate a manifest of -manifest-services services, -manifest-relations relations and -manifest-units units, ctl apply it from empty, timed until it exits and until the whole manifest plans VALID with every unit settled; time ctl plan of the converged model; then destroy: manifest.go; -units and -related do not apply)")
	flag.StringVar(&c.rolloutMaxParallel, "rollout-max-parallel", "10%", "the rollout and claims scenarios' max-parallel: N units or P% of them")
	flag.IntVar(&c.dashboardProbe, "dashboard-probe", 0, "once every unit runs, log in to the dashboard as a browser does, open the model page's live stream and time this many changes (each a unit's status) from their commit to the event carrying them to the page (0: none; dashprobe.go)")
	flag.IntVar(&c.manifest.services, "manifest-services", 200, "the manifest scenario's services")
	flag.IntVar(&c.manifest.relations, "manifest-relations", 400, "the manifest scenario's relations")
	flag.IntVar(&c.manifest.units, "manifest-units", 2000, "the manifest scenario's units, spread over its services (each service's on one machine of the fleet, in turn: -machines)")
	flag.IntVar(&c.manifest.parallelism, "manifest-parallelism", 10, "the manifest scenario's ctl apply --parallelism")
	worker := flag.String("fleet-worker", "", "run as a process of the fleet, as this spec says (the harness starts these)")
	flag.Parse()
	if *worker != "" {
		if err := runWorker(*worker); err != nil {
			fmt.Fprintln(os.Stderr, "lifeline-bench fleet worker:", err)
			os.Exit(1)
		}
		return
	}
	if err := c.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "lifeline-bench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	res, err := run(ctx, c)
	if res != nil {
		res.print(os.Stdout)
		if c.jsonPath != "" {
			data, _ := json.MarshalIndent(res, "", "  ")
			if werr := os.WriteFile(c.jsonPath, append(data, '\n'), 0o644); werr != nil && err == nil {
				err = werr
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "lifeline-bench:", err)
		os.Exit(1)
	}
}

func (c *config) validate() error {
	switch {
	case c.units < 1 || c.machines < 1 || c.related < 1:
		return errors.New("-units, -machines and -related must be at least 1")
	case c.addConcurrency < 1:
		return errors.New("-add-concurrency must be at least 1")
	case c.fleetProcs < 0:
		return errors.New("-fleet-procs must be 0 or more")
	case c.fleetNice < 0 || c.fleetNice > 19:
		return errors.New("-fleet-nice must be from 0 to 19")
	case c.fleetGC != "agents" && c.fleetGC != "process":
		return fmt.Errorf("-fleet-gc %q: want agents or process", c.fleetGC)
	case !slices.Contains([]string{"deploy", "operations", "rollout", "claims", "manifest"}, c.scenario):
		return fmt.Errorf("-scenario %q: want deploy, operations, rollout, claims or manifest", c.scenario)
	case (c.scenario == "rollout" || c.scenario == "claims") && rolloutPolicyError(c.rolloutMaxParallel) != nil:
		return fmt.Errorf("-rollout-max-parallel: %v", rolloutPolicyError(c.rolloutMaxParallel))
	case c.dashboardProbe < 0:
		return errors.New("-dashboard-probe must be 0 or more")
	case c.hooks != "process" && c.hooks != "sh" && c.hooks != "none":
		return fmt.Errorf("-hooks %q: want process, sh or none", c.hooks)
	case c.scenario == "manifest":
		if err := c.manifest.validate(); err != nil {
			return err
		}
	}
	if c.concurrency == 0 {
		c.concurrency = min(c.machines, 256)
	}
	for _, p := range []*string{&c.lifelined, &c.ctl} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			return err
		}
		if _, err := os.Stat(abs); err != nil {
			return fmt.Errorf("%s: %w (run make build)", *p, err)
		}
		*p = abs
	}
	return nil
}
