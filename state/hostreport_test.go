package state_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/lifelinehq/lifeline/internal/testing/etcdtest"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

func hostReport(rev int64) *pb.HostReport {
	return &pb.HostReport{
		AppliedRevision: rev, DaemonsApplied: true,
		Claims: &pb.HostClaimsReport{Ports: []string{"8080/tcp"}, OpenedPorts: []string{"9000-9010/udp"},
			Files: []string{"/etc/kv.conf"}, Packages: []*pb.HostPackage{{Name: "jq", Version: "1.6*"}}, Daemons: []string{"kv"}},
		LastJob: &pb.HostJob{Job: "host-claims", Revision: rev, Run: 1, Changed: 1, Pruned: 2,
			Tasks: []*pb.HostTask{{Kind: "manage", Target: "/etc/kv.conf", Outcome: "changed"}}},
		Daemons: []*pb.DaemonReport{{Name: "kv", State: "running", Pid: 42, SinceUnixNano: 1}},
	}
}

// TestHostReport: a unit's report is stored, replaced by the next, read
// back; a report of a unit that does not exist, too large, or with a bad
// name is refused and changes nothing.
func TestHostReport(t *testing.T) {
	st, ctx := newState(t)
	addService(t, ctx, st, "kv", kvEndpoints)
	addUnits(t, ctx, st, "kv", 1, state.Placement{})
	if r, err := st.HostReport(ctx, "kv/0"); err != nil || r != nil {
		t.Fatalf("HostReport before any = %v, %v; want nil, nil", r, err)
	}
	must(t, "SetHostReport", st.SetHostReport(ctx, "kv/0", hostReport(1)))
	must(t, "SetHostReport", st.SetHostReport(ctx, "kv/0", hostReport(2)))
	r, err := st.HostReport(ctx, "kv/0")
	must(t, "HostReport", err)
	if !proto.Equal(r, hostReport(2)) {
		t.Errorf("HostReport = %v, want %v", r, hostReport(2))
	}
	// Its port claims, declared then opened, each once, are status's.
	wantPorts := func(want ...string) {
		t.Helper()
		if got, err := st.HostPorts(ctx, "kv/0"); err != nil || !slices.Equal(got, want) {
			t.Errorf("HostPorts = %q, %v; want %q", got, err, want)
		}
		m, err := st.Model(ctx)
		must(t, "Model", err)
		if got := m.Ports["kv/0"]; !slices.Equal(got, want) {
			t.Errorf("Model's ports of kv/0 = %q, want %q", got, want)
		}
		sm, err := st.SelectModel(ctx, state.Selection{Units: []string{"kv/0"}})
		must(t, "SelectModel", err)
		if got := sm.Ports["kv/0"]; !slices.Equal(got, want) {
			t.Errorf("SelectModel's ports of kv/0 = %q, want %q", got, want)
		}
	}
	wantPorts("8080/tcp", "9000-9010/udp")
	opened := hostReport(3)
	opened.Claims.OpenedPorts = []string{"8080/tcp", "53/udp"}
	must(t, "SetHostReport", st.SetHostReport(ctx, "kv/0", opened))
	wantPorts("8080/tcp", "53/udp")
	none := hostReport(4)
	none.Claims.Ports, none.Claims.OpenedPorts = nil, nil
	must(t, "SetHostReport", st.SetHostReport(ctx, "kv/0", none))
	wantPorts()
	must(t, "SetHostReport", st.SetHostReport(ctx, "kv/0", hostReport(2)))

	big := hostReport(3)
	for i := 0; i < 2000; i++ {
		big.LastJob.Tasks = append(big.LastJob.Tasks, &pb.HostTask{Kind: "manage", Target: "/etc/" + strings.Repeat("x", 80), Outcome: "changed"})
	}
	before, err := st.Snapshot(ctx)
	must(t, "Snapshot", err)
	wantErr(t, "SetHostReport(big)", st.SetHostReport(ctx, "kv/0", big), state.ErrInvalid, "", "at most 128 KiB")
	wantErr(t, "SetHostReport(kv/9)", st.SetHostReport(ctx, "kv/9", hostReport(1)), state.ErrNotFound, "", "unit kv/9 not found")
	wantErr(t, "SetHostReport(kv)", st.SetHostReport(ctx, "kv", hostReport(1)), state.ErrInvalid, "", "")
	wantErr(t, "SetHostReport(nil)", st.SetHostReport(ctx, "kv/0", nil), state.ErrInvalid, "", "no report")
	after, err := st.Snapshot(ctx)
	must(t, "Snapshot", err)
	if after.Revision != before.Revision {
		t.Errorf("refused reports moved the revision from %d to %d", before.Revision, after.Revision)
	}
}

// TestHostReportGoesWithTheUnit: the transaction that removes a unit
// deletes its host report, whichever way it is removed.
func TestHostReportGoesWithTheUnit(t *testing.T) {
	st, ctx := newState(t)
	addService(t, ctx, st, "kv", kvEndpoints)
	addUnits(t, ctx, st, "kv", 1, state.Placement{})
	addUnits(t, ctx, st, "kv", 1, state.Placement{Unassigned: true})
	for _, u := range []string{"kv/0", "kv/1"} {
		must(t, "SetHostReport("+u+")", st.SetHostReport(ctx, u, hostReport(1)))
	}
	// kv/1, never assigned, is removed as it is destroyed; kv/0 once dead.
	must(t, "DestroyUnit(kv/1)", st.DestroyUnit(ctx, "kv/1", state.DestroyOptions{}))
	must(t, "DestroyUnit(kv/0)", st.DestroyUnit(ctx, "kv/0", state.DestroyOptions{}))
	must(t, "EnsureUnitDead(kv/0)", st.EnsureUnitDead(ctx, "kv/0"))
	must(t, "SetHostReport(dead kv/0)", st.SetHostReport(ctx, "kv/0", hostReport(2)))
	must(t, "RemoveUnit(kv/0)", st.RemoveUnit(ctx, "kv/0"))
	for _, u := range []string{"kv/0", "kv/1"} {
		if r, err := st.HostReport(ctx, u); err != nil || r != nil {
			t.Errorf("HostReport(%s) after its removal = %v, %v; want nil, nil", u, r, err)
		}
	}
	snap, err := st.Snapshot(ctx)
	must(t, "Snapshot", err)
	for k := range snap.Values {
		if strings.HasPrefix(k, "host-reports/") || strings.HasPrefix(k, "host-ports/") {
			t.Errorf("%s is left after its unit's removal", k)
		}
	}
}

// TestInvariantsCatchHostReports: a host report whose unit does not exist,
// or that is not a host report, breaks an invariant.
func TestInvariantsCatchHostReports(t *testing.T) {
	raw, ns := etcdtest.Client(t), etcdtest.Namespace(t)
	st, err := state.New(raw, state.Config{Namespace: ns})
	must(t, "New", err)
	ctx := context.Background()
	b, err := proto.Marshal(hostReport(1))
	must(t, "Marshal", err)
	_, err = raw.Put(ctx, ns+state.HostReportKey("kv/7"), string(b))
	must(t, "Put", err)
	_, err = raw.Put(ctx, ns+state.HostReportKey("kv/8"), "\xff\xff")
	must(t, "Put", err)
	ports, err := proto.Marshal(&pb.HostPorts{Ports: []string{"80/tcp"}})
	must(t, "Marshal", err)
	_, err = raw.Put(ctx, ns+state.HostPortsKey("kv/7"), string(ports))
	must(t, "Put", err)
	_, err = raw.Put(ctx, ns+state.HostPortsKey("kv/6"), string(ports))
	must(t, "Put", err)
	snap, err := st.Snapshot(ctx)
	must(t, "Snapshot", err)
	err = state.CheckInvariants(snap)
	for _, want := range []string{"host-reports/kv/7 outlives its unit", "host-reports/kv/8: not a host report",
		`host-ports/kv/7 holds ["80/tcp"], its host report ["8080/tcp" "9000-9010/udp"]`, "host-ports/kv/6 without its unit's host report"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckInvariants = %v; want it to say %q", err, want)
		}
	}
}
