package controller_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

func watchSubject(s any) *pb.WatchSubject {
	switch s := s.(type) {
	case *pb.WatchSubject_Machine:
		return &pb.WatchSubject{Subject: s}
	case *pb.WatchSubject_MachineUnits:
		return &pb.WatchSubject{Subject: s}
	case *pb.WatchSubject_Unit:
		return &pb.WatchSubject{Subject: s}
	case *pb.WatchSubject_UnitSubordinates:
		return &pb.WatchSubject{Subject: s}
	case *pb.WatchSubject_Service:
		return &pb.WatchSubject{Subject: s}
	case *pb.WatchSubject_ServiceConfig:
		return &pb.WatchSubject{Subject: s}
	case *pb.WatchSubject_ServiceRelations:
		return &pb.WatchSubject{Subject: s}
	case *pb.WatchSubject_Relation:
		return &pb.WatchSubject{Subject: s}
	case *pb.WatchSubject_RelationScope:
		return &pb.WatchSubject{Subject: s}
	case *pb.WatchSubject_Resolved:
		return &pb.WatchSubject{Subject: s}
	}
	return &pb.WatchSubject{}
}

// watchFirst opens a watch from the start and checks its first response:
// a reset listing whose changes are want ("id" each, in order).
func watchFirst(s any, want ...string) agentCall {
	return watchFirstOf(func(*agentModel) *pb.WatchSubject { return watchSubject(s) }, want...)
}

func watchFirstOf(s func(*agentModel) *pb.WatchSubject, want ...string) agentCall {
	return func(t *testing.T, m *agentModel, c pb.AgentServiceClient) error {
		resp, err := firstWatchResponse(m.ctx, c, &pb.WatchRequest{Subject: s(m)})
		if err != nil {
			return err
		}
		if got := changeList(resp, false); !resp.Relisted || !slices.Equal(got, want) {
			t.Errorf("first Watch(%v) response = reset %v, %v; want a reset listing %v", s(m), resp.Relisted, got, want)
		}
		for _, ch := range resp.Changes {
			if ch.Version == 0 {
				t.Errorf("Watch(%v) change %s has no version", s(m), ch.Id)
			}
		}
		return nil
	}
}

func scopeSubject(id func(*agentModel) int64) func(*agentModel) *pb.WatchSubject {
	return func(m *agentModel) *pb.WatchSubject {
		return &pb.WatchSubject{Subject: &pb.WatchSubject_RelationScope{RelationScope: id(m)}}
	}
}

func relationSubject(id func(*agentModel) int64) func(*agentModel) *pb.WatchSubject {
	return func(m *agentModel) *pb.WatchSubject {
		return &pb.WatchSubject{Subject: &pb.WatchSubject_Relation{Relation: id(m)}}
	}
}

func TestAgentWatchAuthorization(t *testing.T) {
	type (
		machine      = pb.WatchSubject_Machine
		machineUnits = pb.WatchSubject_MachineUnits
		unit         = pb.WatchSubject_Unit
		subordinates = pb.WatchSubject_UnitSubordinates
		service      = pb.WatchSubject_Service
		config       = pb.WatchSubject_ServiceConfig
		relations    = pb.WatchSubject_ServiceRelations
		resolved     = pb.WatchSubject_Resolved
	)
	runAgentCases(t, []agentCase{
		// Machine agents: their machine, its units, their services.
		{name: "machine: its machine", as: "machine-0", call: watchFirst(&machine{Machine: "0"}, "0")},
		{name: "machine: its units", as: "machine-2", call: watchFirst(&machineUnits{MachineUnits: "2"}, "app/0")},
		{name: "machine: its unit", as: "machine-0", call: watchFirst(&unit{Unit: "kv/0"}, "kv/0")},
		{name: "machine: a subordinate on it", as: "machine-2", call: watchFirst(&unit{Unit: "logger/0"}, "logger/0")},
		{name: "machine: its unit's subordinates", as: "machine-2", call: watchFirst(&subordinates{UnitSubordinates: "app/0"}, "logger/0")},
		{name: "machine: its unit's resolved mark", as: "machine-0", call: watchFirst(&resolved{Resolved: "kv/0"})},
		{name: "machine: its unit's service", as: "machine-0", call: watchFirst(&service{Service: "kv"}, "kv")},
		{name: "machine: its subordinate's service configuration", as: "machine-2", call: watchFirst(&config{ServiceConfig: "logger"}, "logger")},
		{name: "machine: another machine", as: "machine-0", call: watchFirst(&machine{Machine: "1"}), code: codes.PermissionDenied, msg: "machine 0's agent may not watch machine 1"},
		{name: "machine: another machine's units", as: "machine-0", call: watchFirst(&machineUnits{MachineUnits: "1"}), code: codes.PermissionDenied, msg: "machine 0's agent may not watch the units of machine 1"},
		{name: "machine: another machine's unit", as: "machine-0", call: watchFirst(&unit{Unit: "kv/1"}), code: codes.PermissionDenied, msg: "machine 0's agent may not watch unit kv/1"},
		{name: "machine: another machine's unit's mark", as: "machine-0", call: watchFirst(&resolved{Resolved: "kv/1"}), code: codes.PermissionDenied, msg: "may not watch the resolved mark of unit kv/1"},
		{name: "machine: another machine's service", as: "machine-0", call: watchFirst(&service{Service: "app"}), code: codes.PermissionDenied, msg: "machine 0's agent may not watch service app"},
		{name: "machine: service relations", as: "machine-0", call: watchFirst(&relations{ServiceRelations: "kv"}), code: codes.PermissionDenied, msg: "machine 0's agent may not watch the relations of service kv"},
		{name: "machine: a relation", as: "machine-0", call: watchFirstOf(relationSubject(relGlobal)), code: codes.PermissionDenied, msg: "machine 0's agent may not watch relation 1"},
		{name: "machine: a relation scope", as: "machine-0", call: watchFirstOf(scopeSubject(relGlobal)), code: codes.PermissionDenied, msg: "may not watch the scope of relation 1"},
		{name: "machine: no such unit", as: "machine-0", call: watchFirst(&unit{Unit: "kv/9"}), code: codes.NotFound, msg: "unit kv/9 not found"},

		// Unit agents: their unit, its family, their service, its relations.
		{name: "unit: itself", as: "unit-kv/0", call: watchFirst(&unit{Unit: "kv/0"}, "kv/0")},
		{name: "unit: its resolved mark", as: "unit-kv/0", call: watchFirst(&resolved{Resolved: "kv/0"})},
		{name: "unit: its subordinates", as: "unit-app/0", call: watchFirst(&subordinates{UnitSubordinates: "app/0"}, "logger/0")},
		{name: "unit: its subordinate", as: "unit-app/0", call: watchFirst(&unit{Unit: "logger/0"}, "logger/0")},
		{name: "unit: its principal", as: "unit-logger/0", call: watchFirst(&unit{Unit: "app/0"}, "app/0")},
		{name: "unit: its service", as: "unit-kv/0", call: watchFirst(&service{Service: "kv"}, "kv")},
		{name: "unit: its service configuration", as: "unit-kv/0", call: watchFirst(&config{ServiceConfig: "kv"}, "kv")},
		{name: "unit: its principal's service", as: "unit-logger/0", call: watchFirst(&service{Service: "app"}, "app")},
		{name: "unit: its service's relations", as: "unit-kv/0", call: watchFirst(&relations{ServiceRelations: "kv"}, "0", "1")},
		{name: "unit: its relation", as: "unit-kv/0", call: watchFirstOf(relationSubject(relGlobal), "1")},
		{name: "unit: its relation's scope, the other side", as: "unit-kv/0", call: watchFirstOf(scopeSubject(relGlobal), "app/0")},
		{name: "unit: its relation's scope, from the other side", as: "unit-app/0", call: watchFirstOf(scopeSubject(relGlobal), "kv/0")},
		{name: "unit: its machine", as: "unit-kv/0", call: watchFirst(&machine{Machine: "0"}), code: codes.PermissionDenied, msg: "unit kv/0's agent may not watch machine 0"},
		{name: "unit: its machine's units", as: "unit-kv/0", call: watchFirst(&machineUnits{MachineUnits: "0"}), code: codes.PermissionDenied, msg: "may not watch the units of machine 0"},
		{name: "unit: another service's unit", as: "unit-kv/0", call: watchFirst(&unit{Unit: "app/0"}), code: codes.PermissionDenied, msg: "unit kv/0's agent may not watch unit app/0"},
		{name: "unit: its service's other unit", as: "unit-kv/0", call: watchFirst(&unit{Unit: "kv/1"}), code: codes.PermissionDenied, msg: "unit kv/0's agent may not watch unit kv/1"},
		{name: "unit: its principal's subordinates", as: "unit-logger/0", call: watchFirst(&subordinates{UnitSubordinates: "app/0"}), code: codes.PermissionDenied, msg: "may not watch the subordinates of unit app/0"},
		{name: "unit: another unit's resolved mark", as: "unit-kv/0", call: watchFirst(&resolved{Resolved: "kv/1"}), code: codes.PermissionDenied, msg: "may not watch the resolved mark of unit kv/1"},
		{name: "unit: a related service", as: "unit-kv/0", call: watchFirst(&service{Service: "app"}), code: codes.PermissionDenied, msg: "unit kv/0's agent may not watch service app"},
		{name: "unit: a related service's relations", as: "unit-kv/0", call: watchFirst(&relations{ServiceRelations: "app"}), code: codes.PermissionDenied, msg: "may not watch the relations of service app"},
		{name: "unit: another service's relation", as: "unit-kv/0", call: watchFirstOf(relationSubject(relContainer)), code: codes.PermissionDenied, msg: "service kv is not in it"},
		{name: "unit: another service's relation scope", as: "unit-kv/0", call: watchFirstOf(scopeSubject(relContainer)), code: codes.PermissionDenied, msg: "may not watch the scope of relation 2"},
		{name: "unit: no such relation", as: "unit-kv/0", call: watchFirstOf(relationSubject(relationID(99))), code: codes.NotFound, msg: "relation 99 not found"},

		{name: "no subject", as: "unit-kv/0", call: watchFirst(nil), code: codes.InvalidArgument, msg: "watch needs a subject"},
		{name: "malformed unit name", as: "unit-kv/0", call: watchFirst(&unit{Unit: "kv"}), code: codes.InvalidArgument, msg: "invalid unit name"},
		{name: "negative revision", as: "unit-kv/0", call: func(t *testing.T, m *agentModel, c pb.AgentServiceClient) error {
			_, err := firstWatchResponse(m.ctx, c, &pb.WatchRequest{Subject: watchSubject(&unit{Unit: "kv/0"}), AfterRevision: -1})
			return err
		}, code: codes.InvalidArgument, msg: "invalid revision -1"},
	})
}

// agentWatcher is one open watch stream.
type agentWatcher struct {
	t      *testing.T
	stream pb.AgentService_WatchClient
	cancel context.CancelFunc
	// revision is the last response's.
	revision int64
}

func (m *agentModel) watch(tag string, s *pb.WatchSubject, after int64) *agentWatcher {
	m.t.Helper()
	ctx, cancel := context.WithTimeout(m.ctx, 20*time.Second)
	stream, err := m.as(tag).Watch(ctx, &pb.WatchRequest{Subject: s, AfterRevision: after})
	if err != nil {
		cancel()
		m.t.Fatalf("Watch(%v): %v", s, err)
	}
	w := &agentWatcher{t: m.t, stream: stream, cancel: cancel}
	m.t.Cleanup(cancel)
	return w
}

// next returns the next response that resets or changes something,
// skipping progress responses.
func (w *agentWatcher) next() *pb.WatchResponse {
	w.t.Helper()
	for {
		resp, err := w.stream.Recv()
		if err != nil {
			w.t.Fatalf("Watch Recv: %v", err)
		}
		if resp.Revision < w.revision {
			w.t.Fatalf("Watch revision went from %d back to %d", w.revision, resp.Revision)
		}
		w.revision = resp.Revision
		if resp.Relisted || len(resp.Changes) > 0 {
			return resp
		}
	}
}

// changeList shows a response's changes as "id", "-id" for removals, and
// with versions "id@version".
func changeList(resp *pb.WatchResponse, versions bool) []string {
	out := []string{}
	for _, ch := range resp.Changes {
		s := ch.Id
		if ch.Removed {
			s = "-" + s
		}
		if versions {
			s = fmt.Sprintf("%s@%d", s, ch.Version)
		}
		out = append(out, s)
	}
	return out
}

// nextChanges collects changes (without versions) until it has n.
func (w *agentWatcher) nextChanges(n int) []string {
	w.t.Helper()
	var got []string
	for len(got) < n {
		resp := w.next()
		if resp.Relisted {
			w.t.Fatalf("unexpected reset: %v", changeList(resp, false))
		}
		got = append(got, changeList(resp, false)...)
	}
	return got
}

func TestAgentWatchMachineUnitsResetThenChangesAndResume(t *testing.T) {
	m := newAgentModel(t)
	units := &pb.WatchSubject{Subject: &pb.WatchSubject_MachineUnits{MachineUnits: "0"}}
	w := m.watch("machine-0", units, 0)
	first := w.next()
	if got := changeList(first, false); !first.Relisted || !slices.Equal(got, []string{"kv/0"}) {
		t.Fatalf("first response = reset %v, %v; want a reset listing [kv/0]", first.Relisted, got)
	}

	kv2 := m.addUnits("kv", 1, state.Placement{Unassigned: true})[0].Name
	m.ok("AssignUnit", m.st.AssignUnit(m.ctx, kv2, "0"))
	if got := w.nextChanges(1); !slices.Equal(got, []string{"kv/2"}) {
		t.Fatalf("changes after assigning kv/2 = %v, want [kv/2]", got)
	}
	resumeAfter := w.revision
	w.cancel()

	// While nobody watches: one unit comes, one goes, and an unrelated
	// machine gets a unit.
	m.addUnits("kv", 1, state.Placement{Machine: "0"}) // kv/3
	m.addUnits("kv", 1, state.Placement{Machine: "1"}) // kv/4
	m.kill("kv/2")
	m.ok("RemoveUnit(kv/2)", m.st.RemoveUnit(m.ctx, "kv/2"))

	w = m.watch("machine-0", units, resumeAfter)
	if got := w.nextChanges(2); !slices.Equal(got, []string{"kv/3", "-kv/2"}) {
		t.Fatalf("changes after resuming from %d = %v, want exactly [kv/3 -kv/2]", resumeAfter, got)
	}
	// Nothing else was pending: the next change is this new one.
	m.addUnits("kv", 1, state.Placement{Machine: "0"}) // kv/5
	if got := w.nextChanges(1); !slices.Equal(got, []string{"kv/5"}) {
		t.Errorf("next change = %v, want [kv/5]", got)
	}
}

func TestAgentWatchResumesAcrossAControllerRestart(t *testing.T) {
	m := newAgentModel(t)
	units := &pb.WatchSubject{Subject: &pb.WatchSubject_MachineUnits{MachineUnits: "0"}}
	w := m.watch("machine-0", units, 0)
	w.next()
	resumeAfter := w.revision
	w.cancel()

	// The restarted controller's watch hub holds nothing older than its
	// start: the stream catches up from etcd, exactly, then follows the hub.
	m.Stop()
	m.addUnits("kv", 1, state.Placement{Machine: "0"}) // kv/2
	m.Start()
	m.addUnits("kv", 1, state.Placement{Machine: "1"}) // kv/3
	m.addUnits("kv", 1, state.Placement{Machine: "0"}) // kv/4
	// As an agent does, the client tries again while its connection to
	// the stopped controller is not yet known to be gone: a call made on
	// it meanwhile fails with Unavailable (CI saw a watch opened on it).
	c := m.as("machine-0")
	for i := 0; ; i++ {
		_, err := c.GetAgentSettings(m.ctx, &pb.GetAgentSettingsRequest{})
		if err == nil {
			break
		}
		if status.Code(err) != codes.Unavailable || i == 50 {
			t.Fatalf("GetAgentSettings after the restart: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	w = m.watch("machine-0", units, resumeAfter)
	if got := w.nextChanges(2); !slices.Equal(got, []string{"kv/2", "kv/4"}) {
		t.Fatalf("changes after resuming from %d = %v, want exactly [kv/2 kv/4]", resumeAfter, got)
	}
	m.addUnits("kv", 1, state.Placement{Machine: "0"}) // kv/5
	if got := w.nextChanges(1); !slices.Equal(got, []string{"kv/5"}) {
		t.Errorf("next change = %v, want [kv/5]", got)
	}
}

func TestAgentWatchRelationScopeShowsMembersAndVersions(t *testing.T) {
	m := newAgentModel(t)
	version := func(unit string) int64 {
		_, v, err := m.st.Settings(m.ctx, m.global, unit)
		m.ok("Settings", err)
		return v
	}
	// kv/0 sees app's members, with their settings versions, and none of
	// kv's own: its agent runs hooks for the other side only.
	w := m.watch("unit-kv/0", scopeSubject(relGlobal)(m), 0)
	first := w.next()
	want := []string{fmt.Sprintf("app/0@%d", version("app/0"))}
	if got := changeList(first, true); !first.Relisted || !slices.Equal(got, want) {
		t.Fatalf("first response = reset %v, %v; want a reset listing %v, without kv/0", first.Relisted, got, want)
	}

	m.enter(m.global, "kv/1", map[string]string{"host": "kv1"})
	m.enter(m.global, "app/1", map[string]string{"want": "db"})
	entered := version("app/1")
	if got := changeList(w.next(), true); !slices.Equal(got, []string{fmt.Sprintf("app/1@%d", entered)}) {
		t.Fatalf("after kv/1 and app/1 entered: %v, want [app/1@%d] alone", got, entered)
	}
	m.ok("UpdateSettings(kv/1)", m.st.UpdateSettings(m.ctx, "kv/1", []state.SettingsChange{{Relation: m.global, Set: map[string]string{"port": "1"}}}))
	_, err := m.as("unit-app/1").UpdateSettings(m.ctx, &pb.UpdateSettingsRequest{Unit: "app/1",
		Updates: []*pb.SettingsUpdate{{Relation: m.global, Set: map[string]string{"port": "6379"}}}})
	m.ok("UpdateSettings(app/1)", err)
	updated := version("app/1")
	if updated <= entered {
		t.Fatalf("settings version went from %d to %d, want it bumped", entered, updated)
	}
	if got := changeList(w.next(), true); !slices.Equal(got, []string{fmt.Sprintf("app/1@%d", updated)}) {
		t.Fatalf("after kv/1's and app/1's updates: %v, want [app/1@%d] alone", got, updated)
	}
	m.ok("LeaveScope(kv/1)", m.st.LeaveScope(m.ctx, m.global, "kv/1"))
	m.ok("LeaveScope(app/1)", m.st.LeaveScope(m.ctx, m.global, "app/1"))
	if got := w.nextChanges(1); !slices.Equal(got, []string{"-app/1"}) {
		t.Fatalf("after kv/1 and app/1 left: %v, want [-app/1] alone", got)
	}

	// From the other side, app/0 sees kv's members and not app's.
	a := m.watch("unit-app/0", scopeSubject(relGlobal)(m), 0)
	if first := a.next(); !first.Relisted || !slices.Equal(changeList(first, false), []string{"kv/0"}) {
		t.Fatalf("app/0's first response = reset %v, %v; want a reset listing [kv/0]", first.Relisted, changeList(first, false))
	}
	m.enter(m.global, "app/1", nil)
	m.enter(m.global, "kv/1", nil)
	if got := a.nextChanges(1); !slices.Equal(got, []string{"kv/1"}) {
		t.Fatalf("app/0's changes = %v, want [kv/1] alone", got)
	}
}

func TestAgentWatchPeerScopeShowsTheWholeScope(t *testing.T) {
	m := newAgentModel(t)
	m.enter(m.kvPeer, "kv/0", nil)
	m.enter(m.kvPeer, "kv/1", nil)
	w := m.watch("unit-kv/0", scopeSubject(func(m *agentModel) int64 { return m.kvPeer })(m), 0)
	if first := w.next(); !first.Relisted || !slices.Equal(changeList(first, false), []string{"kv/0", "kv/1"}) {
		t.Fatalf("first response = reset %v, %v; want a reset listing [kv/0 kv/1]", first.Relisted, changeList(first, false))
	}
	kv2 := m.addUnits("kv", 1, state.Placement{})[0].Name
	m.enter(m.kvPeer, kv2, nil)
	if got := w.nextChanges(1); !slices.Equal(got, []string{kv2}) {
		t.Fatalf("changes = %v, want [%s]", got, kv2)
	}
}

func TestAgentWatchContainerScopeShowsOnlyTheMachine(t *testing.T) {
	m := newAgentModel(t)
	update := func(unit, key string) {
		m.t.Helper()
		m.ok("UpdateSettings("+unit+")", m.st.UpdateSettings(m.ctx, unit, []state.SettingsChange{{Relation: m.container, Set: map[string]string{key: "1"}}}))
	}
	w := m.watch("unit-logger/0", scopeSubject(relContainer)(m), 0)
	first := w.next()
	if got := changeList(first, false); !first.Relisted || !slices.Equal(got, []string{"app/0"}) {
		t.Fatalf("first response = reset %v, %v; want a reset listing [app/0]: not machine 3's units, not logger's", first.Relisted, got)
	}

	// Machine 3's units change and leave unseen; the next change seen is
	// machine 2's.
	update("app/1", "a")
	m.ok("LeaveScope(logger/1)", m.st.LeaveScope(m.ctx, m.container, "logger/1"))
	update("app/0", "b")
	if got := w.nextChanges(1); !slices.Equal(got, []string{"app/0"}) {
		t.Fatalf("changes = %v, want [app/0] alone", got)
	}

	// A new principal on machine 2 is seen; a new one on machine 3 is not.
	m.addUnits("app", 1, state.Placement{Machine: "3"}) // app/2
	m.addUnits("app", 1, state.Placement{Machine: "2"}) // app/3
	m.enter(m.container, "app/2", nil)
	m.enter(m.container, "app/3", nil)
	if got := w.nextChanges(1); !slices.Equal(got, []string{"app/3"}) {
		t.Fatalf("changes = %v, want [app/3] alone", got)
	}
	resumeAfter := w.revision
	w.cancel()

	// Resuming, a departure on machine 3 stays unseen, one on machine 2 is.
	m.ok("LeaveScope(app/1)", m.st.LeaveScope(m.ctx, m.container, "app/1"))
	m.ok("LeaveScope(app/3)", m.st.LeaveScope(m.ctx, m.container, "app/3"))
	w = m.watch("unit-logger/0", scopeSubject(relContainer)(m), resumeAfter)
	if got := w.nextChanges(1); !slices.Equal(got, []string{"-app/3"}) {
		t.Fatalf("changes after resuming = %v, want [-app/3] alone", got)
	}

	// ReadSettings agrees with the watch.
	_, err := m.as("unit-logger/0").ReadSettings(m.ctx, &pb.ReadSettingsRequest{Relation: m.container, Unit: "app/2"})
	wantCode(t, "ReadSettings(app/2) by logger/0", err, codes.PermissionDenied, "on another machine")
}

func TestAgentWatchSingleKeyIsExact(t *testing.T) {
	m := newAgentModel(t)
	m.addUnits("kv", 9, state.Placement{Unassigned: true}) // kv/2 ... kv/10
	m.ok("SetStatus(kv/10)", m.st.SetStatus(m.ctx, state.StatusUnitAgent, "kv/10", &pb.Status{Status: "error"}))
	m.ok("SetResolved(kv/10)", m.st.SetResolved(m.ctx, "kv/10", pb.ResolvedMode_RESOLVED_MODE_RETRY))
	w := m.watch("unit-kv/1", &pb.WatchSubject{Subject: &pb.WatchSubject_Unit{Unit: "kv/1"}}, 0)
	first := w.next()
	if got := changeList(first, false); !first.Relisted || !slices.Equal(got, []string{"kv/1"}) {
		t.Fatalf("first response = reset %v, %v; want a reset listing [kv/1] without kv/10", first.Relisted, got)
	}
	if u := first.Changes[0].GetUnit(); u.GetName() != "kv/1" || u.GetMachineId() != "1" {
		t.Errorf("kv/1's value = %v, want unit kv/1 on machine 1", u)
	}
	r := m.watch("unit-kv/1", &pb.WatchSubject{Subject: &pb.WatchSubject_Resolved{Resolved: "kv/1"}}, 0)
	if first := r.next(); !first.Relisted || len(first.Changes) != 0 {
		t.Fatalf("first resolved response = reset %v, %v; want an empty reset without kv/10's mark", first.Relisted, changeList(first, false))
	}

	// kv/10's removal is no change of kv/1's: the watch, of exactly one
	// key, does not even hear of it.
	m.ok("DestroyUnit(kv/10)", m.st.DestroyUnit(m.ctx, "kv/10", state.DestroyOptions{})) // removed at once: unassigned
	m.ok("DestroyUnit(kv/1)", m.st.DestroyUnit(m.ctx, "kv/1", state.DestroyOptions{}))
	resp := w.next()
	if got := changeList(resp, false); !slices.Equal(got, []string{"kv/1"}) || resp.Changes[0].GetUnit().GetLife() != pb.Life_LIFE_DYING {
		t.Fatalf("changes = %v (%v), want [kv/1] dying, nothing of kv/10", got, resp.Changes)
	}
	if w.revision <= first.Revision {
		t.Errorf("revision = %d, want it past %d", w.revision, first.Revision)
	}

	m.ok("SetStatus(kv/1)", m.st.SetStatus(m.ctx, state.StatusUnitAgent, "kv/1", &pb.Status{Status: "error"}))
	m.ok("SetResolved(kv/1)", m.st.SetResolved(m.ctx, "kv/1", pb.ResolvedMode_RESOLVED_MODE_NO_RETRY))
	resp = r.next()
	if got := changeList(resp, false); !slices.Equal(got, []string{"kv/1"}) || resp.Changes[0].GetResolved().GetMode() != pb.ResolvedMode_RESOLVED_MODE_NO_RETRY {
		t.Fatalf("resolved changes = %v (%v), want kv/1's no-retry mark", got, resp.Changes)
	}
}

func TestAgentWatchEndsWhenTheClientGoesAway(t *testing.T) {
	m := newAgentModel(t)
	w := m.watch("unit-kv/0", &pb.WatchSubject{Subject: &pb.WatchSubject_ServiceConfig{ServiceConfig: "kv"}}, 0)
	first := w.next()
	if cfg := first.Changes[0].GetConfig(); cfg.GetValues()["name"].GetStringValue() != "kv" {
		t.Errorf("kv's configuration = %v, want name=kv", cfg)
	}
	w.cancel()
	if _, err := w.stream.Recv(); err == nil || !strings.Contains(err.Error(), "context canceled") {
		t.Errorf("Recv after cancel = %v, want the stream ended (canceled)", err)
	}
}
