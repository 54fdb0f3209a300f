package controller_test

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lifelinehq/lifeline/internal/charm"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// upload packs a charm directory and uploads it.
func upload(t *testing.T, ctx context.Context, op pb.OperatorServiceClient, dir string) *pb.Charm {
	t.Helper()
	var buf bytes.Buffer
	info, err := charm.Pack(dir, &buf)
	if err != nil {
		t.Fatal(err)
	}
	c, err := uploadBytes(ctx, op, buf.Bytes(), info.SHA256)
	if err != nil {
		t.Fatalf("UploadCharm(%s): %v", dir, err)
	}
	return c
}

func uploadBytes(ctx context.Context, op pb.OperatorServiceClient, data []byte, sha string) (*pb.Charm, error) {
	stream, err := op.UploadCharm(ctx)
	if err != nil {
		return nil, err
	}
	if err := stream.Send(&pb.UploadCharmRequest{Part: &pb.UploadCharmRequest_Header{Header: &pb.UploadCharmHeader{Size: int64(len(data)), Sha256: sha}}}); err != nil {
		return nil, err
	}
	for off := 0; off < len(data); off += 1 << 20 {
		end := min(off+1<<20, len(data))
		if err := stream.Send(&pb.UploadCharmRequest{Part: &pb.UploadCharmRequest_Chunk{Chunk: data[off:end]}}); err != nil {
			if err == io.EOF {
				break
			}
			return nil, err
		}
	}
	resp, err := stream.CloseAndRecv()
	if err != nil {
		return nil, err
	}
	return resp.Charm, nil
}

func TestOperatorDeployRelateDestroy(t *testing.T) {
	e := newEnv(t)
	op := e.admin()
	ctx := e.ctx
	kv := upload(t, ctx, op, "testdata/kv")
	if kv.Revision != 1 || kv.Name != "kv" {
		t.Fatalf("UploadCharm = %v, want kv revision 1", kv)
	}
	if again := upload(t, ctx, op, "testdata/kv"); again.Revision != 1 {
		t.Errorf("uploading the same charm again gave revision %d, want 1", again.Revision)
	}
	upload(t, ctx, op, "testdata/app")
	upload(t, ctx, op, "testdata/logger")

	resp, err := op.Deploy(ctx, &pb.DeployRequest{Charm: "kv", NumUnits: 2, Config: map[string]string{"port": "9000"}})
	must(t, "Deploy kv", err)
	if len(resp.Units) != 2 || resp.Service.Name != "kv" {
		t.Fatalf("Deploy = %v, want service kv with 2 units", resp)
	}
	_, err = op.Deploy(ctx, &pb.DeployRequest{Charm: "app", NumUnits: 1})
	must(t, "Deploy app", err)
	_, err = op.Deploy(ctx, &pb.DeployRequest{Charm: "logger"})
	must(t, "Deploy logger", err)

	cfg, err := op.GetConfig(ctx, &pb.GetConfigRequest{Service: "kv"})
	must(t, "GetConfig", err)
	if got := charm.FormatValue(cfg.Values["port"]); got != "9000" {
		t.Errorf("GetConfig port = %s, want 9000", got)
	}
	if got := charm.FormatValue(cfg.Values["debug"]); got != "false" {
		t.Errorf("GetConfig debug = %s, want the default false", got)
	}
	_, err = op.SetConfig(ctx, &pb.SetConfigRequest{Service: "kv", Set: map[string]string{"debug": "true"}, Unset: []string{"port"}})
	must(t, "SetConfig", err)
	cfg, err = op.GetConfig(ctx, &pb.GetConfigRequest{Service: "kv"})
	must(t, "GetConfig", err)
	if p, d := charm.FormatValue(cfg.Values["port"]), charm.FormatValue(cfg.Values["debug"]); p != "8080" || d != "true" {
		t.Errorf("after SetConfig port=%s debug=%s, want 8080 and true", p, d)
	}

	_, err = op.AddRelation(ctx, &pb.AddRelationRequest{Endpoints: []string{"app", "kv"}})
	must(t, "AddRelation", err)
	_, err = op.AddRelation(ctx, &pb.AddRelationRequest{Endpoints: []string{"app", "logger"}})
	must(t, "AddRelation", err)
	units, err := op.AddUnits(ctx, &pb.AddUnitsRequest{Service: "app", NumUnits: 1, To: resp.Units[0].MachineId})
	must(t, "AddUnits", err)
	if units.Units[0].MachineId != resp.Units[0].MachineId {
		t.Errorf("AddUnits --to %s placed on %s", resp.Units[0].MachineId, units.Units[0].MachineId)
	}

	st, err := op.Status(ctx, &pb.StatusRequest{})
	must(t, "Status", err)
	if n := len(st.Status.Machines); n != 3 {
		t.Errorf("Status has %d machines, want 3", n)
	}
	if n := len(st.Status.Relations); n != 3 { // app-kv, app-logger, kv's peers
		t.Errorf("Status has %d relations, want 3", n)
	}

	// destroy-machine with a unit assigned is refused, naming it.
	_, err = op.DestroyMachine(ctx, &pb.DestroyMachineRequest{Machine: resp.Units[0].MachineId})
	wantCode(t, "DestroyMachine", err, codes.FailedPrecondition, "machine 0 has units app/1 and kv/0 assigned")
	_, err = op.DestroyRelation(ctx, &pb.DestroyRelationRequest{Endpoints: []string{"kv", "app"}})
	must(t, "DestroyRelation", err)
	_, err = op.DestroyUnit(ctx, &pb.DestroyUnitRequest{Unit: "kv/1"})
	must(t, "DestroyUnit", err)
	_, err = op.DestroyService(ctx, &pb.DestroyServiceRequest{Service: "app"})
	must(t, "DestroyService", err)
	st, err = op.Status(ctx, &pb.StatusRequest{})
	must(t, "Status", err)
	for _, svc := range st.Status.Services {
		if svc.Name == "app" && (svc.Life != "dying" || len(svc.WaitingFor) == 0) {
			t.Errorf("app status = %v, want dying and waiting for something", svc)
		}
	}
}

func TestOperatorRefusesBadInputAndChangesNothing(t *testing.T) {
	e := newEnv(t)
	op := e.admin()
	ctx := e.ctx
	upload(t, ctx, op, "testdata/kv")
	upload(t, ctx, op, "testdata/logger")
	_, err := op.Deploy(ctx, &pb.DeployRequest{Charm: "kv", NumUnits: 1})
	must(t, "Deploy", err)
	_, err = op.Deploy(ctx, &pb.DeployRequest{Charm: "logger"})
	must(t, "Deploy", err)
	max0 := int64(0)
	tests := []struct {
		name string
		call func() error
		code codes.Code
		msg  string
	}{
		{"deploy an unknown charm", func() error {
			_, err := op.Deploy(ctx, &pb.DeployRequest{Charm: "nope"})
			return err
		}, codes.NotFound, "charm nope not found"},
		{"deploy with a bad service name", func() error {
			_, err := op.Deploy(ctx, &pb.DeployRequest{Charm: "kv", Service: "Bad_Name"})
			return err
		}, codes.InvalidArgument, `invalid service name "Bad_Name"`},
		{"deploy with a wrongly typed config", func() error {
			_, err := op.Deploy(ctx, &pb.DeployRequest{Charm: "kv", Service: "kv2", Config: map[string]string{"port": "abc"}})
			return err
		}, codes.InvalidArgument, `config option "port" wants an int, got "abc"`},
		{"deploy with an unknown config option", func() error {
			_, err := op.Deploy(ctx, &pb.DeployRequest{Charm: "kv", Service: "kv2", Config: map[string]string{"colour": "red"}})
			return err
		}, codes.InvalidArgument, `unknown config option "colour"`},
		{"deploy a service that exists", func() error {
			_, err := op.Deploy(ctx, &pb.DeployRequest{Charm: "kv"})
			return err
		}, codes.AlreadyExists, "service kv already exists"},
		{"deploy units of a subordinate", func() error {
			_, err := op.Deploy(ctx, &pb.DeployRequest{Charm: "logger", NumUnits: 1})
			return err
		}, codes.InvalidArgument, "charm logger is a subordinate"},
		{"deploy to a missing machine", func() error {
			_, err := op.Deploy(ctx, &pb.DeployRequest{Charm: "kv", Service: "kv3", NumUnits: 1, To: "42"})
			return err
		}, codes.NotFound, "machine 42 not found"},
		{"add units to an unknown service", func() error {
			_, err := op.AddUnits(ctx, &pb.AddUnitsRequest{Service: "nope", NumUnits: 1})
			return err
		}, codes.NotFound, "service nope not found"},
		{"add zero units", func() error {
			_, err := op.AddUnits(ctx, &pb.AddUnitsRequest{Service: "kv"})
			return err
		}, codes.InvalidArgument, "cannot add 0 units"},
		{"add over a thousand units", func() error {
			_, err := op.AddUnits(ctx, &pb.AddUnitsRequest{Service: "kv", NumUnits: 1 << 30})
			return err
		}, codes.InvalidArgument, "cannot add 1073741824 units at once: at most 1000"},
		{"deploy over a thousand units", func() error {
			_, err := op.Deploy(ctx, &pb.DeployRequest{Charm: "kv", Service: "kv4", NumUnits: 1001})
			return err
		}, codes.InvalidArgument, "cannot deploy 1001 units at once: at most 1000"},
		{"relate incompatible endpoints", func() error {
			_, err := op.AddRelation(ctx, &pb.AddRelationRequest{Endpoints: []string{"kv:server", "logger"}})
			return err
		}, codes.InvalidArgument, "no endpoints of kv:server and logger can be related"},
		{"relate one endpoint", func() error {
			_, err := op.AddRelation(ctx, &pb.AddRelationRequest{Endpoints: []string{"kv"}})
			return err
		}, codes.InvalidArgument, "a relation needs two endpoints"},
		{"destroy a missing relation", func() error {
			_, err := op.DestroyRelation(ctx, &pb.DestroyRelationRequest{Endpoints: []string{"kv", "logger"}})
			return err
		}, codes.NotFound, "no relation between kv and logger"},
		{"destroy a unit of a subordinate", func() error {
			_, err := op.DestroyUnit(ctx, &pb.DestroyUnitRequest{Unit: "logger/0"})
			return err
		}, codes.NotFound, "unit logger/0 not found"},
		{"destroy a malformed unit", func() error {
			_, err := op.DestroyUnit(ctx, &pb.DestroyUnitRequest{Unit: "kv"})
			return err
		}, codes.InvalidArgument, `invalid unit name "kv"`},
		{"destroy an unknown unit", func() error {
			_, err := op.DestroyUnit(ctx, &pb.DestroyUnitRequest{Unit: "kv/9"})
			return err
		}, codes.NotFound, "unit kv/9 not found"},
		{"max-wait without force", func() error {
			_, err := op.DestroyUnit(ctx, &pb.DestroyUnitRequest{Unit: "kv/0", MaxWaitMs: &max0})
			return err
		}, codes.InvalidArgument, "a maximum wait needs --force"},
		{"destroy a machine with a unit", func() error {
			_, err := op.DestroyMachine(ctx, &pb.DestroyMachineRequest{Machine: "0"})
			return err
		}, codes.FailedPrecondition, "machine 0 has unit kv/0 assigned"},
		{"destroy no machines", func() error {
			_, err := op.DestroyMachines(ctx, &pb.DestroyMachinesRequest{})
			return err
		}, codes.InvalidArgument, "DestroyMachines names no machine"},
		{"destroy too many machines at once", func() error {
			_, err := op.DestroyMachines(ctx, &pb.DestroyMachinesRequest{Machines: make([]string, 1001)})
			return err
		}, codes.InvalidArgument, "DestroyMachines names 1001 machines: at most 1000 a call"},
		{"destroy machines, one with a unit", func() error {
			resp, err := op.DestroyMachines(ctx, &pb.DestroyMachinesRequest{Machines: []string{"0", "9"}})
			if err != nil {
				return err
			}
			// Each answered alone; the call itself succeeds.
			if r := resp.Results[1]; codes.Code(r.Code) != codes.NotFound || r.Message != "machine 9 not found" {
				t.Errorf("machine 9's answer = %v, want NotFound", r)
			}
			return status.Error(codes.Code(resp.Results[0].Code), resp.Results[0].Message)
		}, codes.FailedPrecondition, "machine 0 has unit kv/0 assigned"},
		{"resolved of a unit not in error", func() error {
			_, err := op.Resolved(ctx, &pb.ResolvedRequest{Unit: "kv/0"})
			return err
		}, codes.FailedPrecondition, "unit kv/0 is not in an error state"},
		{"set config of a wrong type", func() error {
			_, err := op.SetConfig(ctx, &pb.SetConfigRequest{Service: "kv", Set: map[string]string{"debug": "maybe"}})
			return err
		}, codes.InvalidArgument, `config option "debug" wants a boolean`},
		{"upload garbage", func() error {
			_, err := uploadBytes(ctx, op, []byte("not a charm"), "")
			return err
		}, codes.InvalidArgument, ""},
		{"upload over the size limit", func() error {
			_, err := uploadBytes(ctx, op, make([]byte, charm.MaxSize+1), "")
			return err
		}, codes.InvalidArgument, "over the 32 MiB limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, err := e.st.Snapshot(ctx)
			must(t, "Snapshot", err)
			wantCode(t, tt.name, tt.call(), tt.code, tt.msg)
			after, err := e.st.Snapshot(ctx)
			must(t, "Snapshot", err)
			if !sameModel(before, after) {
				t.Errorf("%s changed the model", tt.name)
			}
		})
	}
}

// sameModel compares two snapshots' model keys and values.
// sameModel says whether a and b hold the same model, but for the audit
// log, where a refused call is recorded.
func sameModel(a, b *state.Snapshot) bool {
	audit := func(k string) bool { return strings.HasPrefix(k, state.AuditPrefix) || k == state.AuditSeqKey }
	n := 0
	for k, v := range a.Values {
		if audit(k) {
			continue
		}
		n++
		if !bytes.Equal(b.Values[k], v) {
			return false
		}
	}
	for k := range b.Values {
		if !audit(k) {
			n--
		}
	}
	return n == 0
}

func TestOperatorNeedsTheAdminCredential(t *testing.T) {
	e := newEnv(t)
	ms, err := e.st.AddMachines(e.ctx, 1)
	must(t, "AddMachines", err)
	asMachine := pb.NewOperatorServiceClient(e.conn("machine-" + ms[0].Id))
	_, err = asMachine.Status(e.ctx, &pb.StatusRequest{})
	wantCode(t, "Status as a machine agent", err, codes.PermissionDenied, "machine 0's agent may not call Status")

	forged := e.admin() // stores a credential for admin...
	_ = forged
	cred := pkiCredential(t, "admin") // ...and this is another, never stored
	_, err = pb.NewOperatorServiceClient(e.dial(cred)).Status(e.ctx, &pb.StatusRequest{})
	wantCode(t, "Status with a forged admin credential", err, codes.Unauthenticated, "not valid")
}

func TestWatchStatusSendsChanges(t *testing.T) {
	e := newEnv(t)
	op := e.admin()
	ctx, cancel := context.WithTimeout(e.ctx, 20*time.Second)
	defer cancel()
	stream, err := op.WatchStatus(ctx, &pb.WatchStatusRequest{IntervalMs: 100})
	must(t, "WatchStatus", err)
	first, err := stream.Recv()
	must(t, "Recv", err)
	if len(first.Status.Machines) != 0 {
		t.Fatalf("first status has %d machines, want 0", len(first.Status.Machines))
	}
	_, err = op.AddMachines(ctx, &pb.AddMachinesRequest{NumMachines: 2})
	must(t, "AddMachines", err)
	next, err := stream.Recv()
	must(t, "Recv", err)
	if len(next.Status.Machines) != 2 {
		t.Errorf("status after AddMachines has %d machines, want 2", len(next.Status.Machines))
	}
}

func must(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}
