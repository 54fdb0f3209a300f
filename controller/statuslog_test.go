package controller_test

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// statusLogEnv is a controller with service kv and its unit kv/0 on
// machine 0, built with state directly.
func statusLogEnv(t *testing.T) *env {
	t.Helper()
	e := newEnv(t)
	_, err := e.st.AddService(e.ctx, state.AddServiceArgs{Name: "kv", Charm: &pb.CharmRef{Name: "kv", Revision: 1}})
	must(t, "AddService(kv)", err)
	us, err := e.st.AddUnits(e.ctx, "kv", 1, state.Placement{})
	must(t, "AddUnits(kv)", err)
	if us[0].Name != "kv/0" || us[0].MachineId != "0" {
		t.Fatalf("AddUnits(kv) = %v, want kv/0 on machine 0", us[0])
	}
	return e
}

// logLines renders entries as "kind status message data" lines.
func logLines(entries []*pb.StatusLogEntry) string {
	var lines []string
	for _, e := range entries {
		lines = append(lines, fmt.Sprintf("%s %s %q %v", e.Kind, e.Status, e.Message, e.Data))
	}
	return strings.Join(lines, "\n")
}

func TestShowStatusLog(t *testing.T) {
	e := statusLogEnv(t)
	op := e.admin()
	resp, err := op.ShowStatusLog(e.ctx, &pb.ShowStatusLogRequest{Unit: "kv/0"})
	must(t, "ShowStatusLog(kv/0)", err)
	if len(resp.Entries) != 0 {
		t.Errorf("ShowStatusLog of a new unit = %v, want no entries", resp.Entries)
	}

	const (
		agent    = pb.UnitStatusKind_UNIT_STATUS_KIND_AGENT
		workload = pb.UnitStatusKind_UNIT_STATUS_KIND_WORKLOAD
	)
	unit, machine := e.agent("unit-kv/0"), e.agent("machine-0")
	set := func(c pb.AgentServiceClient, kind pb.UnitStatusKind, st *pb.Status) {
		t.Helper()
		_, err := c.SetUnitStatus(e.ctx, &pb.SetUnitStatusRequest{Unit: "kv/0", Kind: kind, Status: st})
		must(t, "SetUnitStatus", err)
	}
	set(machine, agent, &pb.Status{Status: "allocating", Message: "starting the unit agent"})
	set(unit, agent, &pb.Status{Status: "executing", Message: "running install hook", Data: map[string]string{"state": "new"}})
	set(unit, workload, &pb.Status{Status: "maintenance", Message: "installing"})
	set(unit, agent, &pb.Status{Status: "error", Message: `hook failed: "install"`,
		Data: map[string]string{"state": "install-error", "output": "fetching\ndisk full"}})
	set(unit, agent, &pb.Status{Status: "error", Message: `hook failed: "install"`, // again: no entry
		Data: map[string]string{"state": "install-error", "output": "fetching\ndisk full"}})
	set(unit, workload, &pb.Status{Status: "active", Message: "serving"})

	resp, err = op.ShowStatusLog(e.ctx, &pb.ShowStatusLogRequest{Unit: "kv/0"})
	must(t, "ShowStatusLog(kv/0)", err)
	want := strings.Join([]string{
		`agent allocating "starting the unit agent" map[]`,
		`agent executing "running install hook" map[state:new]`,
		`workload maintenance "installing" map[]`,
		`agent error "hook failed: \"install\"" map[output:fetching` + "\n" + `disk full state:install-error]`,
		`workload active "serving" map[]`,
	}, "\n")
	if got := logLines(resp.Entries); got != want {
		t.Errorf("ShowStatusLog(kv/0) =\n%s\nwant\n%s", got, want)
	}
	for i, en := range resp.Entries {
		if en.SinceUnixNano == 0 || (i > 0 && en.SinceUnixNano < resp.Entries[i-1].SinceUnixNano) {
			t.Errorf("entry %d since %d (the one before %d): want stamped, in order", i, en.SinceUnixNano, resp.Entries[max(i-1, 0)].SinceUnixNano)
		}
	}

	resp, err = op.ShowStatusLog(e.ctx, &pb.ShowStatusLogRequest{Unit: "kv/0", Limit: 2})
	must(t, "ShowStatusLog(kv/0, 2)", err)
	if got := logLines(resp.Entries); !strings.HasPrefix(got, "agent error") || !strings.HasSuffix(got, `workload active "serving" map[]`) {
		t.Errorf("ShowStatusLog(kv/0, limit 2) =\n%s\nwant the newest two, oldest first", got)
	}
}

func TestShowStatusLogKeepsTheLast50(t *testing.T) {
	e := statusLogEnv(t)
	unit := e.agent("unit-kv/0")
	for i := 1; i <= 60; i++ {
		_, err := unit.SetUnitStatus(e.ctx, &pb.SetUnitStatusRequest{Unit: "kv/0", Kind: pb.UnitStatusKind_UNIT_STATUS_KIND_WORKLOAD,
			Status: &pb.Status{Status: "active", Message: fmt.Sprint(i)}})
		must(t, "SetUnitStatus", err)
	}
	resp, err := e.admin().ShowStatusLog(e.ctx, &pb.ShowStatusLogRequest{Unit: "kv/0", Limit: 50})
	must(t, "ShowStatusLog(kv/0, 50)", err)
	if n := len(resp.Entries); n != 50 || resp.Entries[0].Message != "11" || resp.Entries[49].Message != "60" {
		t.Errorf("ShowStatusLog(kv/0) after 60 changes = %d entries, want 50: 11 to 60", n)
	}
}

func TestShowStatusLogRefusals(t *testing.T) {
	e := statusLogEnv(t)
	op := e.admin()
	for _, tc := range []struct {
		name string
		req  *pb.ShowStatusLogRequest
		code codes.Code
		msg  string
	}{
		{"unknown unit", &pb.ShowStatusLogRequest{Unit: "kv/9"}, codes.NotFound, "unit kv/9 not found"},
		{"unknown service", &pb.ShowStatusLogRequest{Unit: "nope/0"}, codes.NotFound, "unit nope/0 not found"},
		{"a service's name", &pb.ShowStatusLogRequest{Unit: "kv"}, codes.InvalidArgument, "invalid unit name"},
		{"no name", &pb.ShowStatusLogRequest{}, codes.InvalidArgument, "invalid unit name"},
		{"limit over 50", &pb.ShowStatusLogRequest{Unit: "kv/0", Limit: 51}, codes.InvalidArgument, "limit 51: want 1 to 50"},
		{"negative limit", &pb.ShowStatusLogRequest{Unit: "kv/0", Limit: -1}, codes.InvalidArgument, "limit -1: want 1 to 50"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := op.ShowStatusLog(e.ctx, tc.req)
			wantCode(t, "ShowStatusLog", err, tc.code, tc.msg)
		})
	}
	t.Run("by an agent", func(t *testing.T) {
		c := pb.NewOperatorServiceClient(e.conn("unit-kv/0"))
		_, err := c.ShowStatusLog(e.ctx, &pb.ShowStatusLogRequest{Unit: "kv/0"})
		wantCode(t, "ShowStatusLog as unit kv/0", err, codes.PermissionDenied, "may not call ShowStatusLog")
	})
}
