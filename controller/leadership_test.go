package controller_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/lifelinehq/lifeline/controller"
	"github.com/lifelinehq/lifeline/internal/names"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// TestLeadershipElectionAndAgentCalls: the elector elects the first unit
// whose machine's agent is present and hands over when that agent goes;
// only a unit's own agent reads its leadership, and only the leader's
// writes leader settings, which every unit then reads with their version.
func TestLeadershipElectionAndAgentCalls(t *testing.T) {
	m := newAgentModel(t)
	ctx, cancel := context.WithCancel(m.ctx)
	el, err := controller.NewLeadershipElector(controller.LeadershipElectorConfig{State: m.st, MinPass: time.Millisecond, Tick: 50 * time.Millisecond})
	m.ok("NewLeadershipElector", err)
	done := make(chan error, 1)
	go func() { done <- el.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("elector Run = %v", err)
		}
	}()
	gone := map[string]func(){}
	for _, id := range []string{"0", "1"} {
		p, err := m.st.Present(m.ctx, names.MachineTag(id), 10*time.Second)
		m.ok("Present", err)
		t.Cleanup(p.Close)
		gone[id] = p.Close
	}
	waitLeader := func(unit, want string) *pb.GetLeadershipResponse {
		t.Helper()
		var last *pb.GetLeadershipResponse
		poll.UntilSays(t, fmt.Sprintf("GetLeadership(%s) to name %q", unit, want), func() (bool, string) {
			resp, err := m.as("unit-"+unit).GetLeadership(m.ctx, &pb.GetLeadershipRequest{Unit: unit})
			if err != nil {
				return false, err.Error()
			}
			last = resp
			return resp.Leader == want, fmt.Sprintf("leader %q", resp.Leader)
		})
		return last
	}
	if r := waitLeader("kv/1", "kv/0"); r.IsLeader {
		t.Errorf("GetLeadership(kv/1).IsLeader = true, want false")
	}
	if r := waitLeader("kv/0", "kv/0"); !r.IsLeader {
		t.Errorf("GetLeadership(kv/0).IsLeader = false, want true")
	}

	st, err := m.admin().Status(m.ctx, &pb.StatusRequest{})
	m.ok("Status", err)
	for _, svc := range st.Status.Services {
		for _, u := range svc.Units {
			if want := u.Name == "kv/0"; u.Leader != want {
				t.Errorf("Status: unit %s leader %v, want %v", u.Name, u.Leader, want)
			}
		}
	}

	for _, tag := range []string{"unit-kv/1", "machine-0", "unit-app/0"} {
		_, err := m.as(tag).GetLeadership(m.ctx, &pb.GetLeadershipRequest{Unit: "kv/0"})
		wantCode(t, "GetLeadership(kv/0) as "+tag, err, codes.PermissionDenied, "may not read the leadership of unit kv/0")
		_, err = m.as(tag).SetLeaderSettings(m.ctx, &pb.SetLeaderSettingsRequest{Unit: "kv/0", Set: map[string]string{"a": "1"}})
		wantCode(t, "SetLeaderSettings(kv/0) as "+tag, err, codes.PermissionDenied, "may not set the leader settings of unit kv/0")
	}
	before := m.snapshot()
	_, err = m.as("unit-kv/1").SetLeaderSettings(m.ctx, &pb.SetLeaderSettingsRequest{Unit: "kv/1", Set: map[string]string{"a": "1"}})
	wantCode(t, "SetLeaderSettings(kv/1), not the leader", err, codes.FailedPrecondition, "not the leader")
	m.unchanged("a refused SetLeaderSettings", before)

	set, err := m.as("unit-kv/0").SetLeaderSettings(m.ctx, &pb.SetLeaderSettingsRequest{Unit: "kv/0", Set: map[string]string{"a": "1"}})
	m.ok("SetLeaderSettings(kv/0)", err)
	r := waitLeader("kv/1", "kv/0")
	if r.Settings["a"] != "1" || r.SettingsVersion != set.SettingsVersion || set.SettingsVersion == 0 {
		t.Errorf("GetLeadership(kv/1) = %v, want a=1 at version %d", r, set.SettingsVersion)
	}

	// kv/0's machine agent goes: kv/1 leads, and kv/0 writes nothing.
	gone["0"]()
	if r := waitLeader("kv/1", "kv/1"); !r.IsLeader {
		t.Errorf("GetLeadership(kv/1).IsLeader = false after the handover, want true")
	}
	_, err = m.as("unit-kv/0").SetLeaderSettings(m.ctx, &pb.SetLeaderSettingsRequest{Unit: "kv/0", Set: map[string]string{"a": "2"}})
	wantCode(t, "SetLeaderSettings(kv/0) after the handover", err, codes.FailedPrecondition, "not the leader")

	// No unit can lead: the leadership is vacated.
	gone["1"]()
	waitLeader("kv/0", "")
}

// TestAgentWatchLeadershipAuthorization: a unit's agent watches its own
// service's leadership and leader settings, no other agent does.
func TestAgentWatchLeadershipAuthorization(t *testing.T) {
	leadership := func(svc string) func(*agentModel) *pb.WatchSubject {
		return func(*agentModel) *pb.WatchSubject {
			return &pb.WatchSubject{Subject: &pb.WatchSubject_ServiceLeadership{ServiceLeadership: svc}}
		}
	}
	settings := func(svc string) func(*agentModel) *pb.WatchSubject {
		return func(*agentModel) *pb.WatchSubject {
			return &pb.WatchSubject{Subject: &pb.WatchSubject_LeaderSettings{LeaderSettings: svc}}
		}
	}
	elect := func(m *agentModel) {
		p, err := m.st.Present(m.ctx, names.MachineTag("0"), 10*time.Second)
		m.ok("Present", err)
		m.t.Cleanup(p.Close)
		m.ok("ElectLeader", m.st.ElectLeader(m.ctx, "kv/0"))
		_, err = m.st.SetLeaderSettings(m.ctx, "kv/0", map[string]string{"a": "1"}, nil)
		m.ok("SetLeaderSettings", err)
	}
	runAgentCases(t, []agentCase{
		{name: "unit: its service's leadership", as: "unit-kv/1", setup: elect, call: watchFirstOf(leadership("kv"), "kv/0")},
		{name: "unit: its service's leader settings", as: "unit-kv/1", setup: elect, call: watchFirstOf(settings("kv"), "kv")},
		{name: "unit: another service's leadership", as: "unit-app/0", call: watchFirstOf(leadership("kv")), code: codes.PermissionDenied, msg: "may not watch the leadership of service kv"},
		{name: "unit: another service's leader settings", as: "unit-app/0", call: watchFirstOf(settings("kv")), code: codes.PermissionDenied, msg: "may not watch the leader settings of service kv"},
		{name: "machine: a service's leadership", as: "machine-0", call: watchFirstOf(leadership("kv")), code: codes.PermissionDenied, msg: "may not watch the leadership of service kv"},
	})
}
