package faults

import (
	"bytes"
	"fmt"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/hooks"
	"github.com/lifelinehq/lifeline/internal/testing/e2etest"
)

// TestTeardownSoak deploys random topologies of the demo charms and
// destroys them in random orders (teardown_plan_test.go), each in a
// sandbox of its own. Every topology must reach an empty model (no
// machine, service, relation or entity key left) with no unit ever shown
// in error, nothing dying without a reported blocker, no process of a
// removed unit left on its host once its machine agent had time to end it,
// and no process of any machine at the end; the invariants hold at every
// revision. A failed topology logs its seed; -faults.seed replays it alone.
func TestTeardownSoak(t *testing.T) {
	skipWhenSoaking(t)
	runTeardownSoak(t, currentSizes())
}

// leftoverGrace is how long a removed unit's processes may outlive the
// unit in the model: a unit forced out is removed by the controller, then
// its machine agent ends its processes (SIGTERM, SIGKILL 5 s later).
const leftoverGrace = 90 * time.Second

func runTeardownSoak(t *testing.T, sz sizes) {
	r := newRun(t, "teardown of random topologies of the demo charms", sz)
	seeds := make([]uint64, sz.teardownTopologies)
	for i := range seeds {
		seeds[i] = rand.Uint64()
	}
	if *seedFlag != 0 {
		seeds = []uint64{*seedFlag}
	}
	r.size("topologies", len(seeds))
	r.size("units a principal service, at most", sz.teardownUnits)
	passed := 0
	for _, seed := range seeds {
		if t.Run("seed="+strconv.FormatUint(seed, 10), func(t *testing.T) { runTeardown(t, sz, r, seed) }) {
			passed++
		}
	}
	r.count("topologies passed", passed)
	if !t.Failed() {
		r.checked("every topology: an empty model, with no entity key left in etcd")
		r.checked("no unit shown in error, and nothing dying without a reported blocker, at any status poll")
		r.checked(fmt.Sprintf("no process of a removed unit on its host %s after it left the model; no process of any machine at the end", leftoverGrace))
	}
}

// runTeardown deploys and destroys the topology of seed.
func runTeardown(t *testing.T, sz sizes, r *run, seed uint64) {
	p := planTeardown(seed, sz.teardownUnits)
	t.Logf("topology %s", p.describe())
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the topology of seed %d failed; replay it with: go test ./faults/ -run 'TestTeardownSoak' -faults.seed %d", seed, seed)
		}
	})
	r.count("units deployed, subordinates included", p.units())
	f := newFixture(t, fixtureOptions{monitor: true, coalesce: sz.monitorCoalesce()})
	c := f.startController(t)
	w := &teardownWatch{t: t, machinesDir: c.MachinesDir(), seen: map[string]string{}, gone: map[string]time.Time{}, machines: map[string]bool{}}

	for _, args := range p.deploys() {
		f.OK(t, args...)
	}
	if !p.early {
		start := time.Now()
		f.waitModel(t, "every unit running", 15*time.Minute, func(doc *e2etest.StatusDoc) bool {
			w.observe(doc)
			return settled(doc) && len(doc.Units()) == p.units()
		})
		r.sample("deploy: to every unit running", time.Since(start))
	}

	start := time.Now()
	for _, st := range p.destroys {
		f.pollFor(w, st.pause)
		args, ok := w.resolve(f, st.args)
		if !ok {
			t.Logf("skipped (the unit went with no machine): ctl %s", strings.Join(st.args, " "))
			continue
		}
		res := f.Ctl(args...)
		switch {
		case res.Code == 0:
			r.inject(st.kind)
		case st.mayRefuse && res.Code == 1:
			t.Logf("refused, as it may be: %s", res)
		default:
			t.Fatalf("%s", res)
		}
	}
	f.waitModel(t, "every service gone", 15*time.Minute, func(doc *e2etest.StatusDoc) bool {
		w.observe(doc)
		return len(doc.Services) == 0 && len(doc.Relations) == 0
	})
	// The machines left go plainly, those whose units were forced out
	// included; one refused (a unit's removal not yet seen) is asked again.
	asked := map[string]time.Time{}
	f.waitModel(t, "an empty model", 10*time.Minute, func(doc *e2etest.StatusDoc) bool {
		w.observe(doc)
		for id, m := range doc.Machines {
			if m.Life == "alive" && time.Since(asked[id]) > 5*time.Second {
				asked[id] = time.Now()
				if res := f.Ctl("destroy-machine", id); res.Code != 0 {
					t.Logf("%s", res)
				}
			}
		}
		return doc.Empty()
	})
	r.sample("teardown: from the first destroy to an empty model", time.Since(start))
	w.finish()
	f.waitNoEntities(t)
	f.checkModel(t, r)
	f.checkNoPanic(t, r)
}

// pollFor observes the status for d, at least once.
func (f *fixture) pollFor(w *teardownWatch, d time.Duration) {
	end := time.Now().Add(d)
	for {
		if doc, err := f.TryStatus(); err == nil {
			w.observe(doc)
		}
		if !time.Now().Before(end) {
			return
		}
	}
}

// teardownWatch checks each status seen: no unit in error, and no process
// of a unit left leftoverGrace after the unit left the model.
type teardownWatch struct {
	t           *testing.T
	machinesDir string
	// seen maps each unit seen to its machine ("" before it has one).
	seen map[string]string
	// gone are the units no longer in the model, and when that was seen.
	gone map[string]time.Time
	// machines are every machine seen.
	machines map[string]bool
	scanned  time.Time
}

// observe checks a status: it fails the test at once on a unit in error,
// notes the units that left the model, and, every few seconds, looks for
// the processes of those gone, failing the test on any found
// leftoverGrace after its unit went.
func (w *teardownWatch) observe(doc *e2etest.StatusDoc) {
	w.t.Helper()
	for id := range doc.Machines {
		w.machines[id] = true
	}
	now := map[string]bool{}
	for _, name := range doc.Units() {
		u, _ := doc.Unit(name)
		now[name] = true
		if u.Machine != "" {
			w.seen[name] = u.Machine
		}
		if _, ok := w.seen[name]; !ok {
			w.seen[name] = ""
		}
		if u.Agent == "error" {
			w.t.Fatalf("unit %s is in error: %s (%s)\n%s", name, u.Message, u.State, doc)
		}
	}
	for name := range w.seen {
		if _, ok := w.gone[name]; !ok && !now[name] {
			w.gone[name] = time.Now()
		}
	}
	if time.Since(w.scanned) < 2*time.Second {
		return
	}
	w.scanned = time.Now()
	if late := w.check(false); late != "" {
		w.t.Fatalf("processes of removed units are left on their hosts:\n%s", late)
	}
}

// check looks for the processes of the units gone and lists those found
// leftoverGrace after their unit went (or at all, when final).
func (w *teardownWatch) check(final bool) (late string) {
	dirs := map[string]string{} // unit's directory → unit
	for name := range w.gone {
		if m := w.seen[name]; m != "" {
			dirs[filepath.Join(w.machinesDir, m, "units", strings.ReplaceAll(name, "/", "-"))] = name
		}
	}
	var out []string
	for name, procs := range unitProcs(dirs) {
		if since := w.gone[name]; final || time.Since(since) > leftoverGrace {
			out = append(out, fmt.Sprintf("%s, gone from the model %s ago:\n%s", name, time.Since(since).Round(time.Second), e2etest.ProcList(procs)))
		}
	}
	slices.Sort(out)
	return strings.Join(out, "")
}

// finish waits until no process of a removed unit and none of any
// machine seen is left.
func (w *teardownWatch) finish() {
	w.t.Helper()
	poll.Within(w.t, "no process of a removed unit", leftoverGrace, func() (bool, string) {
		left := w.check(true)
		return left == "", left
	})
	poll.Within(w.t, "no process of any machine", time.Minute, func() (bool, string) {
		var left []e2etest.Proc
		for id := range w.machines {
			left = append(left, e2etest.MachineProcs(w.machinesDir, id)...)
		}
		return len(left) == 0, e2etest.ProcList(left)
	})
}

// resolve replaces the machineOf arguments by the units' machines: that
// shown in the status, waiting for a unit still being deployed to have
// one, or, for a unit gone, the last one seen; ok is false when the unit
// went without one.
func (w *teardownWatch) resolve(f *fixture, args []string) (out []string, ok bool) {
	w.t.Helper()
	out = slices.Clone(args)
	for i, a := range out {
		unit, isUnit := strings.CutPrefix(a, machineOfPrefix)
		if !isUnit {
			continue
		}
		var machine string
		f.waitModel(w.t, unit+"'s machine", 5*time.Minute, func(doc *e2etest.StatusDoc) bool {
			w.observe(doc)
			u, found := doc.Unit(unit)
			machine = u.Machine
			if !found {
				machine = w.seen[unit]
			}
			return machine != "" || !found
		})
		if machine == "" {
			return nil, false
		}
		out[i] = machine
	}
	return out, true
}

// unitProcs finds the live processes of the units whose directories dirs
// maps to their names: those carrying a unit's session mark (or as a
// principal's), and those whose command line or working directory is in
// a unit's directory.
func unitProcs(dirs map[string]string) map[string][]e2etest.Proc {
	out := map[string][]e2etest.Proc{}
	if len(dirs) == 0 {
		return out
	}
	e2etest.Procs(func(p e2etest.Proc) bool {
		env, _ := os.ReadFile("/proc/" + strconv.Itoa(p.PID) + "/environ")
		cmdline := strings.Join(p.Args, " ") + " "
		for dir, name := range dirs {
			if bytes.Contains(env, []byte(hooks.EnvSession+"="+dir+"\x00")) ||
				bytes.Contains(env, []byte(hooks.EnvPrincipalSession+"="+dir+"\x00")) ||
				strings.Contains(cmdline, dir+"/") || strings.Contains(cmdline, dir+" ") ||
				p.Cwd == dir || strings.HasPrefix(p.Cwd, dir+"/") {
				out[name] = append(out[name], p)
			}
		}
		return false
	})
	return out
}

// TestUnitProcs: the processes of a unit are found by its session mark,
// its principal's, their command line or their working directory, and a
// unit whose name extends another's is not taken for it.
func TestUnitProcs(t *testing.T) {
	units := filepath.Join(t.TempDir(), "units")
	dir, other := filepath.Join(units, "kv-1"), filepath.Join(units, "kv-10")
	for _, d := range []string{dir, other} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	start := func(cmd *exec.Cmd) int {
		t.Helper()
		e2etest.StartChild(t, cmd)
		return cmd.Process.Pid
	}
	sleep := func(env string, dir string, args ...string) *exec.Cmd {
		cmd := exec.Command("sh", append([]string{"-c", "exec sleep 1000"}, args...)...)
		cmd.Env = append(os.Environ(), env)
		cmd.Dir = dir
		return cmd
	}
	want := []int{
		start(sleep(hooks.EnvSession+"="+dir, "/")),
		start(sleep(hooks.EnvPrincipalSession+"="+dir, "/")),
		start(sleep("X=1", dir)),
		start(exec.Command("sh", "-c", "while :; do sleep 1; done", filepath.Join(dir, "charm", "bin", "kv-server"))),
	}
	start(sleep(hooks.EnvSession+"="+other, other, filepath.Join(other, "charm")))
	var got []int
	poll.Within(t, "the unit's processes", 30*time.Second, func() (bool, string) {
		got = got[:0]
		for _, p := range unitProcs(map[string]string{dir: "kv/1"})["kv/1"] {
			got = append(got, p.PID)
		}
		slices.Sort(got)
		slices.Sort(want)
		return slices.Equal(got, want), fmt.Sprintf("found %v, want %v", got, want)
	})
}
