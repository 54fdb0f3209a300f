package controller_test

import (
	"testing"

	"google.golang.org/grpc/codes"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

func getRevision(unit string, n int64, wantName string) agentCall {
	return func(t *testing.T, m *agentModel, c pb.AgentServiceClient) error {
		resp, err := c.GetRevision(m.ctx, &pb.GetRevisionRequest{Unit: unit, Number: n})
		if err != nil {
			return err
		}
		rev := resp.GetRevision()
		if rev.GetNumber() != n || rev.GetSpec().GetConfig()["name"].GetStringValue() != wantName {
			t.Errorf("GetRevision(%s, %d) = %v, want revision %d with name %q", unit, n, rev, n, wantName)
		}
		return nil
	}
}

func setUnitRevision(unit string, n int64) agentCall {
	return func(t *testing.T, m *agentModel, c pb.AgentServiceClient) error {
		_, err := c.SetUnitRevision(m.ctx, &pb.SetUnitRevisionRequest{Unit: unit, Revision: n})
		return err
	}
}

// configured makes revision 2 of kv, its name "two", and grants kv/0 its
// permit to move there.
func configured(m *agentModel) {
	m.ok("UpdateServiceConfig", m.st.UpdateServiceConfig(m.ctx, "kv",
		map[string]*pb.ConfigValue{"name": {Value: &pb.ConfigValue_StringValue{StringValue: "two"}}}, nil))
	_, err := m.st.GrantPermits(m.ctx, "kv", 2, []string{"kv/0"})
	m.ok("GrantPermits", err)
}

func wantUnitRevision(unit string, current, target int64) func(*testing.T, *agentModel) {
	return func(t *testing.T, m *agentModel) {
		ur, err := m.st.UnitRevision(m.ctx, unit)
		if err != nil || ur.Current != current || ur.Target != target {
			t.Errorf("UnitRevision(%s) = %v, %v; want current %d, target %d", unit, ur, err, current, target)
		}
	}
}

func TestAgentGetRevision(t *testing.T) {
	runAgentCases(t, []agentCase{
		{name: "its service's", as: "unit-kv/0", call: getRevision("kv/0", 1, "kv")},
		{name: "a newer one", as: "unit-kv/0", setup: configured, call: getRevision("kv/0", 2, "two")},
		{name: "by its machine agent", as: "machine-0", call: getRevision("kv/0", 1, "kv")},
		{name: "a subordinate's, by its machine agent", as: "machine-2", call: getRevision("logger/0", 1, "logger")},
		{name: "none such", as: "unit-kv/0", call: getRevision("kv/0", 7, ""), code: codes.NotFound, msg: "service kv has no revision 7"},
		{name: "number 0", as: "unit-kv/0", call: getRevision("kv/0", 0, ""), code: codes.InvalidArgument, msg: "want a number of at least 1"},
		{name: "another unit's", as: "unit-kv/0", call: getRevision("app/0", 1, ""), code: codes.PermissionDenied, msg: "unit kv/0's agent may not read the revisions of unit app/0"},
		{name: "another machine's unit", as: "machine-0", call: getRevision("kv/1", 1, ""), code: codes.PermissionDenied, msg: "not on machine 0"},
		{name: "malformed name", as: "unit-kv/0", call: getRevision("kv", 1, ""), code: codes.InvalidArgument, msg: "invalid unit name"},
	})
}

func TestAgentSetUnitRevision(t *testing.T) {
	runAgentCases(t, []agentCase{
		{name: "its target", as: "unit-kv/0", setup: configured, call: setUnitRevision("kv/0", 2), check: wantUnitRevision("kv/0", 2, 2)},
		{name: "its target, by its machine agent", as: "machine-0", setup: configured, call: setUnitRevision("kv/0", 2), check: wantUnitRevision("kv/0", 2, 2)},
		{name: "the one it is on: nothing to do", as: "unit-kv/0", call: setUnitRevision("kv/0", 1), check: wantUnitRevision("kv/0", 1, 1)},
		{name: "not its target", as: "unit-kv/1", setup: configured, call: setUnitRevision("kv/1", 2), code: codes.FailedPrecondition, msg: "unit kv/1 is to run revision 1, not 2"},
		{name: "another unit's", as: "unit-kv/0", setup: configured, call: setUnitRevision("kv/1", 1), code: codes.PermissionDenied, msg: "may not report the revision of unit kv/1"},
		{name: "revision 0", as: "unit-kv/0", call: setUnitRevision("kv/0", 0), code: codes.InvalidArgument, msg: "want a number of at least 1"},
	})
}

// The unit_revision subject: a unit's agent and its machine's watch it;
// a change carries the unit's revisions.
func TestAgentWatchUnitRevision(t *testing.T) {
	subject := func(unit string) func(*agentModel) *pb.WatchSubject {
		return func(*agentModel) *pb.WatchSubject {
			return &pb.WatchSubject{Subject: &pb.WatchSubject_UnitRevision{UnitRevision: unit}}
		}
	}
	runAgentCases(t, []agentCase{
		{name: "its own", as: "unit-kv/0", call: watchFirstOf(subject("kv/0"), "kv/0")},
		{name: "by its machine agent", as: "machine-0", call: watchFirstOf(subject("kv/0"), "kv/0")},
		{name: "another unit's", as: "unit-kv/0", call: watchFirstOf(subject("kv/1")), code: codes.PermissionDenied, msg: "may not watch the revisions of unit kv/1"},
		{name: "another machine's unit", as: "machine-0", call: watchFirstOf(subject("kv/1")), code: codes.PermissionDenied, msg: "not on machine 0"},
	})
	m := newAgentModel(t)
	configured(m)
	resp, err := firstWatchResponse(m.ctx, m.as("unit-kv/0"), &pb.WatchRequest{Subject: subject("kv/0")(m)})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Changes) != 1 {
		t.Fatalf("Watch(unit_revision kv/0) = %v, want one change", resp)
	}
	if ur := resp.Changes[0].GetUnitRevision(); ur.GetCurrent() != 1 || ur.GetTarget() != 2 {
		t.Errorf("kv/0's revisions as watched = %v, want current 1, target 2", ur)
	}
}
