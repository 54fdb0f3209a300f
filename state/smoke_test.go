package state_test

import (
	"testing"

	"github.com/lifelinehq/lifeline/state"
)

func TestLifecycleSmoke(t *testing.T) {
	st, ctx := newState(t)
	addService(t, ctx, st, "kv", kvEndpoints)
	addService(t, ctx, st, "app", appEndpoints)
	addService(t, ctx, st, "logger", loggerEndpoints)
	kvs := addUnits(t, ctx, st, "kv", 2, state.Placement{})
	apps := addUnits(t, ctx, st, "app", 1, state.Placement{})
	rel := relate(t, ctx, st, "app", "kv")
	sub := relate(t, ctx, st, "app", "logger")
	must(t, "enter", st.EnterScope(ctx, rel.Id, kvs[0].Name, map[string]string{"host": "a"}))
	must(t, "enter", st.EnterScope(ctx, rel.Id, apps[0].Name, nil))
	lg, err := st.AddSubordinate(ctx, apps[0].Name, "logger")
	must(t, "addsub", err)
	must(t, "enter sub", st.EnterScope(ctx, sub.Id, lg.Name, nil))
	must(t, "enter sub", st.EnterScope(ctx, sub.Id, apps[0].Name, nil))
	checkInvariants(t, st)
	must(t, "destroy kv", st.DestroyService(ctx, "kv"))
	c := state.NewCleaner(st, 0)
	if _, err := c.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, st)
	if got := life(t, ctx, st, "unit", "kv/0"); got != "dying" {
		t.Fatalf("kv/0 is %s", got)
	}
}
