package controller

import (
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/names"
	"github.com/lifelinehq/lifeline/internal/testing/etcdtest"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// A service whose leader still holds by etcd's reading, where the
// elector's copy says it does not (the copy a moment ahead of etcd's
// reads, or behind them), is not settled: the elector tries it again
// rather than leaving a gone agent's unit leading for good.
func TestElectorSettlesOnlyWhatEtcdAgrees(t *testing.T) {
	ctx := etcdtest.Context(t)
	st, err := state.New(etcdtest.Client(t), state.Config{Namespace: etcdtest.Namespace(t)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.AddService(ctx, state.AddServiceArgs{Name: "kv", Charm: &pb.CharmRef{Name: "kv", Revision: 1}}); err != nil {
		t.Fatal(err)
	}
	units, err := st.AddUnits(ctx, "kv", 2, state.Placement{})
	if err != nil {
		t.Fatal(err)
	}
	present := map[string]*state.Presence{}
	for _, u := range units {
		p, err := st.Present(ctx, names.MachineTag(u.MachineId), 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		present[u.Name] = p
	}
	if err := st.ElectLeader(ctx, "kv/0"); err != nil {
		t.Fatal(err)
	}
	e, err := NewLeadershipElector(LeadershipElectorConfig{State: st})
	if err != nil {
		t.Fatal(err)
	}
	leader := func() string {
		t.Helper()
		v, err := st.Leadership(ctx, "kv")
		if err != nil {
			t.Fatal(err)
		}
		return v.Leader
	}
	for _, c := range []struct {
		what      string
		job       electorJob
		gone      string // the unit whose agent goes first
		want      bool
		wantAfter string
	}{
		{what: "to vacate a leadership that holds", job: electorJob{service: "kv", leader: "kv/0"}, want: false, wantAfter: "kv/0"},
		{what: "to hand over a leadership that holds", job: electorJob{service: "kv", leader: "kv/0", candidates: []string{"kv/1"}}, want: false, wantAfter: "kv/0"},
		{what: "to hand over once kv/0's agent went", gone: "kv/0", job: electorJob{service: "kv", leader: "kv/0", candidates: []string{"kv/1"}}, want: true, wantAfter: "kv/1"},
		{what: "to vacate once kv/1's agent went", gone: "kv/1", job: electorJob{service: "kv", leader: "kv/1"}, want: true, wantAfter: ""},
	} {
		if c.gone != "" {
			present[c.gone].Close()
		}
		if got := e.settle(ctx, c.job); got != c.want {
			t.Errorf("settle %s = %v, want %v", c.what, got, c.want)
		}
		if got := leader(); got != c.wantAfter {
			t.Errorf("after settle %s: leader %q, want %q", c.what, got, c.wantAfter)
		}
	}
}
