package state_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/lifelinehq/lifeline/internal/testing/etcdtest"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

func TestMain(m *testing.M) { etcdtest.Main(m) }

// newState returns a State in a namespace of its own, and a context.
func newState(t testing.TB) (*state.State, context.Context) {
	t.Helper()
	st, err := state.New(etcdtest.Client(t), state.Config{Namespace: etcdtest.Namespace(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := etcdtest.Context(t)
	t.Cleanup(func() { checkInvariants(t, st) })
	return st, ctx
}

// checkInvariants fails the test if the model breaks an invariant.
func checkInvariants(t testing.TB, st *state.State) {
	t.Helper()
	snap, err := st.Snapshot(context.Background())
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	if err := state.CheckInvariants(snap); err != nil {
		t.Fatalf("invariants broken at revision %d:\n%v", snap.Revision, err)
	}
}

// Charms used by the tests, as the endpoints they declare.
var (
	kvEndpoints = []*pb.Endpoint{
		{Name: "server", Interface: "kv", Role: pb.Role_ROLE_PROVIDER, Scope: pb.Scope_SCOPE_GLOBAL},
		{Name: "cluster", Interface: "kv-peers", Role: pb.Role_ROLE_PEER, Scope: pb.Scope_SCOPE_GLOBAL},
	}
	appEndpoints = []*pb.Endpoint{
		{Name: "db", Interface: "kv", Role: pb.Role_ROLE_REQUIRER, Scope: pb.Scope_SCOPE_GLOBAL},
		{Name: "website", Interface: "http", Role: pb.Role_ROLE_PROVIDER, Scope: pb.Scope_SCOPE_GLOBAL},
		{Name: "juju-info", Interface: "juju-info", Role: pb.Role_ROLE_PROVIDER, Scope: pb.Scope_SCOPE_GLOBAL},
	}
	loggerEndpoints = []*pb.Endpoint{
		{Name: "host", Interface: "juju-info", Role: pb.Role_ROLE_REQUIRER, Scope: pb.Scope_SCOPE_CONTAINER},
	}
	plainEndpoints = []*pb.Endpoint{
		{Name: "db", Interface: "kv", Role: pb.Role_ROLE_REQUIRER, Scope: pb.Scope_SCOPE_GLOBAL},
	}
)

func addService(t testing.TB, ctx context.Context, st *state.State, name string, eps []*pb.Endpoint) *pb.Service {
	t.Helper()
	sub := false
	for _, ep := range eps {
		sub = sub || ep.Scope == pb.Scope_SCOPE_CONTAINER
	}
	svc, err := st.AddService(ctx, state.AddServiceArgs{
		Name: name, Charm: &pb.CharmRef{Name: name, Revision: 1}, Endpoints: eps, Subordinate: sub,
	})
	if err != nil {
		t.Fatalf("AddService(%s): %v", name, err)
	}
	return svc
}

func addUnits(t testing.TB, ctx context.Context, st *state.State, svc string, n int, p state.Placement) []*pb.Unit {
	t.Helper()
	us, err := st.AddUnits(ctx, svc, n, p)
	if err != nil {
		t.Fatalf("AddUnits(%s, %d): %v", svc, n, err)
	}
	return us
}

func relate(t testing.TB, ctx context.Context, st *state.State, a, b string) *pb.Relation {
	t.Helper()
	ea, err := state.ParseEndpointSpec(a)
	if err != nil {
		t.Fatal(err)
	}
	eb, err := state.ParseEndpointSpec(b)
	if err != nil {
		t.Fatal(err)
	}
	rel, err := st.AddRelation(ctx, ea, eb)
	if err != nil {
		t.Fatalf("AddRelation(%s, %s): %v", a, b, err)
	}
	return rel
}

func must(t testing.TB, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// wantErr checks that err is of kind want, from rule (when not ""), with a
// message containing msg.
func wantErr(t testing.TB, what string, err, want error, rule, msg string) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s = %v, want %v", what, err, want)
	}
	if rule != "" && state.RuleOf(err) != rule {
		t.Errorf("%s: rule %q, want %q (%v)", what, state.RuleOf(err), rule, err)
	}
	if !strings.Contains(err.Error(), msg) {
		t.Errorf("%s = %q, want it to say %q", what, err, msg)
	}
}

func life(t testing.TB, ctx context.Context, st *state.State, kind, id string) string {
	t.Helper()
	var l pb.Life
	var err error
	switch kind {
	case "machine":
		var m *pb.Machine
		m, err = st.Machine(ctx, id)
		l = m.GetLife()
	case "unit":
		var u *pb.Unit
		u, err = st.Unit(ctx, id)
		l = u.GetLife()
	case "service":
		var s *pb.Service
		s, err = st.Service(ctx, id)
		l = s.GetLife()
	}
	if errors.Is(err, state.ErrNotFound) {
		return "removed"
	}
	if err != nil {
		t.Fatalf("%s %s: %v", kind, id, err)
	}
	return state.LifeName(l)
}
