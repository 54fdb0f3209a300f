package controller_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/lifelinehq/lifeline/internal/testing/controllertest"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// agentModel is the agents' tests' model, built with state directly:
//
//	machine 0: kv/0                    kv: provides server, peer cluster
//	machine 1: kv/1                    app: requires db, provides juju-info
//	machine 2: app/0 + logger/0        logger: subordinate, requires host
//	machine 3: app/1 + logger/1           (juju-info, container scope)
//
// Relations: kv's peer relation (kvPeer), app:db kv:server (global, with
// kv/0 and app/0 in its scope) and app:juju-info logger:host (container,
// with app/0, logger/0, app/1 and logger/1 in its scope). Charms kv, app
// and logger are stored, revision 1 each.
type agentModel struct {
	*env
	t         *testing.T
	kvPeer    int64
	global    int64
	container int64
	charms    map[string][]byte
	clients   map[string]pb.AgentServiceClient
}

var agentModelEndpoints = map[string][]*pb.Endpoint{
	"kv": {
		{Name: "server", Interface: "kv", Role: pb.Role_ROLE_PROVIDER, Scope: pb.Scope_SCOPE_GLOBAL},
		{Name: "cluster", Interface: "kv-peers", Role: pb.Role_ROLE_PEER, Scope: pb.Scope_SCOPE_GLOBAL},
	},
	"app": {
		{Name: "db", Interface: "kv", Role: pb.Role_ROLE_REQUIRER, Scope: pb.Scope_SCOPE_GLOBAL},
		{Name: "juju-info", Interface: "juju-info", Role: pb.Role_ROLE_PROVIDER, Scope: pb.Scope_SCOPE_GLOBAL},
	},
	"logger": {
		{Name: "host", Interface: "juju-info", Role: pb.Role_ROLE_REQUIRER, Scope: pb.Scope_SCOPE_CONTAINER},
	},
}

func newAgentModel(t *testing.T) *agentModel {
	t.Helper()
	return newAgentModelWith(t, controllertest.Options{Anonymous: true})
}

// newAgentModelWith is newAgentModel served by a controller with opts.
func newAgentModelWith(t *testing.T, opts controllertest.Options) *agentModel {
	t.Helper()
	m := &agentModel{env: newEnvWith(t, opts), t: t, charms: map[string][]byte{}, clients: map[string]pb.AgentServiceClient{}}
	for _, name := range []string{"kv", "app", "logger"} {
		m.addService(name, name, []byte(name+" charm archive"))
	}
	m.addUnits("kv", 2, state.Placement{})
	m.addUnits("app", 2, state.Placement{})
	peer, err := m.st.RelationByKey(m.ctx, "kv:cluster")
	m.ok("RelationByKey(kv:cluster)", err)
	m.kvPeer = peer.Id
	m.global = m.relate("app:db", "kv:server").Id
	m.container = m.relate("app:juju-info", "logger:host").Id
	for _, p := range []string{"app/0", "app/1"} {
		_, err := m.st.AddSubordinate(m.ctx, p, "logger")
		m.ok("AddSubordinate("+p+", logger)", err)
	}
	m.enter(m.global, "kv/0", map[string]string{"host": "kv0"})
	m.enter(m.global, "app/0", map[string]string{"want": "db"})
	for _, u := range []string{"app/0", "logger/0", "app/1", "logger/1"} {
		m.enter(m.container, u, map[string]string{"unit": u})
	}
	for u, want := range map[string]string{"kv/0": "0", "kv/1": "1", "app/0": "2", "app/1": "3", "logger/0": "2", "logger/1": "3"} {
		if got := m.unit(u).GetMachineId(); got != want {
			t.Fatalf("unit %s is on machine %q, want %q", u, got, want)
		}
	}
	return m
}

func (m *agentModel) ok(what string, err error) {
	m.t.Helper()
	if err != nil {
		m.t.Fatalf("%s: %v", what, err)
	}
}

// addService stores a charm and deploys it as the named service.
func (m *agentModel) addService(name, charmName string, archive []byte) *pb.Service {
	m.t.Helper()
	eps := agentModelEndpoints[charmName]
	ch, err := m.st.AddCharm(m.ctx, &pb.Charm{Name: charmName, Endpoints: eps}, archive)
	m.ok("AddCharm("+charmName+")", err)
	m.charms[charmName] = archive
	sub := charmName == "logger"
	svc, err := m.st.AddService(m.ctx, state.AddServiceArgs{
		Name: name, Charm: &pb.CharmRef{Name: ch.Name, Revision: ch.Revision, Sha256: ch.Sha256},
		Subordinate: sub, Endpoints: eps,
		Config: map[string]*pb.ConfigValue{"name": {Value: &pb.ConfigValue_StringValue{StringValue: name}}},
	})
	m.ok("AddService("+name+")", err)
	return svc
}

func (m *agentModel) addUnits(service string, n int, p state.Placement) []*pb.Unit {
	m.t.Helper()
	us, err := m.st.AddUnits(m.ctx, service, n, p)
	m.ok("AddUnits("+service+")", err)
	return us
}

func (m *agentModel) relate(a, b string) *pb.Relation {
	m.t.Helper()
	ea, err := state.ParseEndpointSpec(a)
	m.ok("ParseEndpointSpec", err)
	eb, err := state.ParseEndpointSpec(b)
	m.ok("ParseEndpointSpec", err)
	rel, err := m.st.AddRelation(m.ctx, ea, eb)
	m.ok("AddRelation("+a+", "+b+")", err)
	return rel
}

func (m *agentModel) enter(rel int64, unit string, settings map[string]string) {
	m.t.Helper()
	m.ok("EnterScope("+unit+")", m.st.EnterScope(m.ctx, rel, unit, settings))
}

// kill takes a unit out of its scopes and sets it dead, as its agent would.
func (m *agentModel) kill(unit string) {
	m.t.Helper()
	scopes, err := m.st.UnitScopes(m.ctx, unit)
	m.ok("UnitScopes("+unit+")", err)
	for _, rel := range scopes {
		m.ok("LeaveScope("+unit+")", m.st.LeaveScope(m.ctx, rel, unit))
	}
	m.ok("DestroyUnit("+unit+")", m.st.DestroyUnit(m.ctx, unit, state.DestroyOptions{}))
	m.ok("EnsureUnitDead("+unit+")", m.st.EnsureUnitDead(m.ctx, unit))
}

// unit returns the named unit, nil when it does not exist.
func (m *agentModel) unit(name string) *pb.Unit {
	m.t.Helper()
	u, err := m.st.Unit(m.ctx, name)
	if errors.Is(err, state.ErrNotFound) {
		return nil
	}
	m.ok("Unit("+name+")", err)
	return u
}

func (m *agentModel) life(unit string) string {
	m.t.Helper()
	u := m.unit(unit)
	if u == nil {
		return "removed"
	}
	return state.LifeName(u.Life)
}

// settings returns a unit's settings in a relation, nil when it has none.
func (m *agentModel) settings(rel int64, unit string) map[string]string {
	m.t.Helper()
	s, _, err := m.st.Settings(m.ctx, rel, unit)
	if errors.Is(err, state.ErrNotFound) {
		return nil
	}
	m.ok("Settings", err)
	return s
}

// as returns a client authenticated as tag, one per tag: each new
// credential for a tag revokes the one before.
func (m *agentModel) as(tag string) pb.AgentServiceClient {
	m.t.Helper()
	if c, ok := m.clients[tag]; ok {
		return c
	}
	c := m.agent(tag)
	m.clients[tag] = c
	return c
}

func (m *agentModel) snapshot() *state.Snapshot {
	m.t.Helper()
	snap, err := m.st.Snapshot(m.ctx)
	m.ok("Snapshot", err)
	return snap
}

// unchanged fails the test when the model differs from before.
func (m *agentModel) unchanged(what string, before *state.Snapshot) {
	m.t.Helper()
	after := m.snapshot()
	for k, v := range before.Values {
		if w, ok := after.Values[k]; !ok {
			m.t.Errorf("%s removed %s", what, k)
		} else if !bytes.Equal(v, w) {
			m.t.Errorf("%s changed %s", what, k)
		}
	}
	for k := range after.Values {
		if _, ok := before.Values[k]; !ok {
			m.t.Errorf("%s added %s", what, k)
		}
	}
}

// downloadCharm reads a whole DownloadCharm stream.
func downloadCharm(ctx context.Context, c pb.AgentServiceClient, name string, rev int64) ([]byte, int, error) {
	stream, err := c.DownloadCharm(ctx, &pb.DownloadCharmRequest{Name: name, Revision: rev})
	if err != nil {
		return nil, 0, err
	}
	var out []byte
	chunks := 0
	for {
		resp, err := stream.Recv()
		if err == io.EOF {
			return out, chunks, nil
		}
		if err != nil {
			return nil, chunks, err
		}
		out = append(out, resp.Chunk...)
		chunks++
	}
}

// firstWatchResponse opens a watch and returns its first response.
func firstWatchResponse(ctx context.Context, c pb.AgentServiceClient, req *pb.WatchRequest) (*pb.WatchResponse, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.Watch(ctx, req)
	if err != nil {
		return nil, err
	}
	return stream.Recv()
}

// agentCall makes a call as c, failing t when a successful call returns
// the wrong thing.
type agentCall func(t *testing.T, m *agentModel, c pb.AgentServiceClient) error

// agentCase is one call by one agent and what it should get.
type agentCase struct {
	name string
	// as is the caller's tag.
	as string
	// setup changes the model before the call.
	setup func(m *agentModel)
	call  agentCall
	code  codes.Code
	msg   string
	// check looks at the model after a successful call.
	check func(t *testing.T, m *agentModel)
}

// runAgentCases runs each case against a model of its own. A failed call
// must leave the model as it was.
func runAgentCases(t *testing.T, cases []agentCase) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := newAgentModel(t)
			if tt.setup != nil {
				tt.setup(m)
			}
			c := m.as(tt.as)
			before := m.snapshot()
			err := tt.call(t, m, c)
			wantCode(t, tt.name, err, tt.code, tt.msg)
			if tt.code != codes.OK {
				m.unchanged(tt.name, before)
				return
			}
			if tt.check != nil {
				tt.check(t, m)
			}
		})
	}
}

// result is a batched call's answer to one of its items, as a test wants
// it: its code, and what its message says (nothing at all when msg is "").
type result struct {
	code codes.Code
	msg  string
}

// wantResults checks a batched call's answers, one an item, in order.
func wantResults(t *testing.T, got []*pb.StatusReportResult, want []result) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d results, want %d", len(got), len(want))
	}
	for i, r := range got {
		msg := r.GetMessage()
		if codes.Code(r.GetCode()) != want[i].code || !strings.Contains(msg, want[i].msg) || want[i].msg == "" && msg != "" {
			t.Errorf("result %d: %v %q, want %v %q", i, codes.Code(r.GetCode()), msg, want[i].code, want[i].msg)
		}
	}
}
