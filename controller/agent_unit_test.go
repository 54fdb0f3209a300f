package controller_test

import (
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/lifelinehq/lifeline/internal/testing/controllertest"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// The unit agents' calls; see agentModel for the model each case starts from.

func wantLife(unit, want string) func(*testing.T, *agentModel) {
	return func(t *testing.T, m *agentModel) {
		if got := m.life(unit); got != want {
			t.Errorf("unit %s is %s, want %s", unit, got, want)
		}
	}
}

func setUnitDying(unit string) agentCall {
	return func(t *testing.T, m *agentModel, c pb.AgentServiceClient) error {
		_, err := c.SetUnitDying(m.ctx, &pb.SetUnitDyingRequest{Unit: unit})
		return err
	}
}

func TestAgentSetUnitDying(t *testing.T) {
	runAgentCases(t, []agentCase{
		{name: "itself", as: "unit-kv/0", call: setUnitDying("kv/0"), check: wantLife("kv/0", "dying")},
		{name: "its subordinate", as: "unit-app/0", call: setUnitDying("logger/0"), check: wantLife("logger/0", "dying")},
		{name: "again", as: "unit-kv/0", setup: func(m *agentModel) {
			m.ok("DestroyUnit", m.st.DestroyUnit(m.ctx, "kv/0", state.DestroyOptions{}))
		}, call: setUnitDying("kv/0"), check: wantLife("kv/0", "dying")},
		{name: "another unit of its service", as: "unit-kv/0", call: setUnitDying("kv/1"), code: codes.PermissionDenied, msg: "unit kv/0's agent may not destroy unit kv/1"},
		{name: "another service's unit", as: "unit-kv/0", call: setUnitDying("app/0"), code: codes.PermissionDenied, msg: "unit kv/0's agent may not destroy unit app/0"},
		{name: "its principal", as: "unit-logger/0", call: setUnitDying("app/0"), code: codes.PermissionDenied, msg: "unit logger/0's agent may not destroy unit app/0: it is not a subordinate of logger/0"},
		{name: "another principal's subordinate", as: "unit-app/0", call: setUnitDying("logger/1"), code: codes.PermissionDenied, msg: "may not destroy unit logger/1"},
		{name: "by a machine agent", as: "machine-0", call: setUnitDying("kv/0"), code: codes.PermissionDenied, msg: "machine 0's agent may not destroy unit kv/0"},
		{name: "no such unit", as: "unit-app/0", call: setUnitDying("logger/9"), code: codes.NotFound, msg: "unit logger/9 not found"},
		{name: "malformed name", as: "unit-kv/0", call: setUnitDying("kv/00"), code: codes.InvalidArgument, msg: "invalid unit name"},
	})
}

func ensureUnitDead(unit string) agentCall {
	return func(t *testing.T, m *agentModel, c pb.AgentServiceClient) error {
		_, err := c.EnsureUnitDead(m.ctx, &pb.EnsureUnitDeadRequest{Unit: unit})
		return err
	}
}

// ensureUnitDeadLeaving is ensureUnitDead carrying the departures from
// the relations rels returns.
func ensureUnitDeadLeaving(unit string, rels func(*agentModel) []int64) agentCall {
	return func(t *testing.T, m *agentModel, c pb.AgentServiceClient) error {
		_, err := c.EnsureUnitDead(m.ctx, &pb.EnsureUnitDeadRequest{Unit: unit, LeaveScopes: rels(m)})
		return err
	}
}

func TestAgentEnsureUnitDead(t *testing.T) {
	leave := func(unit string) func(*agentModel) {
		return func(m *agentModel) {
			for _, rel := range []int64{m.global, m.container} {
				m.ok("LeaveScope", m.st.LeaveScope(m.ctx, rel, unit))
			}
			m.ok("DestroyUnit", m.st.DestroyUnit(m.ctx, unit, state.DestroyOptions{}))
		}
	}
	destroy := func(unit string) func(*agentModel) {
		return func(m *agentModel) { m.ok("DestroyUnit", m.st.DestroyUnit(m.ctx, unit, state.DestroyOptions{})) }
	}
	rels := func(ids ...func(*agentModel) int64) func(*agentModel) []int64 {
		return func(m *agentModel) []int64 {
			out := make([]int64, len(ids))
			for i, id := range ids {
				out[i] = id(m)
			}
			return out
		}
	}
	inGlobal := func(unit string, want bool) func(*testing.T, *agentModel) {
		return func(t *testing.T, m *agentModel) {
			members, err := m.st.ScopeMembers(m.ctx, m.global)
			if err != nil {
				t.Fatal(err)
			}
			if got := slices.Contains(members, unit); got != want {
				t.Errorf("unit %s in relation %d's scope: %v, want %v (members %v)", unit, m.global, got, want, members)
			}
		}
	}
	both := func(checks ...func(*testing.T, *agentModel)) func(*testing.T, *agentModel) {
		return func(t *testing.T, m *agentModel) {
			for _, c := range checks {
				c(t, m)
			}
		}
	}
	tooMany := func(m *agentModel) []int64 { return make([]int64, 257) }
	runAgentCases(t, []agentCase{
		{name: "leaving its scope first", as: "unit-kv/0", setup: destroy("kv/0"), call: ensureUnitDeadLeaving("kv/0", rels(relGlobal)),
			check: both(wantLife("kv/0", "dead"), inGlobal("kv/0", false))},
		{name: "leaving a relation gone and its scope", as: "unit-kv/0", setup: destroy("kv/0"), call: ensureUnitDeadLeaving("kv/0", rels(relationID(99), relGlobal)),
			check: wantLife("kv/0", "dead")},
		{name: "leaving another scope than its own (U3)", as: "unit-kv/0", setup: destroy("kv/0"), call: ensureUnitDeadLeaving("kv/0", rels(relKVPeer)),
			code: codes.FailedPrecondition, msg: "unit kv/0 is still in the scope of relation", check: both(wantLife("kv/0", "dying"), inGlobal("kv/0", true))},
		{name: "leaving another service's relation", as: "unit-kv/0", setup: destroy("kv/0"), call: ensureUnitDeadLeaving("kv/0", rels(relContainer, relGlobal)),
			code: codes.PermissionDenied, msg: "service kv is not in it", check: both(wantLife("kv/0", "dying"), inGlobal("kv/0", true))},
		{name: "leaving too many", as: "unit-kv/0", setup: destroy("kv/0"), call: ensureUnitDeadLeaving("kv/0", tooMany),
			code: codes.InvalidArgument, msg: "at most 256 scopes", check: both(wantLife("kv/0", "dying"), inGlobal("kv/0", true))},
		{name: "out of scope", as: "unit-kv/0", setup: leave("kv/0"), call: ensureUnitDead("kv/0"), check: wantLife("kv/0", "dead")},
		{name: "still in a scope (U3)", as: "unit-kv/0", call: ensureUnitDead("kv/0"), code: codes.FailedPrecondition, msg: "unit kv/0 is still in the scope of relation"},
		{name: "with a subordinate (U3)", as: "unit-app/0", setup: leave("app/0"), call: ensureUnitDead("app/0"), code: codes.FailedPrecondition, msg: "unit app/0 still has subordinate logger/0"},
		{name: "its subordinate", as: "unit-app/0", setup: leave("logger/0"), call: ensureUnitDead("logger/0"), code: codes.PermissionDenied, msg: "unit app/0's agent may not set dead unit logger/0"},
		{name: "another unit", as: "unit-kv/0", setup: leave("kv/1"), call: ensureUnitDead("kv/1"), code: codes.PermissionDenied, msg: "may not set dead unit kv/1"},
		{name: "by a machine agent", as: "machine-0", setup: leave("kv/0"), call: ensureUnitDead("kv/0"), code: codes.PermissionDenied, msg: "machine 0's agent may not set dead unit kv/0"},
		{name: "malformed name", as: "unit-kv/0", call: ensureUnitDead(""), code: codes.InvalidArgument, msg: "invalid unit name"},
	})
}

func addSubordinate(principal, service string) agentCall {
	return func(t *testing.T, m *agentModel, c pb.AgentServiceClient) error {
		resp, err := c.AddSubordinate(m.ctx, &pb.AddSubordinateRequest{Principal: principal, Service: service})
		if err == nil && (resp.Unit.GetPrincipal() != principal || resp.Unit.GetService() != service) {
			t.Errorf("AddSubordinate(%s, %s) = %v, want a unit of %s beside %s", principal, service, resp.Unit, service, principal)
		}
		return err
	}
}

func TestAgentAddSubordinate(t *testing.T) {
	// app/2 is a new principal on machine 0, beside kv/0.
	app2 := func(m *agentModel) { m.addUnits("app", 1, state.Placement{Machine: "0"}) }
	runAgentCases(t, []agentCase{
		{name: "new", as: "unit-app/2", setup: app2, call: addSubordinate("app/2", "logger"),
			check: func(t *testing.T, m *agentModel) {
				if u := m.unit("logger/2"); u.GetPrincipal() != "app/2" || u.GetMachineId() != "0" {
					t.Errorf("unit logger/2 = %v, want app/2's subordinate on machine 0", u)
				}
			}},
		{name: "existing", as: "unit-app/0", call: addSubordinate("app/0", "logger")},
		{name: "not related in container scope", as: "unit-kv/0", call: addSubordinate("kv/0", "logger"), code: codes.PermissionDenied,
			msg: "unit kv/0's agent may not add a unit of logger: services kv and logger are not related in container scope"},
		{name: "to another principal", as: "unit-app/2", setup: app2, call: addSubordinate("app/1", "logger"), code: codes.PermissionDenied, msg: "unit app/2's agent may not add a subordinate to unit app/1"},
		{name: "by a machine agent", as: "machine-0", setup: app2, call: addSubordinate("app/2", "logger"), code: codes.PermissionDenied, msg: "machine 0's agent may not add a subordinate to unit app/2"},
		{name: "relation dying", as: "unit-app/2", setup: func(m *agentModel) {
			app2(m)
			m.ok("DestroyRelation", m.st.DestroyRelation(m.ctx, m.container))
		}, call: addSubordinate("app/2", "logger"), code: codes.FailedPrecondition, msg: "is dying: subordinates are added only for an alive relation"},
		{name: "principal dying (U1)", as: "unit-app/2", setup: func(m *agentModel) {
			app2(m)
			m.ok("DestroyUnit", m.st.DestroyUnit(m.ctx, "app/2", state.DestroyOptions{}))
		}, call: addSubordinate("app/2", "logger"), code: codes.FailedPrecondition, msg: "unit app/2 is dying: subordinates are added only to an alive principal"},
		{name: "no such service", as: "unit-app/0", call: addSubordinate("app/0", "nosuch"), code: codes.NotFound, msg: "service nosuch not found"},
		{name: "its own service", as: "unit-app/0", call: addSubordinate("app/0", "app"), code: codes.InvalidArgument, msg: "cannot be its own service's subordinate"},
		{name: "malformed service", as: "unit-app/0", call: addSubordinate("app/0", "Logger"), code: codes.InvalidArgument, msg: "invalid service name"},
	})
}

func enterScope(rel func(*agentModel) int64, unit string, settings map[string]string) agentCall {
	return func(t *testing.T, m *agentModel, c pb.AgentServiceClient) error {
		_, err := c.EnterScope(m.ctx, &pb.EnterScopeRequest{Relation: rel(m), Unit: unit, Settings: settings})
		return err
	}
}

func relGlobal(m *agentModel) int64    { return m.global }
func relContainer(m *agentModel) int64 { return m.container }
func relKVPeer(m *agentModel) int64    { return m.kvPeer }
func relationID(id int64) func(*agentModel) int64 {
	return func(*agentModel) int64 { return id }
}

func TestAgentEnterScope(t *testing.T) {
	runAgentCases(t, []agentCase{
		{name: "its service's relation", as: "unit-kv/1", call: enterScope(relGlobal, "kv/1", map[string]string{"host": "kv1"}),
			check: func(t *testing.T, m *agentModel) {
				if got := m.settings(m.global, "kv/1"); got["host"] != "kv1" {
					t.Errorf("settings of kv/1 = %v, want host=kv1", got)
				}
			}},
		{name: "its peer relation", as: "unit-kv/1", call: enterScope(relKVPeer, "kv/1", nil)},
		{name: "relation dying (R1)", as: "unit-kv/1", setup: func(m *agentModel) {
			m.ok("DestroyRelation", m.st.DestroyRelation(m.ctx, m.global))
		}, call: enterScope(relGlobal, "kv/1", nil), code: codes.FailedPrecondition, msg: "is dying: units enter only an alive relation"},
		{name: "as another unit", as: "unit-kv/0", call: enterScope(relGlobal, "kv/1", nil), code: codes.PermissionDenied, msg: "unit kv/0's agent may not enter a relation as unit kv/1"},
		{name: "another service's relation", as: "unit-kv/0", call: enterScope(relContainer, "kv/0", nil), code: codes.PermissionDenied,
			msg: "unit kv/0's agent may not enter relation 2 (app:juju-info logger:host): service kv is not in it"},
		{name: "by a machine agent", as: "machine-1", call: enterScope(relGlobal, "kv/1", nil), code: codes.PermissionDenied, msg: "machine 1's agent may not enter a relation as unit kv/1"},
		{name: "no such relation", as: "unit-kv/1", call: enterScope(relationID(99), "kv/1", nil), code: codes.NotFound, msg: "relation 99 not found"},
		{name: "negative relation id", as: "unit-kv/1", call: enterScope(relationID(-1), "kv/1", nil), code: codes.InvalidArgument, msg: "invalid relation id -1"},
		{name: "settings too big", as: "unit-kv/1", call: enterScope(relGlobal, "kv/1", map[string]string{"x": string(make([]byte, 70<<10))}), code: codes.InvalidArgument, msg: "at most"},
		{name: "malformed name", as: "unit-kv/1", call: enterScope(relGlobal, "kv/one", nil), code: codes.InvalidArgument, msg: "invalid unit name"},
	})
}

func leaveScope(rel func(*agentModel) int64, unit string) agentCall {
	return func(t *testing.T, m *agentModel, c pb.AgentServiceClient) error {
		_, err := c.LeaveScope(m.ctx, &pb.LeaveScopeRequest{Relation: rel(m), Unit: unit})
		return err
	}
}

func TestAgentLeaveScope(t *testing.T) {
	runAgentCases(t, []agentCase{
		{name: "in scope", as: "unit-kv/0", call: leaveScope(relGlobal, "kv/0"),
			check: func(t *testing.T, m *agentModel) {
				if got := m.settings(m.global, "kv/0"); got != nil {
					t.Errorf("settings of kv/0 after leaving = %v, want none", got)
				}
			}},
		{name: "last of a dying relation (R3)", as: "unit-kv/0", setup: func(m *agentModel) {
			m.ok("LeaveScope(app/0)", m.st.LeaveScope(m.ctx, m.global, "app/0"))
			m.ok("DestroyRelation", m.st.DestroyRelation(m.ctx, m.global))
		}, call: leaveScope(relGlobal, "kv/0"), check: func(t *testing.T, m *agentModel) {
			if _, err := m.st.Relation(m.ctx, m.global); err == nil {
				t.Errorf("relation %d still exists after its last unit left", m.global)
			}
		}},
		// Idempotent, as state.LeaveScope is: an agent retrying after a
		// lost reply finds the relation gone.
		{name: "no such relation", as: "unit-kv/0", call: leaveScope(relationID(99), "kv/0")},
		{name: "not in scope", as: "unit-kv/1", call: leaveScope(relGlobal, "kv/1")},
		{name: "as another unit", as: "unit-kv/0", call: leaveScope(relGlobal, "app/0"), code: codes.PermissionDenied, msg: "unit kv/0's agent may not leave a relation as unit app/0"},
		{name: "another service's relation", as: "unit-kv/0", call: leaveScope(relContainer, "kv/0"), code: codes.PermissionDenied, msg: "service kv is not in it"},
		{name: "by a machine agent", as: "machine-0", call: leaveScope(relGlobal, "kv/0"), code: codes.PermissionDenied, msg: "machine 0's agent may not leave a relation as unit kv/0"},
		{name: "malformed name", as: "unit-kv/0", call: leaveScope(relGlobal, "kv"), code: codes.InvalidArgument, msg: "invalid unit name"},
	})
}

func readSettings(rel func(*agentModel) int64, unit string, want map[string]string) agentCall {
	return func(t *testing.T, m *agentModel, c pb.AgentServiceClient) error {
		resp, err := c.ReadSettings(m.ctx, &pb.ReadSettingsRequest{Relation: rel(m), Unit: unit})
		if err == nil && (!maps.Equal(resp.Settings, want) || resp.Version == 0) {
			t.Errorf("ReadSettings(%d, %s) = %v version %d, want %v and a version", rel(m), unit, resp.Settings, resp.Version, want)
		}
		return err
	}
}

func TestAgentReadSettings(t *testing.T) {
	runAgentCases(t, []agentCase{
		{name: "a peer in a global relation", as: "unit-kv/0", call: readSettings(relGlobal, "app/0", map[string]string{"want": "db"})},
		{name: "its own", as: "unit-kv/0", call: readSettings(relGlobal, "kv/0", map[string]string{"host": "kv0"})},
		{name: "its principal in a container relation", as: "unit-logger/0", call: readSettings(relContainer, "app/0", map[string]string{"unit": "app/0"})},
		{name: "its subordinate in a container relation", as: "unit-app/0", call: readSettings(relContainer, "logger/0", map[string]string{"unit": "logger/0"})},
		{name: "a unit on another machine in a container relation", as: "unit-logger/0", call: readSettings(relContainer, "app/1", nil), code: codes.PermissionDenied,
			msg: "unit logger/0's agent may not read the settings of unit app/1 in relation 2 (app:juju-info logger:host): the relation is container-scoped and app/1 is on another machine"},
		{name: "a relation its service is not in", as: "unit-kv/0", call: readSettings(relContainer, "app/0", nil), code: codes.PermissionDenied, msg: "unit kv/0's agent may not read the settings of relation 2"},
		{name: "by a machine agent", as: "machine-0", call: readSettings(relGlobal, "kv/0", nil), code: codes.PermissionDenied, msg: "machine 0's agent may not read the settings of relation"},
		{name: "a unit not in scope", as: "unit-kv/0", call: readSettings(relGlobal, "app/1", nil), code: codes.NotFound, msg: "unit app/1 has no settings in relation 1: it is not in its scope"},
		// relation-get names only the other side's units: a unit of the
		// caller's own service in a relation that is not a peer one is
		// refused, in scope or not.
		{name: "its own side in a global relation", as: "unit-kv/0", setup: func(m *agentModel) {
			m.enter(m.global, "kv/1", map[string]string{"host": "kv1"})
		}, call: readSettings(relGlobal, "kv/1", nil), code: codes.PermissionDenied,
			msg: "unit kv/0's agent may not read the settings of unit kv/1 in relation 1 (app:db kv:server): it is on its own side of the relation"},
		{name: "its own side in a container relation", as: "unit-logger/0", call: readSettings(relContainer, "logger/1", nil), code: codes.PermissionDenied,
			msg: "unit logger/0's agent may not read the settings of unit logger/1 in relation 2 (app:juju-info logger:host): it is on its own side of the relation"},
		{name: "another unit in a peer relation", as: "unit-kv/0", setup: func(m *agentModel) {
			m.enter(m.kvPeer, "kv/0", map[string]string{"host": "kv0"})
			m.enter(m.kvPeer, "kv/1", map[string]string{"host": "kv1"})
		}, call: readSettings(relKVPeer, "kv/1", map[string]string{"host": "kv1"})},
		{name: "no such relation", as: "unit-kv/0", call: readSettings(relationID(99), "kv/0", nil), code: codes.NotFound, msg: "relation 99 not found"},
		{name: "no such unit in a container relation", as: "unit-logger/0", call: readSettings(relContainer, "app/9", nil), code: codes.NotFound, msg: "unit app/9 not found"},
		{name: "malformed name", as: "unit-kv/0", call: readSettings(relGlobal, "app", nil), code: codes.InvalidArgument, msg: "invalid unit name"},
	})
}

func updateSettings(unit string, updates func(*agentModel) []*pb.SettingsUpdate) agentCall {
	return func(t *testing.T, m *agentModel, c pb.AgentServiceClient) error {
		_, err := c.UpdateSettings(m.ctx, &pb.UpdateSettingsRequest{Unit: unit, Updates: updates(m)})
		return err
	}
}

func setIn(rel func(*agentModel) int64, key, value string) func(*agentModel) []*pb.SettingsUpdate {
	return func(m *agentModel) []*pb.SettingsUpdate {
		return []*pb.SettingsUpdate{{Relation: rel(m), Set: map[string]string{key: value}}}
	}
}

func TestAgentUpdateSettings(t *testing.T) {
	runAgentCases(t, []agentCase{
		{name: "its own, across relations", as: "unit-app/0", call: updateSettings("app/0", func(m *agentModel) []*pb.SettingsUpdate {
			return []*pb.SettingsUpdate{
				{Relation: m.global, Set: map[string]string{"user": "app"}, Unset: []string{"want"}},
				{Relation: m.container, Set: map[string]string{"port": "80"}},
			}
		}), check: func(t *testing.T, m *agentModel) {
			if got := m.settings(m.global, "app/0"); !maps.Equal(got, map[string]string{"user": "app"}) {
				t.Errorf("settings of app/0 in the global relation = %v, want user=app", got)
			}
			if got := m.settings(m.container, "app/0"); got["port"] != "80" {
				t.Errorf("settings of app/0 in the container relation = %v, want port=80", got)
			}
		}},
		{name: "another unit's", as: "unit-kv/0", call: updateSettings("app/0", setIn(relGlobal, "evil", "1")), code: codes.PermissionDenied, msg: "unit kv/0's agent may not write the settings of unit app/0"},
		{name: "by a machine agent", as: "machine-0", call: updateSettings("kv/0", setIn(relGlobal, "x", "1")), code: codes.PermissionDenied, msg: "machine 0's agent may not write the settings of unit kv/0"},
		{name: "not in scope (R1)", as: "unit-kv/1", call: updateSettings("kv/1", setIn(relGlobal, "x", "1")), code: codes.FailedPrecondition, msg: "unit kv/1 is not in the scope of relation 1"},
		{name: "a relation its service is not in", as: "unit-kv/0", call: updateSettings("kv/0", setIn(relContainer, "x", "1")), code: codes.FailedPrecondition, msg: "unit kv/0 is not in the scope of relation 2"},
		{name: "no such relation", as: "unit-kv/0", call: updateSettings("kv/0", setIn(relationID(99), "x", "1")), code: codes.FailedPrecondition, msg: "not in the scope of relation 99"},
		{name: "a relation twice", as: "unit-kv/0", call: updateSettings("kv/0", func(m *agentModel) []*pb.SettingsUpdate {
			return append(setIn(relGlobal, "a", "1")(m), setIn(relGlobal, "b", "2")(m)...)
		}), code: codes.InvalidArgument, msg: "relation 1 is updated twice"},
		{name: "malformed name", as: "unit-kv/0", call: updateSettings("kv/", setIn(relGlobal, "x", "1")), code: codes.InvalidArgument, msg: "invalid unit name"},
	})
}

func setUnitStatus(unit string, kind pb.UnitStatusKind, st *pb.Status) agentCall {
	return func(t *testing.T, m *agentModel, c pb.AgentServiceClient) error {
		_, err := c.SetUnitStatus(m.ctx, &pb.SetUnitStatusRequest{Unit: unit, Kind: kind, Status: st})
		return err
	}
}

func wantStatus(kind state.StatusKind, unit, want string) func(*testing.T, *agentModel) {
	return func(t *testing.T, m *agentModel) {
		if got, err := m.st.Status(m.ctx, kind, unit); err != nil || got.GetStatus() != want {
			t.Errorf("Status(%s, %s) = %v, %v; want %s", kind, unit, got, err, want)
		}
	}
}

func TestAgentSetUnitStatus(t *testing.T) {
	const (
		agent    = pb.UnitStatusKind_UNIT_STATUS_KIND_AGENT
		workload = pb.UnitStatusKind_UNIT_STATUS_KIND_WORKLOAD
		service  = pb.UnitStatusKind_UNIT_STATUS_KIND_SERVICE
		version  = pb.UnitStatusKind_UNIT_STATUS_KIND_SERVICE_VERSION
	)
	idle := &pb.Status{Status: "idle", Data: map[string]string{"state": "running"}}
	active := &pb.Status{Status: "active", Message: "serving"}
	runAgentCases(t, []agentCase{
		{name: "unit: its agent status", as: "unit-kv/0", call: setUnitStatus("kv/0", agent, idle), check: wantStatus(state.StatusUnitAgent, "kv/0", "idle")},
		{name: "unit: its workload status", as: "unit-kv/0", call: setUnitStatus("kv/0", workload, active), check: wantStatus(state.StatusUnit, "kv/0", "active")},
		{name: "machine: a unit agent's status", as: "machine-0", call: setUnitStatus("kv/0", agent, &pb.Status{Status: "error", Message: "cannot start"}),
			check: wantStatus(state.StatusUnitAgent, "kv/0", "error")},
		{name: "machine: a subordinate agent's status", as: "machine-2", call: setUnitStatus("logger/0", agent, idle), check: wantStatus(state.StatusUnitAgent, "logger/0", "idle")},
		{name: "machine: a workload status", as: "machine-0", call: setUnitStatus("kv/0", workload, active), code: codes.PermissionDenied,
			msg: "machine 0's agent may not set the workload status of unit kv/0: only its own agent may"},
		{name: "machine: a unit on another machine", as: "machine-0", call: setUnitStatus("kv/1", agent, idle), code: codes.PermissionDenied, msg: "machine 0's agent may not set the status of unit kv/1"},
		{name: "unit: another unit", as: "unit-kv/0", call: setUnitStatus("kv/1", workload, active), code: codes.PermissionDenied, msg: "unit kv/0's agent may not set the status of unit kv/1"},
		{name: "unit: its subordinate", as: "unit-app/0", call: setUnitStatus("logger/0", agent, idle), code: codes.PermissionDenied, msg: "may not set the status of unit logger/0"},
		{name: "machine: no such unit", as: "machine-0", call: setUnitStatus("kv/9", agent, idle), code: codes.NotFound, msg: "unit kv/9 not found"},
		{name: "no kind", as: "unit-kv/0", call: setUnitStatus("kv/0", pb.UnitStatusKind_UNIT_STATUS_KIND_UNSPECIFIED, idle), code: codes.InvalidArgument, msg: "want agent, workload, service or service version"},
		{name: "unit: its service's status", as: "unit-kv/0", call: setUnitStatus("kv/0", service, active), check: wantStatus(state.StatusService, "kv", "active")},
		{name: "unit: its service's version", as: "unit-kv/0", call: setUnitStatus("kv/0", version, &pb.Status{Status: "1.2.3"}), check: wantStatus(state.StatusServiceVersion, "kv", "1.2.3")},
		{name: "unit: a version too long", as: "unit-kv/0", call: setUnitStatus("kv/0", version, &pb.Status{Status: strings.Repeat("v", 257)}), code: codes.InvalidArgument, msg: "at most 256"},
		{name: "machine: a service's status", as: "machine-0", call: setUnitStatus("kv/0", service, active), code: codes.PermissionDenied, msg: "may not set the service status of unit kv/0"},
		{name: "unit: another service's status", as: "unit-kv/0", call: setUnitStatus("app/0", service, active), code: codes.PermissionDenied, msg: "may not set the service status of unit app/0"},
		{name: "no status", as: "unit-kv/0", call: setUnitStatus("kv/0", agent, &pb.Status{}), code: codes.InvalidArgument, msg: "needs a status value"},
		{name: "malformed name", as: "unit-kv/0", call: setUnitStatus("0", agent, idle), code: codes.InvalidArgument, msg: "invalid unit name"},
	})
}

func setUnitStatuses(reports ...*pb.SetUnitStatusRequest) agentCall {
	return func(t *testing.T, m *agentModel, c pb.AgentServiceClient) error {
		_, err := c.SetUnitStatuses(m.ctx, &pb.SetUnitStatusesRequest{Reports: reports})
		return err
	}
}

// A machine agent reports its units' agent statuses together; each report
// is answered on its own, and one refused leaves the others recorded.
func TestAgentSetUnitStatuses(t *testing.T) {
	const agent = pb.UnitStatusKind_UNIT_STATUS_KIND_AGENT
	report := func(unit string, st *pb.Status) *pb.SetUnitStatusRequest {
		return &pb.SetUnitStatusRequest{Unit: unit, Kind: agent, Status: st}
	}
	idle := &pb.Status{Status: "idle", Data: map[string]string{"state": "running"}}
	t.Run("each answered", func(t *testing.T) {
		t.Parallel()
		m := newAgentModel(t)
		resp, err := m.as("machine-2").SetUnitStatuses(m.ctx, &pb.SetUnitStatusesRequest{Reports: []*pb.SetUnitStatusRequest{
			report("app/0", idle), report("logger/0", &pb.Status{Status: "executing"}), report("kv/0", idle), report("kv/9", idle),
		}})
		m.ok("SetUnitStatuses", err)
		wantResults(t, resp.GetResults(), []result{{codes.OK, ""}, {codes.OK, ""}, {codes.PermissionDenied, "machine 2's agent may not set the status of unit kv/0: it is not on machine 2"}, {codes.NotFound, "unit kv/9 not found"}})
		wantStatus(state.StatusUnitAgent, "app/0", "idle")(t, m)
		wantStatus(state.StatusUnitAgent, "logger/0", "executing")(t, m)
		if st, err := m.st.Status(m.ctx, state.StatusUnitAgent, "kv/0"); err != nil || st != nil {
			t.Errorf("kv/0's status %v, %v: want none", st, err)
		}
	})
	runAgentCases(t, []agentCase{
		{name: "by a unit agent", as: "unit-app/0", call: setUnitStatuses(report("app/0", idle)), code: codes.PermissionDenied,
			msg: "unit app/0's agent may not set the statuses of units: only a machine agent may"},
		{name: "a workload status", as: "machine-2", call: setUnitStatuses(&pb.SetUnitStatusRequest{Unit: "app/0", Kind: pb.UnitStatusKind_UNIT_STATUS_KIND_WORKLOAD, Status: idle}),
			code: codes.InvalidArgument, msg: "want agent"},
		{name: "a unit twice", as: "machine-2", call: setUnitStatuses(report("app/0", idle), report("app/0", idle)), code: codes.InvalidArgument, msg: "unit app/0 is reported twice"},
		{name: "no status", as: "machine-2", call: setUnitStatuses(report("app/0", &pb.Status{})), code: codes.InvalidArgument, msg: "needs a status value"},
		{name: "no report", as: "machine-2", call: setUnitStatuses(), code: codes.InvalidArgument, msg: "has no report"},
	})
}

func clearResolved(unit string) agentCall {
	return func(t *testing.T, m *agentModel, c pb.AgentServiceClient) error {
		_, err := c.ClearResolved(m.ctx, &pb.ClearResolvedRequest{Unit: unit})
		return err
	}
}

func TestAgentClearResolved(t *testing.T) {
	resolved := func(unit string) func(*agentModel) {
		return func(m *agentModel) {
			m.ok("SetStatus", m.st.SetStatus(m.ctx, state.StatusUnitAgent, unit, &pb.Status{Status: "error"}))
			m.ok("SetResolved", m.st.SetResolved(m.ctx, unit, pb.ResolvedMode_RESOLVED_MODE_RETRY))
		}
	}
	runAgentCases(t, []agentCase{
		{name: "its own", as: "unit-kv/0", setup: resolved("kv/0"), call: clearResolved("kv/0"), check: func(t *testing.T, m *agentModel) {
			if mode, err := m.st.Resolved(m.ctx, "kv/0"); err != nil || mode != pb.ResolvedMode_RESOLVED_MODE_UNSPECIFIED {
				t.Errorf("Resolved(kv/0) = %v, %v; want none", mode, err)
			}
		}},
		{name: "none set", as: "unit-kv/0", call: clearResolved("kv/0")},
		{name: "another unit's", as: "unit-kv/0", setup: resolved("kv/1"), call: clearResolved("kv/1"), code: codes.PermissionDenied, msg: "unit kv/0's agent may not clear the resolved mark of unit kv/1"},
		{name: "by a machine agent", as: "machine-0", setup: resolved("kv/0"), call: clearResolved("kv/0"), code: codes.PermissionDenied, msg: "machine 0's agent may not clear the resolved mark of unit kv/0"},
		{name: "malformed name", as: "unit-kv/0", call: clearResolved("kv/0/0"), code: codes.InvalidArgument, msg: "invalid unit name"},
	})
}

// A unit agent's progress report is declined while the controller's
// writes queue, with ResourceExhausted, and changes nothing; any other
// report is recorded all the same, and progress once the queue is gone.
func TestAgentProgressDeclinedWhenBusy(t *testing.T) {
	var busy atomic.Bool
	e := controllertest.New(t, controllertest.Options{Busy: busy.Load})
	ch, err := e.State.AddCharm(e.Ctx, &pb.Charm{Name: "kv"}, []byte("kv charm"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.State.AddService(e.Ctx, state.AddServiceArgs{Name: "kv", Charm: &pb.CharmRef{Name: ch.Name, Revision: ch.Revision, Sha256: ch.Sha256}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.State.AddUnits(e.Ctx, "kv", 1, state.Placement{}); err != nil {
		t.Fatal(err)
	}
	c := e.Agent("unit-kv/0")
	set := func(st *pb.Status, progress bool) error {
		_, err := c.SetUnitStatus(e.Ctx, &pb.SetUnitStatusRequest{Unit: "kv/0", Kind: pb.UnitStatusKind_UNIT_STATUS_KIND_AGENT, Status: st, Progress: progress})
		return err
	}
	current := func() string {
		st, err := e.State.Status(e.Ctx, state.StatusUnitAgent, "kv/0")
		if err != nil {
			t.Fatal(err)
		}
		return st.GetStatus() + ":" + st.GetMessage()
	}
	if err := set(&pb.Status{Status: "idle"}, false); err != nil {
		t.Fatal(err)
	}
	busy.Store(true)
	err = set(&pb.Status{Status: "executing", Message: "running install hook"}, true)
	wantCode(t, "a progress report when busy", err, codes.ResourceExhausted, "busy: progress report declined")
	if got := current(); got != "idle:" {
		t.Errorf("status after a declined report: %s, want idle", got)
	}
	if err := set(&pb.Status{Status: "error", Message: `hook failed: "install"`}, false); err != nil {
		t.Fatalf("another report when busy: %v", err)
	}
	// Reported by the machine agent, the progress report is declined
	// alone.
	resp, err := e.Agent("machine-0").SetUnitStatuses(e.Ctx, &pb.SetUnitStatusesRequest{Reports: []*pb.SetUnitStatusRequest{
		{Unit: "kv/0", Kind: pb.UnitStatusKind_UNIT_STATUS_KIND_AGENT, Status: &pb.Status{Status: "executing", Message: "running start hook"}, Progress: true},
	}})
	if err != nil || codes.Code(resp.GetResults()[0].GetCode()) != codes.ResourceExhausted {
		t.Errorf("a batched progress report when busy: %v, %v; want it declined", resp, err)
	}
	busy.Store(false)
	if err := set(&pb.Status{Status: "executing", Message: "running install hook"}, true); err != nil {
		t.Fatalf("a progress report when not busy: %v", err)
	}
	if got := current(); got != "executing:running install hook" {
		t.Errorf("status: %s, want the progress report", got)
	}
}
