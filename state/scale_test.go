package state_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/testing/etcdtest"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// TestTxnOpsBoundedDestroyingTenThousandUnits destroys a service of 10,000
// units in 50 relations and takes everything to removal, and shows that no
// transaction on the way, the destroy included, holds more than 64
// operations: nothing grows with the model.
func TestTxnOpsBoundedDestroyingTenThousandUnits(t *testing.T) {
	const machines, relations = 100, 50
	units := 10_000
	if etcdtest.Backend() == etcdtest.Plain {
		// The bound is the code's, whichever client carries the
		// transactions; over the socket a fifth of the model shows it in a
		// fifth of the time (the cleaner's batches still fill up).
		units = 2_000
	}
	ns := etcdtest.Namespace(t)
	setup, err := state.New(etcdtest.Client(t), state.Config{Namespace: ns})
	must(t, "New", err)
	// Minutes, not seconds, under the race detector on two cores.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	addService(t, ctx, setup, "big", appEndpoints)
	ms, err := setup.AddMachines(ctx, machines)
	must(t, "AddMachines", err)
	for _, m := range ms {
		addUnits(t, ctx, setup, "big", units/machines, state.Placement{Machine: m.Id})
	}
	for i := 0; i < relations; i++ {
		svc := fmt.Sprintf("kv%c%c", 'a'+i/26, 'a'+i%26)
		addService(t, ctx, setup, svc, kvEndpoints)
		rel := relate(t, ctx, setup, "big", svc)
		// A few units of big in every relation's scope.
		for u := 0; u < 3; u++ {
			must(t, "EnterScope", setup.EnterScope(ctx, rel.Id, fmt.Sprintf("big/%d", i*3+u), nil))
		}
	}
	t.Logf("setup: %+v", setup.Stats())

	// Fresh counters for the destroy.
	st, err := state.New(etcdtest.Client(t), state.Config{Namespace: ns})
	must(t, "New", err)
	must(t, "DestroyService", st.DestroyService(ctx, "big"))
	if s := st.Stats(); s.Txns != 1 || s.MaxOps > 8 {
		t.Errorf("DestroyService took %d transactions of up to %d operations, want one small one", s.Txns, s.MaxOps)
	}
	if _, err := state.NewCleaner(st, 0).Pass(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("cleaner done: %+v", st.Stats())
	// The agents: each unit departs, goes dead and is removed.
	all, err := st.Units(ctx, "big")
	must(t, "Units", err)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(all); i += 8 {
				if all[i].Life != pb.Life_LIFE_DYING {
					errs <- fmt.Errorf("%s is %v after the cleaner ran", all[i].Name, all[i].Life)
					return
				}
				if err := playUnitAgent(ctx, st, all[i].Name); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("agents done at %v", time.Now())
	if got := life(t, ctx, st, "service", "big"); got != "removed" {
		t.Errorf("big is %s, want removed", got)
	}
	s := st.Stats()
	t.Logf("destroy: %+v", s)
	if s.MaxOps > state.MaxTxnOps {
		t.Errorf("largest transaction held %d operations, want at most %d", s.MaxOps, state.MaxTxnOps)
	}
	checkInvariants(t, st)
}
