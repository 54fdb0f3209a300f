package state_test

import (
	"context"
	"slices"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"github.com/lifelinehq/lifeline/internal/testing/etcdtest"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

const (
	retry   = pb.ResolvedMode_RESOLVED_MODE_RETRY
	noRetry = pb.ResolvedMode_RESOLVED_MODE_NO_RETRY
)

// setAgent sets the named unit's agent status.
func setAgent(t testing.TB, ctx context.Context, st *state.State, unit, status string) {
	t.Helper()
	must(t, "SetStatus("+unit+", "+status+")", st.SetStatus(ctx, state.StatusUnitAgent, unit, &pb.Status{Status: status}))
}

// TestSetResolvedRule: the transaction that sets a unit's resolved mark
// refuses a unit that does not exist, whose agent is not in error, or
// whose mark its agent has yet to act on; a refusal changes nothing.
func TestSetResolvedRule(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T, ctx context.Context, st *state.State)
		unit  string
		mode  pb.ResolvedMode
		want  error  // nil: accepted
		msg   string // the refusal's sentence
		mark  pb.ResolvedMode
	}{
		{name: "in error", unit: "kv/0", mode: retry, mark: retry,
			setup: func(t *testing.T, ctx context.Context, st *state.State) { setAgent(t, ctx, st, "kv/0", "error") }},
		{name: "in error, no retry", unit: "kv/0", mode: noRetry, mark: noRetry,
			setup: func(t *testing.T, ctx context.Context, st *state.State) { setAgent(t, ctx, st, "kv/0", "error") }},
		{name: "dying, in error", unit: "kv/0", mode: retry, mark: retry,
			setup: func(t *testing.T, ctx context.Context, st *state.State) {
				setAgent(t, ctx, st, "kv/0", "error")
				must(t, "DestroyUnit", st.DestroyUnit(ctx, "kv/0", state.DestroyOptions{}))
			}},
		{name: "no agent status yet", unit: "kv/0", mode: retry,
			want: state.ErrNotInError, msg: "unit kv/0 is not in an error state"},
		{name: "idle", unit: "kv/0", mode: retry, want: state.ErrNotInError, msg: "unit kv/0 is not in an error state",
			setup: func(t *testing.T, ctx context.Context, st *state.State) { setAgent(t, ctx, st, "kv/0", "idle") }},
		{name: "out of error again", unit: "kv/0", mode: noRetry, want: state.ErrNotInError, msg: "unit kv/0 is not in an error state",
			setup: func(t *testing.T, ctx context.Context, st *state.State) {
				setAgent(t, ctx, st, "kv/0", "error")
				setAgent(t, ctx, st, "kv/0", "executing")
			}},
		{name: "already resolved", unit: "kv/0", mode: retry, mark: retry,
			want: state.ErrAlreadyResolved, msg: "unit kv/0 is already resolved: its agent has yet to run its failed hook again",
			setup: func(t *testing.T, ctx context.Context, st *state.State) {
				setAgent(t, ctx, st, "kv/0", "error")
				must(t, "SetResolved", st.SetResolved(ctx, "kv/0", retry))
			}},
		{name: "already resolved, then asked otherwise", unit: "kv/0", mode: retry, mark: noRetry,
			want: state.ErrAlreadyResolved, msg: "unit kv/0 is already resolved: its agent has yet to count its failed hook as done",
			setup: func(t *testing.T, ctx context.Context, st *state.State) {
				setAgent(t, ctx, st, "kv/0", "error")
				must(t, "SetResolved", st.SetResolved(ctx, "kv/0", noRetry))
			}},
		{name: "acted on, in error again", unit: "kv/0", mode: noRetry, mark: noRetry,
			setup: func(t *testing.T, ctx context.Context, st *state.State) {
				setAgent(t, ctx, st, "kv/0", "error")
				must(t, "SetResolved", st.SetResolved(ctx, "kv/0", retry))
				must(t, "ClearResolved", st.ClearResolved(ctx, "kv/0"))
				setAgent(t, ctx, st, "kv/0", "executing")
				setAgent(t, ctx, st, "kv/0", "error")
			}},
		{name: "no such unit", unit: "kv/9", mode: retry, want: state.ErrNotFound, msg: "unit kv/9 not found"},
		{name: "a bad name", unit: "kv", mode: retry, want: state.ErrInvalid},
		{name: "no mode", unit: "kv/0", want: state.ErrInvalid, msg: "resolved needs a mode",
			setup: func(t *testing.T, ctx context.Context, st *state.State) { setAgent(t, ctx, st, "kv/0", "error") }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, ctx := newState(t)
			addService(t, ctx, st, "kv", kvEndpoints)
			addUnits(t, ctx, st, "kv", 1, state.Placement{})
			if c.setup != nil {
				c.setup(t, ctx, st)
			}
			before, err := st.Snapshot(ctx)
			must(t, "Snapshot", err)
			err = st.SetResolved(ctx, c.unit, c.mode)
			if c.want == nil {
				must(t, "SetResolved("+c.unit+")", err)
			} else {
				wantErr(t, "SetResolved("+c.unit+")", err, c.want, "", c.msg)
				after, err := st.Snapshot(ctx)
				must(t, "Snapshot", err)
				if after.Revision != before.Revision {
					t.Errorf("a refused SetResolved moved the revision from %d to %d", before.Revision, after.Revision)
				}
			}
			if c.unit == "kv/0" {
				if mode, err := st.Resolved(ctx, "kv/0"); err != nil || mode != c.mark {
					t.Errorf("Resolved(kv/0) = %v, %v; want %v", mode, err, c.mark)
				}
			}
		})
	}
}

// TestRaceSetResolved answers a unit's failure from several operators at
// once, while its agent leaves the error state: at most one answer is
// taken, and only ever while the agent's status says error.
func TestRaceSetResolved(t *testing.T) {
	raw, ns := etcdtest.Client(t), etcdtest.Namespace(t)
	st, err := state.New(raw, state.Config{Namespace: ns})
	must(t, "New", err)
	ctx := etcdtest.Context(t)
	t.Cleanup(func() { checkInvariants(t, st) })
	addService(t, ctx, st, "kv", kvEndpoints)
	addUnits(t, ctx, st, "kv", 1, state.Placement{})
	for round := 0; round < raceRounds; round++ {
		setAgent(t, ctx, st, "kv/0", "error")
		must(t, "ClearResolved", st.ClearResolved(ctx, "kv/0"))
		answer := func(mode pb.ResolvedMode) func() error {
			return func() error { return st.SetResolved(ctx, "kv/0", mode) }
		}
		errs := parallel(answer(retry), answer(noRetry), answer(retry), func() error {
			return st.SetStatus(ctx, state.StatusUnitAgent, "kv/0", &pb.Status{Status: "executing"})
		})
		if errs[3] != nil {
			t.Fatalf("round %d: SetStatus: %v", round, errs[3])
		}
		taken := 0
		for _, err := range errs[:3] {
			allowed(t, err, state.ErrAlreadyResolved, state.ErrNotInError)
			if err == nil {
				taken++
			}
		}
		resp, err := raw.Get(ctx, ns+state.ResolvedKey("kv/0"))
		must(t, "Get", err)
		switch {
		case taken > 1:
			t.Errorf("round %d: %d answers taken, want at most one: %v", round, taken, errs[:3])
		case taken == 1 && len(resp.Kvs) == 0:
			t.Errorf("round %d: an answer was taken but no mark is stored", round)
		case taken == 0 && len(resp.Kvs) != 0:
			t.Errorf("round %d: every answer was refused but a mark is stored", round)
		}
		if len(resp.Kvs) == 0 {
			continue
		}
		// The agent's status as the mark was set: error.
		at := resp.Kvs[0].ModRevision
		sr, err := raw.Get(ctx, ns+state.StatusKey(state.StatusUnitAgent, "kv/0"), clientv3.WithRev(at))
		must(t, "Get status", err)
		var agent pb.Status
		if len(sr.Kvs) == 1 {
			must(t, "Unmarshal", proto.Unmarshal(sr.Kvs[0].Value, &agent))
		}
		if agent.Status != "error" {
			t.Errorf("round %d: the mark was set at revision %d, when the agent's status was %q, want error", round, at, agent.Status)
		}
	}
}

// TestUnitsInError lists the units whose agent is in error, sorted.
func TestUnitsInError(t *testing.T) {
	st, ctx := newState(t)
	addService(t, ctx, st, "kv", kvEndpoints)
	addUnits(t, ctx, st, "kv", 12, state.Placement{})
	if got, err := st.UnitsInError(ctx); err != nil || len(got) != 0 {
		t.Errorf("UnitsInError of a new model = %v, %v; want none", got, err)
	}
	for unit, status := range map[string]string{"kv/0": "idle", "kv/1": "error", "kv/2": "executing", "kv/10": "error", "kv/3": "error"} {
		setAgent(t, ctx, st, unit, status)
	}
	must(t, "SetStatus(workload)", st.SetStatus(ctx, state.StatusUnit, "kv/4", &pb.Status{Status: "error"}))
	want := []string{"kv/1", "kv/10", "kv/3"}
	if got, err := st.UnitsInError(ctx); err != nil || !slices.Equal(got, want) {
		t.Errorf("UnitsInError = %v, %v; want %v", got, err, want)
	}
}
