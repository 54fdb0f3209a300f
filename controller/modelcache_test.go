package controller_test

import (
	"slices"
	"testing"

	"github.com/lifelinehq/lifeline/internal/testing/poll"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// A whole-model status shows what its caller wrote just before, when the
// controller answers from the model it keeps (modelcache) as when it
// reads etcd: ctl deploy, then ctl status.
func TestStatusReadsItsWrites(t *testing.T) {
	e := newEnv(t)
	op := e.admin()
	// The first status starts the cache; those after it has listed the
	// model come from it.
	poll.Until(t, "the model cache ready", func() bool {
		if _, err := op.Status(e.ctx, &pb.StatusRequest{}); err != nil {
			t.Fatal(err)
		}
		return e.Server().ModelCacheStats().Ready
	})
	served := e.Server().ModelCacheStats().Served
	for range 10 {
		resp, err := op.AddMachines(e.ctx, &pb.AddMachinesRequest{NumMachines: 1})
		if err != nil {
			t.Fatal(err)
		}
		id := resp.Machines[0].Id
		msg := "step " + id
		if err := e.st.SetStatus(e.ctx, state.StatusMachine, id, &pb.Status{Status: "down", Message: msg}); err != nil {
			t.Fatal(err)
		}
		st, err := op.Status(e.ctx, &pb.StatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(st.Status.Machines, func(m *pb.MachineStatus) bool { return m.Id == id })
		if i < 0 {
			t.Fatalf("status after AddMachines = %d machines, none %s: want the machine added", len(st.Status.Machines), id)
		}
		if got := st.Status.Machines[i]; got.Message != msg {
			t.Fatalf("status of machine %s after SetStatus = %q, want %q", id, got.Message, msg)
		}
	}
	if got := e.Server().ModelCacheStats().Served; got <= served {
		t.Errorf("the model cache served %d statuses, as many as before the writes: want the statuses after them from it", got)
	}
}
