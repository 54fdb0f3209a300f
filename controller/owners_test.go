package controller_test

import (
	"testing"

	"google.golang.org/grpc/codes"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// TestClaimOwnership claims a service, a machine and a relation for a
// manifest, sees the owner in status, and is refused a claim of what
// another manifest owns, of what does not exist, and of a bad kind, each
// changing nothing.
func TestClaimOwnership(t *testing.T) {
	e := newEnv(t)
	op := e.admin()
	ctx := e.ctx
	upload(t, ctx, op, "testdata/kv")
	_, err := op.Deploy(ctx, &pb.DeployRequest{Charm: "kv", NumUnits: 1})
	must(t, "Deploy", err)
	ms, err := op.AddMachines(ctx, &pb.AddMachinesRequest{NumMachines: 1})
	must(t, "AddMachines", err)
	mid := ms.Machines[0].Id
	_, err = op.ClaimOwnership(ctx, &pb.ClaimOwnershipRequest{Manifest: "shop", Entities: []*pb.OwnedEntity{
		{Kind: "service", Id: "kv", Resource: "kv"}, {Kind: "machine", Id: mid, Resource: "hosts"}}})
	must(t, "ClaimOwnership", err)
	st, err := op.Status(ctx, &pb.StatusRequest{})
	must(t, "Status", err)
	for _, s := range st.Status.Services {
		if s.Name == "kv" && (s.Owner.GetManifest() != "shop" || s.Owner.GetResource() != "kv" || s.Owner.GetUser() == "") {
			t.Errorf("service kv's owner = %v, want shop's resource kv with its user", s.Owner)
		}
	}
	for _, m := range st.Status.Machines {
		if want := map[bool]string{true: "shop", false: ""}[m.Id == mid]; m.Owner.GetManifest() != want {
			t.Errorf("machine %s's owner = %v, want %q", m.Id, m.Owner, want)
		}
	}
	_, err = op.ClaimOwnership(ctx, &pb.ClaimOwnershipRequest{Manifest: "other", Entities: []*pb.OwnedEntity{{Kind: "service", Id: "kv", Resource: "kv"}}})
	wantCode(t, "claim of another manifest's service", err, codes.FailedPrecondition, "owned by manifest shop")
	_, err = op.ClaimOwnership(ctx, &pb.ClaimOwnershipRequest{Manifest: "shop", Entities: []*pb.OwnedEntity{{Kind: "relation", Id: "99", Resource: "r"}}})
	wantCode(t, "claim of a missing relation", err, codes.NotFound, "relation 99 not found")
	_, err = op.ClaimOwnership(ctx, &pb.ClaimOwnershipRequest{Manifest: "shop", Entities: []*pb.OwnedEntity{{Kind: "unit", Id: "kv/0", Resource: "kv"}}})
	wantCode(t, "claim of a unit", err, codes.InvalidArgument, "invalid kind")
	after, err := op.Status(ctx, &pb.StatusRequest{})
	must(t, "Status", err)
	for _, s := range after.Status.Services {
		if s.Name == "kv" && s.Owner.GetManifest() != "shop" {
			t.Errorf("after refused claims, kv's owner = %v, want shop", s.Owner)
		}
	}
}
