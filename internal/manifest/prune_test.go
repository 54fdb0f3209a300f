package manifest

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/testing/controllertest"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// farm is a machine and a service of two units placed on it.
const farm = `
name: farm
resources:
  box:
    type: machine
    config: {count: 1}
  cache:
    type: service
    dependencies: {box: box}
    config:
      charm: kv
      units: 2
      to: "{{ box.state.machines[0] }}"
`

// TestPruneLetsUnitsGoBeforeMachines: pruning a service and the machine
// its units are on destroys the service, waits (saying which units it
// waits for) until its units are gone, and only then destroys the
// machine; with units that never go it gives up after its timeout and
// destroys no machine.
func TestPruneLetsUnitsGoBeforeMachines(t *testing.T) {
	e := controllertest.New(t, controllertest.Options{Cleaner: true})
	op := e.Operator()
	ctx := context.Background()
	c := checked(t, farm)
	if _, err := c.Apply(ctx, ApplyOptions{Model: op, Exec: &rpcExecutor{e: e, op: op}}); err != nil {
		t.Fatal(err)
	}
	empty := checked(t, "name: farm\nresources: {}\n")
	actions, err := empty.PlanPrune(ctx, op)
	if err != nil {
		t.Fatal(err)
	}
	var plan []string
	for _, a := range actions {
		plan = append(plan, a.Describe())
	}
	st, err := op.Status(ctx, &pb.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	machine := st.Status.Services[0].Units[0].Machine
	if want := []string{"destroy service cache", "destroy machine " + machine}; !reflect.DeepEqual(plan, want) {
		t.Fatalf("PlanPrune = %q, want %q", plan, want)
	}

	t.Run("units that never go", func(t *testing.T) {
		var destroyed []string
		err := Prune(ctx, actions, PruneOptions{Model: op, Timeout: 300 * time.Millisecond, Poll: 50 * time.Millisecond,
			Destroy: func(ctx context.Context, a Action) error {
				destroyed = append(destroyed, a.Describe())
				return nil // nothing destroyed: the units stay alive
			}})
		if err == nil || !strings.Contains(err.Error(), "2 units to go before destroying machine "+machine+": cache/0, cache/1; no machine was destroyed") {
			t.Errorf("Prune = %v, want a timeout naming the units", err)
		}
		if want := []string{"destroy service cache"}; !reflect.DeepEqual(destroyed, want) {
			t.Errorf("destroyed %q, want %q", destroyed, want)
		}
	})

	// The test is the machine's agent: once the cleaner set the units
	// dying, it removes them, one after the other.
	var mu sync.Mutex
	var steps []string
	step := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		steps = append(steps, s)
	}
	agentDone := make(chan error, 1)
	go func() {
		agentDone <- func() error {
			for _, u := range []string{"cache/0", "cache/1"} {
				for {
					unit, err := e.State.Unit(ctx, u)
					if err != nil {
						return err
					}
					if unit.Life != pb.Life_LIFE_ALIVE {
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
				time.Sleep(300 * time.Millisecond)
				if err := e.State.EnsureUnitDead(ctx, u); err != nil {
					return err
				}
				if err := e.State.RemoveUnit(ctx, u); err != nil {
					return err
				}
				step("removed " + u)
			}
			return nil
		}()
	}()
	var lines []string
	err = Prune(ctx, actions, PruneOptions{Model: op, Poll: 50 * time.Millisecond,
		Progress: func(l string) { lines = append(lines, l) },
		Destroy: func(ctx context.Context, a Action) error {
			step(a.Describe())
			var err error
			switch a.Kind {
			case ActDestroyService:
				_, err = op.DestroyService(ctx, &pb.DestroyServiceRequest{Service: a.Service})
			case ActDestroyMachine:
				_, err = op.DestroyMachines(ctx, &pb.DestroyMachinesRequest{Machines: a.Units})
			default:
				err = fmt.Errorf("unexpected %s", a.Kind)
			}
			return err
		}})
	if err != nil {
		t.Fatalf("Prune: %v", err)
	}
	if err := <-agentDone; err != nil {
		t.Fatal(err)
	}
	want := []string{"destroy service cache", "removed cache/0", "removed cache/1", "destroy machine " + machine}
	if !reflect.DeepEqual(steps, want) {
		t.Errorf("steps %q, want %q", steps, want)
	}
	if len(lines) < 3 || lines[0] != "prune: - destroy service cache" ||
		!strings.HasPrefix(lines[1], "prune: waiting for 2 units to go before destroying machine "+machine+": cache/0, cache/1") ||
		lines[len(lines)-1] != "prune: - destroy machine "+machine {
		t.Errorf("progress:\n%s", strings.Join(lines, "\n"))
	}
	m, err := e.State.Machine(ctx, machine)
	if err != nil || m.Life != pb.Life_LIFE_DYING {
		t.Errorf("machine %s: %v, %v; want dying", machine, m, err)
	}
}
