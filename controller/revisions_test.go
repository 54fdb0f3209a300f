package controller_test

import (
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/lifelinehq/lifeline/internal/charm"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// TestRevisionsHistoryAndRollback: every configuration change is a
// revision, listed newest first with its changes and who made it;
// rolling back makes a new revision with the old spec (charm and
// configuration together), and is refused when it would change nothing
// or names a revision not kept.
func TestRevisionsHistoryAndRollback(t *testing.T) {
	e := newEnv(t)
	op := e.admin()
	ctx := e.ctx
	upload(t, ctx, op, "testdata/kv")
	_, err := op.Deploy(ctx, &pb.DeployRequest{Charm: "kv", NumUnits: 2, Config: map[string]string{"port": "9000"}})
	must(t, "Deploy", err)
	_, err = op.SetConfig(ctx, &pb.SetConfigRequest{Service: "kv", Set: map[string]string{"port": "9001"}})
	must(t, "SetConfig", err)
	_, err = op.SetConfig(ctx, &pb.SetConfigRequest{Service: "kv", Set: map[string]string{"debug": "true"}})
	must(t, "SetConfig", err)

	list, err := op.ListRevisions(ctx, &pb.ListRevisionsRequest{Service: "kv"})
	must(t, "ListRevisions", err)
	if list.Head != 3 || len(list.Revisions) != 3 {
		t.Fatalf("ListRevisions = head %d, %d revisions, want 3 and 3", list.Head, len(list.Revisions))
	}
	r3, r2, r1 := list.Revisions[0], list.Revisions[1], list.Revisions[2]
	if r3.Number != 3 || r2.Number != 2 || r1.Number != 1 {
		t.Fatalf("ListRevisions numbers %d %d %d, want 3 2 1", r3.Number, r2.Number, r1.Number)
	}
	if r1.Reason != "deploy" || r2.Reason != "config" || r2.By != "admin" || r2.Charm.GetName() != "kv" {
		t.Errorf("revisions 1 and 2 = %v, %v; want deploy, then config by admin of charm kv", r1, r2)
	}
	if len(r2.Changes) != 1 || r2.Changes[0].Key != "port" || r2.Changes[0].OldValue != "9000" || r2.Changes[0].NewValue != "9001" {
		t.Errorf("revision 2's changes = %v, want port 9000 to 9001", r2.Changes)
	}
	if r1.Units != 2 || r3.Units != 0 {
		t.Errorf("units on revisions 1 and 3 = %d and %d, want 2 and 0 (no unit moves yet)", r1.Units, r3.Units)
	}

	show, err := op.ShowRevision(ctx, &pb.ShowRevisionRequest{Service: "kv", Number: 2})
	must(t, "ShowRevision", err)
	if got := charm.FormatValue(show.Spec.Config["port"]); got != "9001" || !show.PreviousKept || show.Head != 3 {
		t.Errorf("ShowRevision 2 = port %s, previous kept %v, head %d; want 9001, true, 3", got, show.PreviousKept, show.Head)
	}
	if got := charm.FormatValue(show.Spec.Config["debug"]); got != "false" {
		t.Errorf("ShowRevision 2's debug = %s, want its default false, the complete config", got)
	}
	show, err = op.ShowRevision(ctx, &pb.ShowRevisionRequest{Service: "kv"})
	must(t, "ShowRevision of the head", err)
	if show.Revision.Number != 3 {
		t.Errorf("ShowRevision 0 showed revision %d, want the head 3", show.Revision.Number)
	}
	_, err = op.ShowRevision(ctx, &pb.ShowRevisionRequest{Service: "kv", Number: 9})
	wantCode(t, "ShowRevision 9", err, codes.NotFound, "service kv has no revision 9: it keeps revisions 1 to 3")

	// To the previous: revision 4 is revision 2's spec.
	rb, err := op.RollbackService(ctx, &pb.RollbackServiceRequest{Service: "kv"})
	must(t, "RollbackService", err)
	if rb.To != 2 || rb.Revision.Number != 4 || rb.Revision.Reason != "rollback to 2" || rb.Revision.By != "admin" {
		t.Errorf("RollbackService = %v, want revision 4, rollback to 2 by admin", rb)
	}
	cfg, err := op.GetConfig(ctx, &pb.GetConfigRequest{Service: "kv"})
	must(t, "GetConfig", err)
	if p, d := charm.FormatValue(cfg.Values["port"]), charm.FormatValue(cfg.Values["debug"]); p != "9001" || d != "false" {
		t.Errorf("after the rollback port=%s debug=%s, want 9001 and false", p, d)
	}
	rb, err = op.RollbackService(ctx, &pb.RollbackServiceRequest{Service: "kv", To: 1})
	must(t, "RollbackService --to 1", err)
	if rb.Revision.Number != 5 || len(rb.Revision.Changes) != 1 || rb.Revision.Changes[0].NewValue != "9000" {
		t.Errorf("RollbackService to 1 = %v, want revision 5 changing port to 9000", rb.Revision)
	}

	// Refusals change nothing.
	_, err = op.RollbackService(ctx, &pb.RollbackServiceRequest{Service: "kv", To: 1})
	wantCode(t, "a rollback to the spec the service has", err, codes.FailedPrecondition, "service kv is already at that spec (revision 5)")
	_, err = op.RollbackService(ctx, &pb.RollbackServiceRequest{Service: "kv", To: 99})
	wantCode(t, "a rollback to a revision never made", err, codes.NotFound, "service kv has no revision 99: it keeps revisions 1 to 5")
	_, err = op.RollbackService(ctx, &pb.RollbackServiceRequest{Service: "kv", To: -1})
	wantCode(t, "a rollback to -1", err, codes.InvalidArgument, "revision -1")
	_, err = op.RollbackService(ctx, &pb.RollbackServiceRequest{Service: "nope"})
	wantCode(t, "a rollback of no service", err, codes.NotFound, "nope")
	_, err = op.ListRevisions(ctx, &pb.ListRevisionsRequest{Service: "nope"})
	wantCode(t, "the revisions of no service", err, codes.NotFound, "nope")
	_, err = op.ListRevisions(ctx, &pb.ListRevisionsRequest{Service: "Bad Name"})
	wantCode(t, "the revisions of a bad name", err, codes.InvalidArgument, "")

	// A revision of another charm, as a refresh makes: a rollback
	// across it returns to the old charm too (TestRefreshService).
	_, err = e.State.ChangeSpec(ctx, "kv", state.SpecChange{By: "admin", Reason: "refresh",
		Next: func(head *pb.Revision) (*pb.ServiceSpec, []*pb.Endpoint, error) {
			next := &pb.ServiceSpec{Charm: &pb.CharmRef{Name: "kv", Revision: 2, Sha256: "ab"}, Config: head.Spec.Config}
			return next, nil, nil
		}})
	must(t, "a revision of charm kv-2", err)
	rb, err = op.RollbackService(ctx, &pb.RollbackServiceRequest{Service: "kv"})
	must(t, "a rollback across a charm", err)
	if c := rb.Revision.GetCharm(); c.GetRevision() != 1 {
		t.Errorf("the rollback across a charm made a revision of charm %v, want kv-1", c)
	}
}

// TestRevisionsKeptRange: a history of 10 prunes the oldest; a rollback
// to a pruned one names what is kept.
func TestRevisionsKeptRange(t *testing.T) {
	e := newEnv(t)
	op := e.admin()
	ctx := e.ctx
	upload(t, ctx, op, "testdata/kv")
	_, err := op.Deploy(ctx, &pb.DeployRequest{Charm: "kv", NumUnits: 1})
	must(t, "Deploy", err)
	for p := 9001; p <= 9012; p++ {
		_, err = op.SetConfig(ctx, &pb.SetConfigRequest{Service: "kv", Set: map[string]string{"port": charm.FormatValue(&pb.ConfigValue{Value: &pb.ConfigValue_IntValue{IntValue: int64(p)}})}})
		must(t, "SetConfig", err)
	}
	list, err := op.ListRevisions(ctx, &pb.ListRevisionsRequest{Service: "kv"})
	must(t, "ListRevisions", err)
	var nums []int64
	for _, r := range list.Revisions {
		nums = append(nums, r.Number)
	}
	// Revision 1 stays while the unit is on it; 2 and 3 are pruned.
	if list.Head != 13 || len(nums) == 0 || nums[0] != 13 || nums[len(nums)-1] != 1 {
		t.Fatalf("ListRevisions = head %d, revisions %v; want 13 down to 1", list.Head, nums)
	}
	_, err = op.RollbackService(ctx, &pb.RollbackServiceRequest{Service: "kv", To: 2})
	wantCode(t, "a rollback to a pruned revision", err, codes.NotFound, "service kv has no revision 2: it keeps revisions 1, 4 to 13")
}
