package controller_test

import (
	"testing"

	"google.golang.org/grpc/codes"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// A placement on a machine whose units' static host claims conflict with
// the new unit's is refused, FailedPrecondition, unless forced; the
// charm's record carries the claims it was uploaded with.
func TestPlacementRefusedOnConflictingClaims(t *testing.T) {
	e := newEnv(t)
	op := e.admin()
	ctx := e.ctx
	web := upload(t, ctx, op, "testdata/web")
	if c := web.StaticClaims; len(c.GetPorts()) != 1 || c.Ports[0].From != 8080 || len(c.Files) != 1 || c.Files[0].Path != "/etc/web/motd" {
		t.Fatalf("UploadCharm(web) stored static claims %v, want port 8080/tcp and /etc/web/motd", c)
	}
	upload(t, ctx, op, "testdata/kv")
	resp, err := op.Deploy(ctx, &pb.DeployRequest{Charm: "web", NumUnits: 1})
	must(t, "Deploy web", err)
	m := resp.Units[0].MachineId

	_, err = op.Deploy(ctx, &pb.DeployRequest{Charm: "web", Service: "web2", NumUnits: 1, To: m})
	wantCode(t, "Deploy web2 --to "+m, err, codes.FailedPrecondition, "cannot place web2/0 on machine "+m+": port 8080/tcp is claimed by web/0 there")
	if _, err := op.GetConfig(ctx, &pb.GetConfigRequest{Service: "web2"}); err == nil {
		t.Errorf("after a refused deploy, service web2 exists")
	}
	_, err = op.AddUnits(ctx, &pb.AddUnitsRequest{Service: "web", NumUnits: 1, To: m})
	wantCode(t, "AddUnits web --to "+m, err, codes.FailedPrecondition, "port 8080/tcp is claimed by web/0 there")
	_, err = op.AddUnits(ctx, &pb.AddUnitsRequest{Service: "web", NumUnits: 1, Force: true})
	wantCode(t, "AddUnits web --force", err, codes.InvalidArgument, "force places units on a given machine")

	// What claims nothing static goes beside it; forced, so does web.
	if _, err := op.Deploy(ctx, &pb.DeployRequest{Charm: "kv", NumUnits: 1, To: m}); err != nil {
		t.Fatalf("Deploy kv --to %s = %v, want it placed", m, err)
	}
	units, err := op.AddUnits(ctx, &pb.AddUnitsRequest{Service: "web", NumUnits: 1, To: m, Force: true})
	if err != nil || units.Units[0].MachineId != m {
		t.Fatalf("AddUnits web --to %s --force = %v, %v, want a unit on machine %s", m, units, err, m)
	}
	if _, err := op.Deploy(ctx, &pb.DeployRequest{Charm: "web", Service: "web2", NumUnits: 1, To: m, Force: true}); err != nil {
		t.Fatalf("Deploy web2 --to %s --force = %v, want it placed", m, err)
	}
}
