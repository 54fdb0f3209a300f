package controller

import (
	"fmt"
	"strings"
	"time"

	"github.com/lifelinehq/lifeline/internal/names"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// buildStatus turns the model into what ctl status shows, including what
// each dying or dead entity is still waiting for.
func buildStatus(m *state.Model, now time.Time) *pb.ModelStatus {
	out := &pb.ModelStatus{Revision: m.Revision}
	machineUnits := map[string][]string{}
	subordinates := map[string][]string{}
	unitsOf := map[string][]*pb.Unit{}
	machines := map[string]*pb.Machine{}
	for _, mach := range m.Machines {
		machines[mach.Id] = mach
	}
	for _, u := range m.Units {
		unitsOf[u.Service] = append(unitsOf[u.Service], u)
		if u.Principal != "" {
			subordinates[u.Principal] = append(subordinates[u.Principal], u.Name)
		} else if u.MachineId != "" {
			machineUnits[u.MachineId] = append(machineUnits[u.MachineId], u.Name)
		}
	}
	unitScopes := map[string][]*pb.Relation{}
	relationsOf := map[string][]*pb.Relation{}
	for _, rel := range m.Relations {
		for _, u := range m.Scopes[rel.Id] {
			unitScopes[u] = append(unitScopes[u], rel)
		}
		seen := map[string]bool{}
		for _, ep := range rel.Endpoints {
			if !seen[ep.Service] {
				relationsOf[ep.Service] = append(relationsOf[ep.Service], rel)
				seen[ep.Service] = true
			}
		}
	}
	forced := map[string]time.Time{} // "unit/<name>" or "machine/<id>" → when forcing starts
	for _, c := range m.Cleanups {
		switch c.Kind {
		case pb.CleanupKind_CLEANUP_KIND_FORCE_UNIT:
			forced["unit/"+c.Target] = time.Unix(0, c.NotBeforeUnixNano)
		case pb.CleanupKind_CLEANUP_KIND_FORCE_MACHINE:
			forced["machine/"+c.Target] = time.Unix(0, c.NotBeforeUnixNano)
		}
	}
	forcing := func(key string) string {
		at, ok := forced[key]
		if !ok {
			return ""
		}
		if d := at.Sub(now); d > 0 {
			return fmt.Sprintf("forced removal in %s", d.Round(time.Second))
		}
		return "forced removal by the cleaner"
	}

	machineAgents := make(map[string]string, len(m.Machines))
	for _, mach := range m.Machines {
		ms := &pb.MachineStatus{
			Id: mach.Id, Life: state.LifeName(mach.Life), Instance: mach.InstanceId, Address: mach.Address,
			Agent: "pending", Units: machineUnits[mach.Id], Forced: mach.Forced,
			Owner: m.Owners["machine/"+mach.Id],
		}
		ms.Agent, ms.Message = machineAgent(m, mach.Id, mach.Life)
		machineAgents[mach.Id] = ms.Agent
		ms.Since = m.Status(state.StatusMachine, mach.Id).GetSinceUnixNano()
		switch mach.Life {
		case pb.Life_LIFE_DYING:
			for _, u := range ms.Units {
				ms.WaitingFor = append(ms.WaitingFor, "unit "+u)
			}
			if len(ms.Units) == 0 {
				ms.WaitingFor = append(ms.WaitingFor, "its agent to set it dead")
			}
			if f := forcing("machine/" + mach.Id); f != "" {
				ms.WaitingFor = append(ms.WaitingFor, f)
			}
		case pb.Life_LIFE_DEAD:
			ms.WaitingFor = []string{"the provisioner to release it"}
		}
		out.Machines = append(out.Machines, ms)
	}

	for _, svc := range m.Services {
		ss := &pb.ServiceStatus{
			Name: svc.Name, Charm: svc.Charm.GetName(), Revision: svc.Charm.GetRevision(),
			Life: state.LifeName(svc.Life), Subordinate: svc.Subordinate,
			Owner: m.Owners["service/"+svc.Name],
		}
		ro := m.Rollouts[svc.Name]
		ss.SpecRevision = ro.GetTarget()
		updated := int32(0)
		for _, u := range unitsOf[svc.Name] {
			us := unitStatus(m, u, machines[u.MachineId])
			us.Ports = m.Ports[u.Name]
			us.Leader = m.Leaders[svc.Name] == u.Name
			if ur := m.UnitRevisions[u.Name]; ur != nil {
				us.Revision = ur.Current
				if ur.Target != ur.Current {
					us.TargetRevision = ur.Target
				}
				if ro != nil && ur.Current == ro.Target {
					updated++
				}
			}
			agent, ok := machineAgents[u.MachineId]
			if !ok {
				agent, _ = machineAgent(m, u.MachineId, pb.Life_LIFE_UNSPECIFIED)
			}
			if agent == "lost" && us.Agent != "allocating" {
				us.Agent = "lost" // its agent runs inside its machine's
			}
			us.Subordinates = subordinates[u.Name]
			switch u.Life {
			case pb.Life_LIFE_DYING:
				for _, rel := range unitScopes[u.Name] {
					us.WaitingFor = append(us.WaitingFor, fmt.Sprintf("relation %d (%s)", rel.Id, rel.Key))
				}
				for _, sub := range us.Subordinates {
					us.WaitingFor = append(us.WaitingFor, "subordinate "+sub)
				}
				if len(us.WaitingFor) == 0 {
					us.WaitingFor = append(us.WaitingFor, "its agent to run stop and remove")
				}
				if f := forcing("unit/" + u.Name); f != "" {
					us.WaitingFor = append(us.WaitingFor, f)
				}
			case pb.Life_LIFE_DEAD:
				if u.Principal != "" {
					us.WaitingFor = []string{"removal by " + u.Principal + "'s agent"}
				} else {
					us.WaitingFor = []string{"removal by machine " + u.MachineId + "'s agent"}
				}
			}
			ss.Units = append(ss.Units, us)
		}
		// A service held for some of its units' sake (a selected status)
		// cannot count its rollout's units, nor those a dying one waits
		// for.
		partial := m.Partial[svc.Name]
		if ro != nil && ro.State != pb.RolloutState_ROLLOUT_STATE_DONE && !partial {
			ss.Rollout = &pb.ServiceRollout{
				State: state.RolloutStateName(ro.State), Target: ro.Target, Previous: ro.Previous,
				Updated: updated, Units: int32(len(ss.Units)), Reason: ro.Reason,
				AwaitingPromote: ro.State == pb.RolloutState_ROLLOUT_STATE_CANARY && ro.CanaryGranted >= ro.Canary && ro.Permits == 0,
			}
		}
		ss.Status, ss.Message = ServiceWorkload(ss.Units)
		if st := m.Status(state.StatusService, svc.Name); st.GetStatus() != "" {
			// Set by the charm (status-set --application): it speaks for
			// the service, as in Juju.
			ss.Status, ss.Message = st.Status, st.Message
		}
		ss.Version = m.Status(state.StatusServiceVersion, svc.Name).GetStatus()
		if svc.Life == pb.Life_LIFE_DYING {
			if n := len(ss.Units); n > 0 && !partial {
				ss.WaitingFor = append(ss.WaitingFor, plural(n, "unit"))
			}
			for _, rel := range relationsOf[svc.Name] {
				ss.WaitingFor = append(ss.WaitingFor, fmt.Sprintf("relation %d (%s)", rel.Id, rel.Key))
			}
		}
		out.Services = append(out.Services, ss)
	}

	for _, rel := range m.Relations {
		rs := &pb.RelationStatus{
			Id: rel.Id, Key: rel.Key, Life: state.LifeName(rel.Life),
			Scope: scopeName(rel.Scope), Units: m.Scopes[rel.Id], Endpoints: relationEndpoints(rel),
			Owner: m.Owners[fmt.Sprintf("relation/%d", rel.Id)],
		}
		if rel.Life == pb.Life_LIFE_DYING {
			for _, u := range rs.Units {
				rs.WaitingFor = append(rs.WaitingFor, "unit "+u+" to depart")
			}
		}
		out.Relations = append(out.Relations, rs)
	}
	return out
}

// forcingPending says whether a forced removal of m is still to start
// at now: its status then counts down to it.
func forcingPending(m *state.Model, now time.Time) bool {
	for _, c := range m.Cleanups {
		switch c.Kind {
		case pb.CleanupKind_CLEANUP_KIND_FORCE_UNIT, pb.CleanupKind_CLEANUP_KIND_FORCE_MACHINE:
			if time.Unix(0, c.NotBeforeUnixNano).After(now) {
				return true
			}
		}
	}
	return false
}

func unitStatus(m *state.Model, u *pb.Unit, mach *pb.Machine) *pb.UnitStatus {
	us := &pb.UnitStatus{
		Name: u.Name, Life: state.LifeName(u.Life), Machine: u.MachineId, Principal: u.Principal,
		Agent: "allocating", State: "new", Workload: "unknown", Address: mach.GetAddress(),
	}
	if st := m.Status(state.StatusUnitAgent, u.Name); st != nil {
		us.Agent, us.AgentMessage, us.SyncedRevision, us.AgentSince = st.Status, st.Message, st.SyncedRevision, st.SinceUnixNano
		if s := st.Data["state"]; s != "" {
			us.State = s
		}
		if st.Status == "error" || st.Status == "unauthenticated" {
			// Why the agent is stuck comes before what the charm says.
			us.Message = st.Message
		}
	}
	if st := m.Status(state.StatusUnit, u.Name); st != nil {
		us.Workload, us.WorkloadSince = st.Status, st.SinceUnixNano
		if us.Message == "" {
			us.Message = st.Message
		}
	}
	return us
}

// workloadRank orders workload statuses from the most to the least in
// need of attention; a service shows its worst unit's.
var workloadRank = map[string]int{"error": 0, "blocked": 1, "maintenance": 2, "waiting": 3, "active": 4, "unknown": 5, "terminated": 6}

// ServiceWorkload is the status a service shows when its charm set none
// (status-set --application): its worst unit's, the agent's error first.
// The dashboard derives it again when it patches a service's units.
func ServiceWorkload(units []*pb.UnitStatus) (string, string) {
	if len(units) == 0 {
		return "unknown", ""
	}
	rank := func(u *pb.UnitStatus) int {
		if u.Agent == "error" {
			return -1
		}
		if r, ok := workloadRank[u.Workload]; ok {
			return r
		}
		return len(workloadRank)
	}
	// The first of the worst, in the units' order.
	worst, worstRank := units[0], rank(units[0])
	for _, u := range units[1:] {
		if worstRank < 0 {
			break
		}
		if r := rank(u); r < worstRank {
			worst, worstRank = u, r
		}
	}
	if worstRank < 0 {
		return "error", worst.Name + ": " + worst.Message
	}
	return worst.Workload, worst.Message
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// machineAgent says how the agent of a machine whose life is life is:
// started (connected now), down (it said it stopped, or its machine is
// dead, when its agent stops without a word), lost (it was connected,
// and is not), or pending (it never was).
func machineAgent(m *state.Model, id string, life pb.Life) (agent, message string) {
	st := m.Status(state.StatusMachine, id)
	switch {
	case m.Present[names.MachineTag(id)]:
		if st != nil {
			return "started", st.Message
		}
		return "started", ""
	case life == pb.Life_LIFE_DEAD:
		return "down", "machine dead"
	case st == nil:
		return "pending", ""
	case st.Status == "down":
		return "down", st.Message
	}
	return "lost", "agent not connected"
}

// scopeName is a relation's scope as status shows it: global or
// container.
func scopeName(sc pb.Scope) string { return strings.ToLower(strings.TrimPrefix(sc.String(), "SCOPE_")) }

// endpointRoleName is an endpoint's role as status shows it: provider, requirer
// or peer.
func endpointRoleName(r pb.Role) string {
	return strings.ToLower(strings.TrimPrefix(r.String(), "ROLE_"))
}

// relationEndpoints are a relation's sides, structured.
func relationEndpoints(rel *pb.Relation) []*pb.RelationEndpointStatus {
	out := make([]*pb.RelationEndpointStatus, 0, len(rel.Endpoints))
	for _, ep := range rel.Endpoints {
		out = append(out, endpointStatus(ep))
	}
	return out
}

func endpointStatus(ep *pb.RelationEndpoint) *pb.RelationEndpointStatus {
	return &pb.RelationEndpointStatus{Service: ep.Service, Endpoint: ep.Endpoint.GetName(),
		Role: endpointRoleName(ep.Endpoint.GetRole()), Interface: ep.Endpoint.GetInterface()}
}
