package controller_test

import (
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

func testHostReport() *pb.HostReport {
	return &pb.HostReport{
		AppliedRevision: 1, DaemonsApplied: true,
		Claims: &pb.HostClaimsReport{Ports: []string{"8080/tcp"}, OpenedPorts: []string{"9000/udp"},
			Files: []string{"/etc/kv.conf"}, Packages: []*pb.HostPackage{{Name: "jq"}}, Daemons: []string{"kv"}},
		LastJob: &pb.HostJob{Job: "host-claims", Revision: 1, Run: 2, Changed: 1, Pruned: 3, TasksCut: 1,
			Tasks: []*pb.HostTask{{Kind: "install", Target: "jq", Outcome: "unchanged"}}},
		Daemons: []*pb.DaemonReport{{Name: "kv", State: "running", Pid: 42, Restarts: 1, SinceUnixNano: 5}},
	}
}

func setHostReport(unit string, r *pb.HostReport) agentCall {
	return func(t *testing.T, m *agentModel, c pb.AgentServiceClient) error {
		_, err := c.SetHostReport(m.ctx, &pb.SetHostReportRequest{Unit: unit, Report: r})
		return err
	}
}

func wantHostReport(unit string) func(*testing.T, *agentModel) {
	return func(t *testing.T, m *agentModel) {
		r, err := m.st.HostReport(m.ctx, unit)
		if err != nil || !proto.Equal(r, testHostReport()) {
			t.Errorf("HostReport(%s) = %v, %v; want %v", unit, r, err, testHostReport())
		}
	}
}

// TestAgentSetHostReport: a unit's agent reports its own host, its
// machine's agent the host of a unit on it; anyone else is refused, and
// so is a report past the record's bound.
func TestAgentSetHostReport(t *testing.T) {
	big := testHostReport()
	for i := 0; i < 2000; i++ {
		big.LastJob.Tasks = append(big.LastJob.Tasks, &pb.HostTask{Kind: "manage", Target: "/etc/" + strings.Repeat("x", 80), Outcome: "changed"})
	}
	runAgentCases(t, []agentCase{
		{name: "its own", as: "unit-kv/0", call: setHostReport("kv/0", testHostReport()), check: wantHostReport("kv/0")},
		{name: "by its machine agent", as: "machine-0", call: setHostReport("kv/0", testHostReport()), check: wantHostReport("kv/0")},
		{name: "a subordinate's, by its machine agent", as: "machine-2", call: setHostReport("logger/0", testHostReport()), check: wantHostReport("logger/0")},
		{name: "another unit's", as: "unit-kv/0", call: setHostReport("kv/1", testHostReport()), code: codes.PermissionDenied, msg: "unit kv/0's agent may not report the host of unit kv/1"},
		{name: "its subordinate's", as: "unit-app/0", call: setHostReport("logger/0", testHostReport()), code: codes.PermissionDenied, msg: "may not report the host of unit logger/0"},
		{name: "another machine's unit", as: "machine-0", call: setHostReport("kv/1", testHostReport()), code: codes.PermissionDenied, msg: "not on machine 0"},
		{name: "no such unit", as: "machine-0", call: setHostReport("kv/9", testHostReport()), code: codes.NotFound, msg: "unit kv/9 not found"},
		{name: "no report", as: "unit-kv/0", call: setHostReport("kv/0", nil), code: codes.InvalidArgument, msg: "no report"},
		{name: "too large", as: "unit-kv/0", call: setHostReport("kv/0", big), code: codes.InvalidArgument, msg: "at most 131072"},
		{name: "malformed name", as: "unit-kv/0", call: setHostReport("kv", testHostReport()), code: codes.InvalidArgument, msg: "invalid unit name"},
	})
}

// TestShowUnitHost: ShowUnit shows the unit's host report: its claims,
// its last job's tasks, its daemons.
func TestShowUnitHost(t *testing.T) {
	m := newAgentModel(t)
	op := m.admin()
	resp, err := op.ShowUnit(m.ctx, &pb.ShowUnitRequest{Unit: "kv/0"})
	must(t, "ShowUnit(kv/0)", err)
	if d := resp.Unit; d.HostClaims != nil || d.LastJob != nil || d.Daemons != nil || d.HostRevision != 0 {
		t.Errorf("ShowUnit(kv/0) before any host report shows %v, %v, %v", d.HostClaims, d.LastJob, d.Daemons)
	}
	r := testHostReport()
	r.Conflicts = []string{"port 8080/tcp is claimed by app/0: kept revision 1"}
	r.ReportedUnixNano = 7
	must(t, "SetHostReport", m.st.SetHostReport(m.ctx, "kv/0", r))
	resp, err = op.ShowUnit(m.ctx, &pb.ShowUnitRequest{Unit: "kv/0"})
	must(t, "ShowUnit(kv/0)", err)
	d := resp.Unit
	if !proto.Equal(d.HostClaims, r.Claims) || !proto.Equal(d.LastJob, r.LastJob) || len(d.Daemons) != 1 || !proto.Equal(d.Daemons[0], r.Daemons[0]) ||
		d.HostRevision != 1 || len(d.HostConflicts) != 1 || d.HostConflicts[0] != r.Conflicts[0] || d.HostReportedUnixNano != 7 {
		t.Errorf("ShowUnit(kv/0) host = %v %v %v rev %d conflicts %v at %d; want the report %v",
			d.HostClaims, d.LastJob, d.Daemons, d.HostRevision, d.HostConflicts, d.HostReportedUnixNano, r)
	}
}

// TestStatusShowsPorts: a unit's port claims, declared and opened, as its
// last host report gave them, show in its status, the whole model's or a
// selection's.
func TestStatusShowsPorts(t *testing.T) {
	m := newAgentModel(t)
	op := m.admin()
	must(t, "SetHostReport", m.st.SetHostReport(m.ctx, "kv/0", testHostReport()))
	for _, req := range []*pb.StatusRequest{{}, {Units: []string{"kv/0"}}} {
		resp, err := op.Status(m.ctx, req)
		must(t, "Status", err)
		var got []string
		for _, s := range resp.Status.GetServices() {
			for _, u := range s.Units {
				switch u.Name {
				case "kv/0":
					got = u.Ports
				default:
					if len(u.Ports) != 0 {
						t.Errorf("Status(%v): %s has ports %q, want none", req, u.Name, u.Ports)
					}
				}
			}
		}
		if want := []string{"8080/tcp", "9000/udp"}; !slices.Equal(got, want) {
			t.Errorf("Status(%v): kv/0's ports = %q, want %q", req, got, want)
		}
	}
}
