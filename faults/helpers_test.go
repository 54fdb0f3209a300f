package faults

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/lifelinehq/lifeline/internal/testing/e2etest"
)

// count counts the units of service (every service when empty) for which
// ok holds.
func count(doc *e2etest.StatusDoc, service string, ok func(e2etest.UnitDoc) bool) int {
	n := 0
	for name, svc := range doc.Services {
		if service != "" && name != service {
			continue
		}
		for _, u := range svc.Units {
			if ok(u) {
				n++
			}
		}
	}
	return n
}

func isRunning(u e2etest.UnitDoc) bool { return u.State == "running" }

func isGone(doc *e2etest.StatusDoc, units []string) int {
	n := 0
	for _, name := range units {
		if _, ok := doc.Unit(name); !ok {
			n++
		}
	}
	return n
}

// unitNames lists service/0 to service/n-1.
func unitNames(service string, from, n int) []string {
	var out []string
	for i := from; i < from+n; i++ {
		out = append(out, service+"/"+strconv.Itoa(i))
	}
	return out
}

// hookCounts reads how often each hook of a unit ran to its end, from the
// test charms' fault/hooks.log in the unit's directory on its local machine.
func hookCounts(machinesDir, machine, unit string) (map[string]int, error) {
	path := filepath.Join(machinesDir, machine, "units", strings.ReplaceAll(unit, "/", "-"), "fault", "hooks.log")
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		hook, _, _ := strings.Cut(line, " ")
		out[hook]++
	}
	return out, nil
}

// checkUnitsSettled checks that the units are exactly want, each alive,
// idle and running, with workload message msg (any when empty).
func checkUnitsSettled(t *testing.T, doc *e2etest.StatusDoc, want []string, msg string) {
	t.Helper()
	got := doc.Units()
	sort.Strings(want)
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("units are %s\nwant %s", compact(got), compact(want))
	}
	bad := 0
	for _, name := range got {
		u, _ := doc.Unit(name)
		if u.Life != "alive" || u.Agent != "idle" || u.State != "running" || u.Workload != "active" || msg != "" && u.Message != msg {
			if bad++; bad <= 10 {
				t.Errorf("unit %s = %+v, want alive, idle, running, active %q", name, u, msg)
			}
		}
	}
}

// checkOneAgentPerMachine checks that the machines are alive and started,
// that each principal unit has a machine of its own, and that each machine
// has exactly one agent process, and no other machine one.
func checkOneAgentPerMachine(t *testing.T, doc *e2etest.StatusDoc, machinesDir string) {
	t.Helper()
	agents := e2etest.MachineAgents(machinesDir)
	owner := map[string]string{}
	for _, name := range doc.Units() {
		u, _ := doc.Unit(name)
		if u.Principal != "" {
			continue
		}
		if other, ok := owner[u.Machine]; ok {
			t.Errorf("units %s and %s share machine %s: want a machine each", other, name, u.Machine)
		}
		owner[u.Machine] = name
	}
	for id, m := range doc.Machines {
		if m.Life != "alive" || m.Agent != "started" {
			t.Errorf("machine %s = %+v, want alive and started", id, m)
		}
		if pids := agents[id]; len(pids) != 1 {
			t.Errorf("machine %s has %d agent processes %v, want 1", id, len(pids), pids)
		}
	}
	for id, pids := range agents {
		if _, ok := doc.Machines[id]; !ok {
			t.Errorf("agent processes %v run for machine %s, which the model does not have", pids, id)
		}
	}
}

// compact shortens a long list for a message.
func compact(list []string) string {
	if len(list) <= 30 {
		return strings.Join(list, " ")
	}
	return fmt.Sprintf("%s ... %s (%d)", strings.Join(list[:15], " "), strings.Join(list[len(list)-5:], " "), len(list))
}
