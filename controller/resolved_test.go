package controller_test

import (
	"testing"

	"google.golang.org/grpc/codes"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// TestResolvedRefusals: Resolved answers a unit in error once; the State's
// refusals (not in error, already answered, no such unit) reach ctl as
// their codes, with their sentences.
func TestResolvedRefusals(t *testing.T) {
	e := newEnv(t)
	op := e.admin()
	upload(t, e.ctx, op, "testdata/kv")
	_, err := op.Deploy(e.ctx, &pb.DeployRequest{Charm: "kv", NumUnits: 2})
	must(t, "Deploy", err)
	must(t, "SetStatus", e.st.SetStatus(e.ctx, state.StatusUnitAgent, "kv/0", &pb.Status{Status: "error", Message: `hook failed: "config-changed"`}))
	must(t, "SetStatus", e.st.SetStatus(e.ctx, state.StatusUnitAgent, "kv/1", &pb.Status{Status: "idle"}))

	for _, c := range []struct {
		name string
		req  *pb.ResolvedRequest
		code codes.Code
		msg  string
	}{
		{"in error", &pb.ResolvedRequest{Unit: "kv/0"}, codes.OK, ""},
		{"again", &pb.ResolvedRequest{Unit: "kv/0"}, codes.AlreadyExists, "unit kv/0 is already resolved: its agent has yet to run its failed hook again"},
		{"again, no retry", &pb.ResolvedRequest{Unit: "kv/0", NoRetry: true}, codes.AlreadyExists, "unit kv/0 is already resolved"},
		{"idle", &pb.ResolvedRequest{Unit: "kv/1"}, codes.FailedPrecondition, "unit kv/1 is not in an error state"},
		{"no such unit", &pb.ResolvedRequest{Unit: "kv/7"}, codes.NotFound, "unit kv/7 not found"},
		{"a unit and all", &pb.ResolvedRequest{Unit: "kv/0", All: true}, codes.InvalidArgument, "one or the other"},
	} {
		_, err := op.Resolved(e.ctx, c.req)
		if c.code == codes.OK {
			must(t, c.name, err)
			continue
		}
		wantCode(t, c.name, err, c.code, c.msg)
	}
	if mode, _ := e.st.Resolved(e.ctx, "kv/0"); mode != pb.ResolvedMode_RESOLVED_MODE_RETRY {
		t.Errorf("kv/0's mark = %v, want the first answer's (retry)", mode)
	}
}

// TestResolvedAll answers every unit in error, each on its own, and says
// what became of each.
func TestResolvedAll(t *testing.T) {
	e := newEnv(t)
	op := e.admin()
	upload(t, e.ctx, op, "testdata/kv")
	_, err := op.Deploy(e.ctx, &pb.DeployRequest{Charm: "kv", NumUnits: 4})
	must(t, "Deploy", err)

	resp, err := op.Resolved(e.ctx, &pb.ResolvedRequest{All: true})
	must(t, "Resolved all, none in error", err)
	if len(resp.Results) != 0 {
		t.Errorf("Resolved all with no unit in error = %v, want no results", resp.Results)
	}

	for unit, st := range map[string]string{"kv/0": "error", "kv/1": "idle", "kv/2": "error", "kv/3": "error"} {
		must(t, "SetStatus", e.st.SetStatus(e.ctx, state.StatusUnitAgent, unit, &pb.Status{Status: st}))
	}
	_, err = op.Resolved(e.ctx, &pb.ResolvedRequest{Unit: "kv/2"}) // answered already: retry
	must(t, "Resolved kv/2", err)
	resp, err = op.Resolved(e.ctx, &pb.ResolvedRequest{All: true, NoRetry: true})
	must(t, "Resolved all", err)
	want := []struct {
		unit string
		code codes.Code
	}{{"kv/0", codes.OK}, {"kv/2", codes.AlreadyExists}, {"kv/3", codes.OK}}
	if len(resp.Results) != len(want) {
		t.Fatalf("Resolved all = %v, want results for kv/0, kv/2 and kv/3", resp.Results)
	}
	for i, w := range want {
		if r := resp.Results[i]; r.Unit != w.unit || codes.Code(r.Code) != w.code {
			t.Errorf("result %d = %v, want %s with code %v", i, r, w.unit, w.code)
		}
	}
	for unit, mode := range map[string]pb.ResolvedMode{
		"kv/0": pb.ResolvedMode_RESOLVED_MODE_NO_RETRY, "kv/1": pb.ResolvedMode_RESOLVED_MODE_UNSPECIFIED,
		"kv/2": pb.ResolvedMode_RESOLVED_MODE_RETRY, "kv/3": pb.ResolvedMode_RESOLVED_MODE_NO_RETRY,
	} {
		if got, err := e.st.Resolved(e.ctx, unit); err != nil || got != mode {
			t.Errorf("%s's mark = %v, %v; want %v", unit, got, err, mode)
		}
	}
}
