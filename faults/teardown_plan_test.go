package faults

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A teardown plan is what one topology of the teardown soak does, drawn
// from its seed: the demo charms deployed as 2 to 4 services (a logger
// subordinate among them, the others kv or app with 2 to sz.teardownUnits
// units each, a machine each), related at random (app to kv, the logger to
// some principals), then destroyed in a random order by ctl commands:
// relations, units (some forced), services, machines (some forced, the
// others once their units were destroyed), with random pauses, and
// finally whatever services are left. The same seed draws the same plan;
// the timing of the processes that carry it out is not the seed's.

// teardownStep is one ctl command of a plan.
type teardownStep struct {
	// kind is what the summary counts the step as.
	kind string
	// args are ctl's arguments; an argument machineOf(UNIT) stands for
	// UNIT's machine, read from the status when the step runs.
	args []string
	// pause comes before the step.
	pause time.Duration
	// mayRefuse says the controller may refuse the step (exit 1): a
	// plain destroy-machine while a unit there is still alive (M2).
	mayRefuse bool
}

// machineOfPrefix marks an argument standing for a unit's machine.
const machineOfPrefix = "machine-of:"

func machineOf(unit string) string { return machineOfPrefix + unit }

func (s teardownStep) String() string {
	return fmt.Sprintf("after %s: ctl %s", s.pause, strings.Join(s.args, " "))
}

// plannedService is a service of a plan: units is 0 for a subordinate.
type plannedService struct {
	name, charm string
	units       int
}

type teardownPlan struct {
	seed     uint64
	services []plannedService
	// relations are the pairs of services related, in the order
	// add-relation relates them.
	relations [][2]string
	// early says the destroys start while the units are still being
	// deployed, rather than once every unit is running.
	early bool
	// destroys are the random steps, then those destroying the services
	// left; the test then destroys the machines left.
	destroys []teardownStep
}

// units says how many units the plan deploys, subordinates included.
func (p teardownPlan) units() int {
	count := map[string]int{}
	for _, s := range p.services {
		count[s.name] = s.units
	}
	n := 0
	for _, s := range p.services {
		n += s.units
	}
	for _, rel := range p.relations {
		for i, svc := range rel {
			if count[svc] == 0 { // a subordinate: one beside each unit of the other
				n += count[rel[1-i]]
			}
		}
	}
	return n
}

// deploys are the ctl commands that build the topology.
func (p teardownPlan) deploys() [][]string {
	var out [][]string
	for _, s := range p.services {
		args := []string{"deploy", demoCharm(s.charm), s.name}
		if s.units > 0 {
			args = append(args, "-n", strconv.Itoa(s.units))
		}
		out = append(out, args)
	}
	for _, rel := range p.relations {
		out = append(out, []string{"add-relation", rel[0], rel[1]})
	}
	return out
}

// describe says what the plan does, one line a command, for the log.
func (p teardownPlan) describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %d units", p.seed, p.units())
	if p.early {
		b.WriteString(", destroyed while still deploying")
	}
	b.WriteString("\n")
	for _, args := range p.deploys() {
		fmt.Fprintf(&b, "  ctl %s\n", strings.Join(args, " "))
	}
	for _, s := range p.destroys {
		fmt.Fprintf(&b, "  %s\n", s)
	}
	return b.String()
}

// planTeardown draws the plan of seed; units bounds the units of a
// principal service (2 at least).
func planTeardown(seed uint64, units int) teardownPlan {
	r := rand.New(rand.NewPCG(seed, seed^0x7ea4d0f5))
	p := teardownPlan{seed: seed, early: r.IntN(10) < 4}
	n := 2 + r.IntN(3)
	loggers := 1
	if n == 4 && r.IntN(3) == 0 {
		loggers = 2
	}
	named := map[string]int{}
	name := func(charm string) string {
		named[charm]++
		if named[charm] == 1 {
			return charm
		}
		return charm + "-" + string(rune('a'+named[charm]-1))
	}
	var apps, kvs, principals []string
	for range n - loggers {
		charm := "kv"
		if r.IntN(2) == 0 {
			charm = "app"
		}
		s := plannedService{name: name(charm), charm: charm, units: 2 + r.IntN(max(1, units-1))}
		p.services = append(p.services, s)
		principals = append(principals, s.name)
		if charm == "app" {
			apps = append(apps, s.name)
		} else {
			kvs = append(kvs, s.name)
		}
	}
	for range loggers {
		s := plannedService{name: name("logger"), charm: "logger"}
		p.services = append(p.services, s)
		var hosts []string
		for _, pr := range principals {
			if r.IntN(10) < 6 {
				hosts = append(hosts, pr)
			}
		}
		if len(hosts) == 0 {
			hosts = append(hosts, principals[r.IntN(len(principals))])
		}
		for _, h := range hosts {
			p.relations = append(p.relations, [2]string{s.name, h})
		}
	}
	for _, a := range apps {
		for _, k := range kvs {
			if r.IntN(10) < 7 {
				p.relations = append(p.relations, [2]string{a, k})
			}
		}
	}
	r.Shuffle(len(p.relations), func(i, j int) { p.relations[i], p.relations[j] = p.relations[j], p.relations[i] })
	p.destroys = planDestroys(r, p)
	return p
}

// planDestroys draws the destroy steps of p: a random few, then the
// services left.
func planDestroys(r *rand.Rand, p teardownPlan) []teardownStep {
	services := map[string]bool{} // alive services
	var units []string            // alive principal units
	for _, s := range p.services {
		services[s.name] = true
		for i := range s.units {
			units = append(units, s.name+"/"+strconv.Itoa(i))
		}
	}
	relations := slices.Clone(p.relations) // alive relations
	var leftMachines []string              // units destroyed alone, whose machines are alive
	pause := func() time.Duration { return time.Duration(r.IntN(3000)) * time.Millisecond }
	dropUnit := func(u string) { units = slices.DeleteFunc(units, func(x string) bool { return x == u }) }
	forceFlags := func() []string {
		if r.IntN(2) == 0 {
			return []string{"--force", "--no-wait"}
		}
		return []string{"--force", "--max-wait", "3s"}
	}

	var steps []teardownStep
	for range 2 + r.IntN(6) {
		var kinds []string
		if len(relations) > 0 {
			kinds = append(kinds, "relation")
		}
		if len(units) > 0 {
			kinds = append(kinds, "unit", "unit", "machine --force")
		}
		if len(services) > 1 {
			kinds = append(kinds, "service")
		}
		if len(leftMachines) > 0 {
			kinds = append(kinds, "machine")
		}
		if len(kinds) == 0 {
			break
		}
		st := teardownStep{pause: pause()}
		switch kind := kinds[r.IntN(len(kinds))]; kind {
		case "relation":
			i := r.IntN(len(relations))
			rel := relations[i]
			relations = slices.Delete(relations, i, i+1)
			st.kind, st.args = "destroy-relation", []string{"destroy-relation", rel[0], rel[1]}
		case "unit":
			st.kind, st.args = "destroy-unit", []string{"destroy-unit"}
			for range 1 + r.IntN(min(3, len(units))) {
				u := units[r.IntN(len(units))]
				dropUnit(u)
				leftMachines = append(leftMachines, u)
				st.args = append(st.args, u)
			}
			if r.IntN(10) < 3 {
				st.kind += " --force"
				st.args = append(st.args, forceFlags()...)
			}
		case "machine --force":
			u := units[r.IntN(len(units))]
			dropUnit(u)
			st.kind, st.args = "destroy-machine --force", append([]string{"destroy-machine", machineOf(u)}, forceFlags()...)
		case "machine":
			i := r.IntN(len(leftMachines))
			u := leftMachines[i]
			leftMachines = slices.Delete(leftMachines, i, i+1)
			st.kind, st.args, st.mayRefuse = "destroy-machine", []string{"destroy-machine", machineOf(u)}, true
		case "service":
			var alive []string
			for s := range services {
				alive = append(alive, s)
			}
			slices.Sort(alive)
			svc := alive[r.IntN(len(alive))]
			delete(services, svc)
			units = slices.DeleteFunc(units, func(u string) bool { return strings.HasPrefix(u, svc+"/") })
			relations = slices.DeleteFunc(relations, func(rel [2]string) bool { return rel[0] == svc || rel[1] == svc })
			st.kind, st.args = "destroy-service", []string{"destroy-service", svc}
		}
		steps = append(steps, st)
	}

	// The services left go, in one command or one each.
	var left []string
	for _, s := range p.services {
		if services[s.name] {
			left = append(left, s.name)
		}
	}
	r.Shuffle(len(left), func(i, j int) { left[i], left[j] = left[j], left[i] })
	if r.IntN(2) == 0 {
		steps = append(steps, teardownStep{kind: "destroy-service", args: append([]string{"destroy-service"}, left...), pause: pause()})
	} else {
		for _, s := range left {
			steps = append(steps, teardownStep{kind: "destroy-service", args: []string{"destroy-service", s}, pause: pause()})
		}
	}
	return steps
}

// TestTeardownPlans checks the plans the soak draws: the same from the
// same seed, within the sizes, a subordinate related to a principal in
// each, every unit and relation named existing, and every service
// destroyed in the end.
func TestTeardownPlans(t *testing.T) {
	var early, forced int
	for seed := uint64(1); seed <= 2000; seed++ {
		p := planTeardown(seed, 12)
		if again := planTeardown(seed, 12); again.describe() != p.describe() {
			t.Fatalf("planTeardown(%d) drew\n%s\nthen\n%s", seed, p.describe(), again.describe())
		}
		if n := len(p.services); n < 2 || n > 4 {
			t.Errorf("seed %d: %d services, want 2 to 4", seed, n)
		}
		units := map[string]int{}
		for _, s := range p.services {
			units[s.name] = s.units
			if (s.charm == "logger") != (s.units == 0) || s.units != 0 && (s.units < 2 || s.units > 12) {
				t.Errorf("seed %d: service %+v, want 2 to 12 units for a principal, none for the logger", seed, s)
			}
		}
		subordinate := false
		for _, rel := range p.relations {
			_, ok0 := units[rel[0]]
			_, ok1 := units[rel[1]]
			if !ok0 || !ok1 {
				t.Errorf("seed %d: relation %v names a service not deployed", seed, rel)
			}
			subordinate = subordinate || units[rel[0]] == 0
		}
		if !subordinate {
			t.Errorf("seed %d: no subordinate related:\n%s", seed, p.describe())
		}
		destroyed := map[string]bool{}
		for _, st := range p.destroys {
			for _, a := range st.args[1:] {
				a = strings.TrimPrefix(a, machineOfPrefix)
				svc, n, isUnit := strings.Cut(a, "/")
				if i, err := strconv.Atoi(n); isUnit && (err != nil || i >= units[svc]) {
					t.Errorf("seed %d: step %s names a unit not deployed", seed, st)
				}
				if st.args[0] == "destroy-service" {
					destroyed[a] = true
				}
			}
			if strings.Contains(st.kind, "--force") {
				forced++
			}
		}
		if len(destroyed) != len(p.services) {
			t.Errorf("seed %d: services destroyed %v, want all of %v", seed, destroyed, units)
		}
		if p.early {
			early++
		}
	}
	if early == 0 || forced == 0 {
		t.Errorf("of 2000 plans, %d are destroyed while deploying and %d steps forced: want some of each", early, forced)
	}
}
