package main

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/lifelinehq/lifeline/internal/names"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// selection is what ctl wait waits for: the units of the services named
// and the units named; everything when nothing is named.
type selection struct {
	services, units map[string]bool
}

// newSelection parses ctl wait's arguments: services and units, by name.
func newSelection(args []string) (selection, error) {
	sel := selection{services: map[string]bool{}, units: map[string]bool{}}
	for _, a := range args {
		switch {
		case names.ValidUnit(a):
			sel.units[a] = true
		case names.ValidService(a):
			sel.services[a] = true
		default:
			return sel, fmt.Errorf("%q is neither a service nor a unit name", a)
		}
	}
	return sel, nil
}

func (sel selection) all() bool { return len(sel.services)+len(sel.units) == 0 }

// unit says whether the unit is selected: named, of a named service, or
// a subordinate of a named unit.
func (sel selection) unit(u *pb.UnitStatus, service string) bool {
	return sel.all() || sel.services[service] || sel.units[u.Name] || u.Principal != "" && sel.units[u.Principal]
}

// settlement is how far the selected part of a model is from settled.
type settlement struct {
	// unsettled names what is not settled, but for units in error:
	// units on their way, anything selected dying (or dead, machines).
	unsettled []string
	// errors names the units whose agents are in error, with their
	// messages; retrying counts those of them still to settle (a hook
	// that will run again, or a report older than the barrier).
	errors   []string
	retrying int
	// catchingUp counts the units in unsettled that are idle and have
	// not yet reported the barrier: they have nothing to do but say so.
	catchingUp int
	// blocking names the units in error, as of the barrier, that hold up
	// something dying, and what.
	blocking []string
	units    int
	// missing are the names asked for that the model does not hold.
	missing []string
}

func (s settlement) settled() bool { return len(s.unsettled) == 0 && s.retrying == 0 }

// busy says whether anything is on its way: more than units catching up.
func (s settlement) busy() bool { return len(s.unsettled) > s.catchingUp || s.retrying > 0 }

// settle says what of the selected part of st is not settled as of
// barrier: each selected unit must have reported that its agent saw every
// change up to the barrier and has nothing left to do (idle with the unit
// running, or in an error state its retries ran out into), and nothing
// selected may be dying. A unit in error as of the barrier that a dying
// entity waits for is blocking.
func settle(st *pb.ModelStatus, barrier int64, sel selection) settlement {
	var s settlement
	machines := map[string]*pb.MachineStatus{}
	for _, m := range st.GetMachines() {
		machines[m.Id] = m
	}
	services := map[string]*pb.ServiceStatus{}
	unitsByName := map[string]*pb.UnitStatus{}
	var units []*pb.UnitStatus
	selectedServices := map[string]bool{}
	for _, svc := range st.GetServices() {
		services[svc.Name] = svc
		for _, u := range svc.Units {
			unitsByName[u.Name] = u
			if sel.unit(u, svc.Name) {
				units = append(units, u)
				selectedServices[svc.Name] = true
			}
		}
		if sel.all() || sel.services[svc.Name] {
			selectedServices[svc.Name] = true
		}
	}
	for _, name := range slices.Sorted(maps.Keys(sel.services)) {
		if services[name] == nil {
			s.missing = append(s.missing, name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(sel.units)) {
		if unitsByName[name] == nil {
			s.missing = append(s.missing, name)
		}
	}
	selectedMachines := map[string]bool{}
	for _, u := range units {
		selectedMachines[u.Machine] = true
	}
	for _, m := range sortedMachines(st.GetMachines()) {
		if (sel.all() || selectedMachines[m.Id]) && (m.Life == "dying" || m.Life == "dead") {
			s.unsettled = append(s.unsettled, fmt.Sprintf("machine %s (%s)", m.Id, m.Life))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(selectedServices)) {
		if svc := services[name]; svc.Life == "dying" && (sel.all() || sel.services[name]) {
			s.unsettled = append(s.unsettled, fmt.Sprintf("service %s (dying)", name))
		}
		if r := services[name].Rollout; rolloutMoving(r) {
			s.unsettled = append(s.unsettled, fmt.Sprintf("service %s (%s to revision %d: %d/%d updated)", name, r.State, r.Target, r.Updated, r.Units))
		}
	}
	sort.Slice(units, func(i, j int) bool { return lessUnit(units[i].Name, units[j].Name) })
	s.units = len(units)
	dyingRelations := map[string][]*pb.RelationStatus{} // by unit in scope
	for _, r := range st.GetRelations() {
		if r.Life != "dying" {
			continue
		}
		for _, u := range r.Units {
			dyingRelations[u] = append(dyingRelations[u], r)
		}
	}
	for _, u := range units {
		synced := u.SyncedRevision >= barrier
		switch {
		case u.Agent == "error":
			s.errors = append(s.errors, fmt.Sprintf("%s (%s)", u.Name, agentMessage(u)))
			if synced {
				if held := heldUp(u, services, machines, unitsByName, dyingRelations[u.Name]); len(held) > 0 {
					s.blocking = append(s.blocking, fmt.Sprintf("%s (%s) holds up %s", u.Name, agentMessage(u), strings.Join(held, ", ")))
				}
			}
			switch {
			case u.Life != "alive":
				s.unsettled = append(s.unsettled, fmt.Sprintf("%s (%s)", u.Name, u.Life))
			case !synced || !strings.HasSuffix(u.State, "-error"):
				s.retrying++
			}
		case u.Agent == "unauthenticated":
			s.unsettled = append(s.unsettled, fmt.Sprintf("%s (agent unauthenticated: %s)", u.Name, agentMessage(u)))
		case u.Life != "alive":
			s.unsettled = append(s.unsettled, fmt.Sprintf("%s (%s)", u.Name, u.Life))
		case u.Agent == "idle" && u.State == "running" && synced:
		case u.Agent == "executing" && u.AgentMessage != "":
			s.unsettled = append(s.unsettled, fmt.Sprintf("%s (%s)", u.Name, u.AgentMessage))
		case u.Agent == "idle" && u.State == "running":
			s.unsettled = append(s.unsettled, fmt.Sprintf("%s (idle, catching up)", u.Name))
			s.catchingUp++
		default:
			s.unsettled = append(s.unsettled, fmt.Sprintf("%s (%s, %s)", u.Name, u.Agent, u.State))
		}
	}
	for _, r := range st.GetRelations() {
		if r.Life == "dying" && (sel.all() || relationOf(r, selectedServices)) {
			s.unsettled = append(s.unsettled, fmt.Sprintf("relation %d %q (dying)", r.Id, r.Key))
		}
	}
	return s
}

// rolloutMoving says whether a service's rollout moves units without an
// operator: rolling, or in its canary until the canary's units are
// through (then it waits for ctl rollout promote, as a paused or failed
// one waits for resume or abort: settled).
func rolloutMoving(r *pb.ServiceRollout) bool {
	switch r.GetState() {
	case "rolling":
		return true
	case "canary":
		return !r.AwaitingPromote
	}
	return false
}

// agentMessage is what a unit's agent says of its error.
func agentMessage(u *pb.UnitStatus) string {
	for _, m := range []string{u.AgentMessage, u.Message} {
		if m != "" {
			return m
		}
	}
	return u.State
}

// heldUp names the dying entities that wait for unit u, which is in
// error: itself, its service, its machine, its principal or subordinates,
// the dying relations it must depart.
func heldUp(u *pb.UnitStatus, services map[string]*pb.ServiceStatus, machines map[string]*pb.MachineStatus, units map[string]*pb.UnitStatus, relations []*pb.RelationStatus) []string {
	var out []string
	if u.Life != "alive" {
		out = append(out, fmt.Sprintf("unit %s (%s)", u.Name, u.Life))
	}
	if svc := services[names.UnitService(u.Name)]; svc != nil && svc.Life == "dying" {
		out = append(out, fmt.Sprintf("service %s (dying)", svc.Name))
	}
	if m := machines[u.Machine]; m != nil && u.Principal == "" && m.Life == "dying" {
		out = append(out, fmt.Sprintf("machine %s (dying)", m.Id))
	}
	if p := units[u.Principal]; p != nil && p.Life != "alive" {
		out = append(out, fmt.Sprintf("unit %s (%s)", p.Name, p.Life))
	}
	for _, sub := range u.Subordinates {
		if su := units[sub]; su != nil && su.Life != "alive" {
			out = append(out, fmt.Sprintf("unit %s (%s)", su.Name, su.Life))
		}
	}
	for _, r := range relations {
		out = append(out, fmt.Sprintf("relation %d %q (dying)", r.Id, r.Key))
	}
	return out
}

// relationOf says whether one of services is in relation r, by its key
// ("app:db kv:server", "kv:cluster").
func relationOf(r *pb.RelationStatus, services map[string]bool) bool {
	for _, ep := range strings.Fields(r.Key) {
		if svc, _, _ := strings.Cut(ep, ":"); services[svc] {
			return true
		}
	}
	return false
}
