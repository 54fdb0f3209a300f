package state_test

import (
	"sync"
	"testing"

	"github.com/lifelinehq/lifeline/internal/testing/etcdtest"
	"github.com/lifelinehq/lifeline/state"
)

// TestConflictsByOp: conflicts are counted under the method whose
// transaction failed. Two States over one model (two controllers) add units
// to one service at once; their reservations of numbers collide on the
// service's unit sequence, which each State only queues its own writers
// of, and are counted under the method that writes them (reserve.go).
func TestConflictsByOp(t *testing.T) {
	ns, ctx := etcdtest.Namespace(t), etcdtest.Context(t)
	a, err := state.New(etcdtest.Client(t), state.Config{Namespace: ns})
	must(t, "New", err)
	b, err := state.New(etcdtest.Client(t), state.Config{Namespace: ns})
	must(t, "New", err)
	t.Cleanup(func() { checkInvariants(t, a) })
	addService(t, ctx, a, "app", nil)
	ms, err := a.AddMachines(ctx, 8)
	must(t, "AddMachines", err)
	for round := 0; a.Stats().Conflicts+b.Stats().Conflicts == 0; round++ {
		if round == 20 {
			t.Skip("no transactions collided in 20 rounds")
		}
		var wg sync.WaitGroup
		for i, m := range ms {
			s := a
			if i%2 == 1 {
				s = b
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := s.AddUnits(ctx, "app", 2, state.Placement{Machine: m.Id})
				if err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
	}
	for _, s := range []*state.State{a, b} {
		by := s.ConflictsByOp()
		if got, want := by["reserveNumbers"], s.Stats().Conflicts; got != want || len(by) > 1 {
			t.Errorf("conflicts by operation %v, want all %d under reserveNumbers", by, want)
		}
	}
}
