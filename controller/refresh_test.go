package controller_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/lifelinehq/lifeline/internal/charm"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// kvVariant writes a copy of testdata/kv with its own metadata and
// config, for a refresh to a new revision of the charm.
func kvVariant(t *testing.T, metadata, config string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "kv")
	if err := os.CopyFS(dir, os.DirFS("testdata/kv")); err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{"metadata.yaml": metadata, "config.yaml": config} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

const kvMetadata = `name: kv
summary: a key-value store
provides:
  server: kv
peers:
  cluster: kv-peers
`

// TestRefreshService: a refresh makes a revision of the new charm with
// the configuration carried over (dropped options named, new ones
// defaulted, values at the old default following the new one); it is
// refused for the same charm, for a kept value the new type refuses
// (unless set with the refresh), for an endpoint a relation uses, and
// for another charm without switch; a rollback across it restores the
// charm and its configuration together.
func TestRefreshService(t *testing.T) {
	e := newEnv(t)
	op := e.admin()
	ctx := e.ctx
	upload(t, ctx, op, "testdata/kv")
	_, err := op.Deploy(ctx, &pb.DeployRequest{Charm: "kv", NumUnits: 1, Config: map[string]string{"port": "9000", "name": "a"}})
	must(t, "Deploy", err)

	v2 := upload(t, ctx, op, kvVariant(t, kvMetadata, `options:
  port:
    type: int
    default: 8080
  debug:
    type: boolean
    default: true
  mode:
    type: string
    default: fast
`))
	resp, err := op.RefreshService(ctx, &pb.RefreshServiceRequest{Service: "kv", Charm: "kv", Revision: v2.Revision})
	must(t, "RefreshService to kv-2", err)
	if !slices.Equal(resp.Dropped, []string{"name"}) || !slices.Equal(resp.Defaulted, []string{"mode"}) {
		t.Errorf("refresh dropped %v and defaulted %v, want [name] and [mode]", resp.Dropped, resp.Defaulted)
	}
	show, err := op.ShowRevision(ctx, &pb.ShowRevisionRequest{Service: "kv"})
	must(t, "ShowRevision", err)
	got := map[string]string{}
	for k, v := range show.Spec.Config {
		got[k] = charm.FormatValue(v)
	}
	if len(got) != 3 || got["port"] != "9000" || got["debug"] != "true" || got["mode"] != "fast" {
		t.Errorf("config after the refresh = %v, want port 9000 kept, debug at the new default true, mode fast", got)
	}
	if show.Revision.Reason != "refresh" || show.Spec.Charm.GetRevision() != v2.Revision || show.Revision.By != "admin" {
		t.Errorf("revision after the refresh = %v, want a refresh by admin to kv-%d", show.Revision, v2.Revision)
	}

	_, err = op.RefreshService(ctx, &pb.RefreshServiceRequest{Service: "kv", Charm: "kv", Revision: v2.Revision})
	wantCode(t, "a refresh to the same charm", err, codes.FailedPrecondition, "already at charm kv-2")

	v3 := upload(t, ctx, op, kvVariant(t, kvMetadata, `options:
  port:
    type: string
    default: "8080"
`))
	_, err = op.RefreshService(ctx, &pb.RefreshServiceRequest{Service: "kv", Charm: "kv", Revision: v3.Revision})
	wantCode(t, "a refresh whose new type refuses a kept value", err, codes.FailedPrecondition, `option "port" is 9000 in revision 2`)
	_, err = op.RefreshService(ctx, &pb.RefreshServiceRequest{Service: "kv", Charm: "kv", Revision: v3.Revision, Config: map[string]string{"port": "http"}})
	must(t, "RefreshService to kv-3 setting port", err)

	v4 := upload(t, ctx, op, kvVariant(t, "name: kv\nsummary: no peers\nprovides:\n  server: kv\n", "options: {}\n"))
	_, err = op.RefreshService(ctx, &pb.RefreshServiceRequest{Service: "kv", Charm: "kv", Revision: v4.Revision})
	wantCode(t, "a refresh losing a used endpoint", err, codes.FailedPrecondition, "cluster")

	upload(t, ctx, op, kvVariant(t, "name: other\nsummary: another\n", "options: {}\n"))
	_, err = op.RefreshService(ctx, &pb.RefreshServiceRequest{Service: "kv", Charm: "other", Revision: 1})
	wantCode(t, "a refresh to another charm", err, codes.FailedPrecondition, "needs --switch")
	_, err = op.RefreshService(ctx, &pb.RefreshServiceRequest{Service: "kv", Charm: "kv", Revision: 99})
	wantCode(t, "a refresh to a charm not uploaded", err, codes.NotFound, "")

	rb, err := op.RollbackService(ctx, &pb.RollbackServiceRequest{Service: "kv", To: 1})
	must(t, "RollbackService across charms", err)
	show, err = op.ShowRevision(ctx, &pb.ShowRevisionRequest{Service: "kv", Number: rb.Revision.Number})
	must(t, "ShowRevision", err)
	if show.Spec.Charm.GetRevision() != 1 || charm.FormatValue(show.Spec.Config["name"]) != "a" || charm.FormatValue(show.Spec.Config["port"]) != "9000" {
		t.Errorf("after the rollback to 1: charm kv-%d, config %v; want kv-1 with port 9000 and name a", show.Spec.Charm.GetRevision(), show.Spec.Config)
	}
}
