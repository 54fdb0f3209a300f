package controller_test

import (
	"encoding/json"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// showDoc is a ShowUnit or ShowMachine answer as compact JSON, with the
// times zeroed, for comparing with an expected document.
func showDoc(t *testing.T, msg proto.Message) string {
	t.Helper()
	msg = proto.Clone(msg)
	zero := func(d *pb.StatusDetail) {
		if d != nil {
			d.SinceUnixNano = 0
		}
	}
	switch m := msg.(type) {
	case *pb.UnitDetail:
		zero(m.Agent)
		zero(m.Workload)
		for _, h := range m.History {
			zero(h)
		}
	case *pb.MachineDetail:
		zero(m.Agent)
	}
	data, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(v) // protojson's spacing is not stable; encoding/json's is
	return string(out)
}

func TestShowUnit(t *testing.T) {
	m := newAgentModel(t)
	op := m.admin()
	must(t, "SetStatus", m.st.SetStatus(m.ctx, state.StatusUnit, "app/0", &pb.Status{Status: "active", Message: "serving"}))
	must(t, "SetStatus", m.st.SetStatus(m.ctx, state.StatusUnitAgent, "app/0", &pb.Status{Status: "idle", Data: map[string]string{"state": "running"}}))
	resp, err := op.ShowUnit(m.ctx, &pb.ShowUnitRequest{Unit: "app/0"})
	must(t, "ShowUnit(app/0)", err)
	if d := resp.Unit; d.Agent.SinceUnixNano == 0 || d.Workload.SinceUnixNano == 0 {
		t.Errorf("ShowUnit(app/0) agent %v, workload %v: want both with since", d.Agent, d.Workload)
	}
	want := `{"agent":{"status":"idle"},"charm":"app","charm_revision":"1",` +
		`"history":[{"kind":"workload","message":"serving","status":"active"},{"data":{"state":"running"},"kind":"agent","status":"idle"}],` +
		`"life":"alive","machine":"2","name":"app/0",` +
		`"relations":[` +
		`{"endpoint":{"endpoint":"db","interface":"kv","role":"requirer","service":"app"},"id":"1","in_scope":true,"key":"app:db kv:server","life":"alive",` +
		`"related_endpoints":[{"endpoint":"server","interface":"kv","role":"provider","service":"kv"}],` +
		`"related_units":[{"settings":{"host":"kv0"},"unit":"kv/0"}],"scope":"global","settings":{"want":"db"}},` +
		`{"endpoint":{"endpoint":"juju-info","interface":"juju-info","role":"provider","service":"app"},"id":"2","in_scope":true,"key":"app:juju-info logger:host","life":"alive",` +
		`"related_endpoints":[{"endpoint":"host","interface":"juju-info","role":"requirer","service":"logger"}],` +
		`"related_units":[{"settings":{"unit":"logger/0"},"unit":"logger/0"}],"scope":"container","settings":{"unit":"app/0"}}],` +
		`"revision":"1","service":"app","state":"running","subordinates":["logger/0"],"workload":{"message":"serving","status":"active"}}`
	if got := showDoc(t, resp.Unit); got != want {
		t.Errorf("ShowUnit(app/0) =\n%s\nwant\n%s", got, want)
	}

	// kv/1, not in its peer relation's scope, sees kv/0 in it.
	resp, err = op.ShowUnit(m.ctx, &pb.ShowUnitRequest{Unit: "kv/1", History: 1})
	must(t, "ShowUnit(kv/1)", err)
	var peer *pb.UnitRelation
	for _, r := range resp.Unit.Relations {
		if r.Key == "kv:cluster" {
			peer = r
		}
	}
	if peer == nil || peer.InScope || len(peer.RelatedEndpoints) != 0 || peer.Endpoint.GetRole() != "peer" {
		t.Errorf("kv/1's peer relation = %v, want it, not in scope, with no other endpoint", peer)
	}

	for _, tt := range []struct {
		req  *pb.ShowUnitRequest
		code codes.Code
		msg  string
	}{
		{&pb.ShowUnitRequest{Unit: "kv/9"}, codes.NotFound, "unit kv/9 not found"},
		{&pb.ShowUnitRequest{Unit: "kv"}, codes.InvalidArgument, "invalid unit name"},
		{&pb.ShowUnitRequest{Unit: "kv/0", History: 101}, codes.InvalidArgument, "history 101"},
		{&pb.ShowUnitRequest{Unit: "kv/0", History: -1}, codes.InvalidArgument, "history -1"},
	} {
		_, err := op.ShowUnit(m.ctx, tt.req)
		wantCode(t, "ShowUnit", err, tt.code, tt.msg)
	}
}

func TestShowMachine(t *testing.T) {
	m := newAgentModel(t)
	op := m.admin()
	must(t, "SetStatus", m.st.SetStatus(m.ctx, state.StatusUnit, "logger/1", &pb.Status{Status: "blocked", Message: "no host"}))
	resp, err := op.ShowMachine(m.ctx, &pb.ShowMachineRequest{Machine: "3"})
	must(t, "ShowMachine(3)", err)
	want := `{"agent":{"status":"pending"},"id":"3","life":"alive",` +
		`"units":[{"agent":"allocating","life":"alive","name":"app/1","revision":"1","workload":"unknown"},` +
		`{"agent":"allocating","life":"alive","message":"no host","name":"logger/1","principal":"app/1","revision":"1","workload":"blocked"}]}`
	if got := showDoc(t, resp.Machine); got != want {
		t.Errorf("ShowMachine(3) =\n%s\nwant\n%s", got, want)
	}
	for _, tt := range []struct {
		id   string
		code codes.Code
		msg  string
	}{
		{"9", codes.NotFound, "machine 9 not found"},
		{"x", codes.InvalidArgument, "invalid machine id"},
	} {
		_, err := op.ShowMachine(m.ctx, &pb.ShowMachineRequest{Machine: tt.id})
		wantCode(t, "ShowMachine", err, tt.code, tt.msg)
	}
}
