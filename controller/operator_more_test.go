package controller_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/lifelinehq/lifeline/internal/testing/poll"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

func TestAddManualMachinesGivesJoinTokens(t *testing.T) {
	e := newEnv(t)
	op := e.admin()
	resp, err := op.AddMachines(e.ctx, &pb.AddMachinesRequest{NumMachines: 2, Manual: true})
	// The test controller was given no addresses or CA for agents.
	wantCode(t, "AddMachines --manual", err, codes.FailedPrecondition, "cannot make join tokens")
	_ = resp
	resp, err = op.AddMachines(e.ctx, &pb.AddMachinesRequest{NumMachines: 2})
	must(t, "AddMachines", err)
	if len(resp.Machines) != 2 || len(resp.JoinTokens) != 0 {
		t.Errorf("AddMachines = %d machines, %d tokens; want 2 and none", len(resp.Machines), len(resp.JoinTokens))
	}
	_, err = op.AddMachines(e.ctx, &pb.AddMachinesRequest{NumMachines: 0})
	wantCode(t, "AddMachines 0", err, codes.InvalidArgument, "cannot add 0 machines")
}

func TestResolvedAndForcedDestroy(t *testing.T) {
	e := newEnv(t)
	op := e.admin()
	upload(t, e.ctx, op, "testdata/kv")
	_, err := op.Deploy(e.ctx, &pb.DeployRequest{Charm: "kv", NumUnits: 2})
	must(t, "Deploy", err)
	must(t, "SetStatus", e.st.SetStatus(e.ctx, state.StatusUnitAgent, "kv/0", &pb.Status{Status: "error", Message: `hook failed: "install"`}))
	_, err = op.Resolved(e.ctx, &pb.ResolvedRequest{Unit: "kv/0", NoRetry: true})
	must(t, "Resolved", err)
	if mode, _ := e.st.Resolved(e.ctx, "kv/0"); mode != pb.ResolvedMode_RESOLVED_MODE_NO_RETRY {
		t.Errorf("resolved mark = %v, want no-retry", mode)
	}
	st, err := op.Status(e.ctx, &pb.StatusRequest{})
	must(t, "Status", err)
	for _, svc := range st.Status.Services {
		if svc.Status != "error" || svc.Message != `kv/0: hook failed: "install"` {
			t.Errorf("service status = %q %q, want the unit's error", svc.Status, svc.Message)
		}
	}
	noWait := int64(0)
	_, err = op.DestroyUnit(e.ctx, &pb.DestroyUnitRequest{Unit: "kv/1", Force: true, MaxWaitMs: &noWait})
	must(t, "DestroyUnit --force --no-wait", err)
	if _, err := state.NewCleaner(e.st, 0).Pass(e.ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.Unit(e.ctx, "kv/1"); err == nil {
		t.Errorf("kv/1 still exists after a forced destroy with no wait and a cleaner pass")
	}
	_, err = op.DestroyMachine(e.ctx, &pb.DestroyMachineRequest{Machine: "0", Force: true})
	must(t, "DestroyMachine --force", err)
	st, err = op.Status(e.ctx, &pb.StatusRequest{})
	must(t, "Status", err)
	if m := st.Status.Machines[0]; m.Life != "dying" || !m.Forced || len(m.WaitingFor) == 0 {
		t.Errorf("machine 0 status = %v, want dying, forced and waiting for its unit and forced removal", m)
	}
}

func TestRevokedAdminCredential(t *testing.T) {
	e := newEnv(t)
	op := e.admin()
	_, err := op.Status(e.ctx, &pb.StatusRequest{})
	must(t, "Status", err)
	must(t, "RevokeCredential", e.st.RevokeCredential(e.ctx, "admin"))
	// The controller's mirror of the credentials forgets it as soon as its
	// watch brings the deletion.
	err = eventually(t, func() error { _, err := op.Status(e.ctx, &pb.StatusRequest{}); return err })
	wantCode(t, "Status after revocation", err, codes.Unauthenticated, "credential of admin is not valid")
}

// eventually calls f until it fails, and returns its error.
func eventually(t *testing.T, f func() error) error {
	t.Helper()
	var err error
	poll.UntilSays(t, "the call to fail", func() (bool, string) {
		err = f()
		return err != nil, "it still succeeds"
	})
	return err
}

// A credential replaced by a new one works at once, though the
// controller's mirror still holds the old hash; the old one stops working
// once the mirror has the new.
func TestReplacedCredential(t *testing.T) {
	e := newEnv(t)
	first := e.Credential("admin")
	op := pb.NewOperatorServiceClient(e.Dial(first))
	_, err := op.Status(e.ctx, &pb.StatusRequest{})
	must(t, "Status", err)
	second := e.Credential("admin")
	op2 := pb.NewOperatorServiceClient(e.Dial(second))
	_, err = op2.Status(e.ctx, &pb.StatusRequest{})
	must(t, "Status with the new credential", err)
	err = eventually(t, func() error { _, err := op.Status(e.ctx, &pb.StatusRequest{}); return err })
	wantCode(t, "Status with the replaced credential", err, codes.Unauthenticated, "credential of admin is not valid")
	_, err = op2.Status(e.ctx, &pb.StatusRequest{})
	must(t, "Status with the new credential again", err)
}

// tarball packs files (name → content) into a gzipped tar, as charm.Pack
// would, but without checking them: for uploads of broken charms.
func tarball(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for name, content := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(content)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestUploadRefusesMalformedCharms(t *testing.T) {
	e := newEnv(t)
	op := e.admin()
	good := "name: kv\nprovides:\n  server: kv\n"
	tests := []struct {
		name  string
		files map[string]string
		msg   string
	}{
		{"metadata.yaml missing", map[string]string{"config.yaml": "options: {}\n"}, "metadata.yaml"},
		{"metadata.yaml not YAML", map[string]string{"metadata.yaml": "name: [kv\n"}, "metadata.yaml"},
		{"metadata.yaml bad name", map[string]string{"metadata.yaml": "name: Bad_Name\n"}, "metadata.yaml"},
		{"metadata.yaml bad interface", map[string]string{"metadata.yaml": "name: kv\nrequires:\n  db: \"Bad Iface\"\n"}, "metadata.yaml"},
		{"metadata.yaml bad scope", map[string]string{"metadata.yaml": "name: kv\nrequires:\n  db:\n    interface: kv\n    scope: galaxy\n"}, "metadata.yaml"},
		{"config.yaml not YAML", map[string]string{"metadata.yaml": good, "config.yaml": "options: [\n"}, "config.yaml"},
		{"config.yaml bad type", map[string]string{"metadata.yaml": good, "config.yaml": "options:\n  port:\n    type: integer\n"}, "config.yaml"},
		{"config.yaml default of the wrong type", map[string]string{"metadata.yaml": good, "config.yaml": "options:\n  port:\n    type: int\n    default: lots\n"}, "config.yaml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, err := e.st.Snapshot(e.ctx)
			must(t, "Snapshot", err)
			_, err = uploadBytes(e.ctx, op, tarball(t, tt.files), "")
			wantCode(t, "UploadCharm", err, codes.InvalidArgument, tt.msg)
			after, err := e.st.Snapshot(e.ctx)
			must(t, "Snapshot", err)
			if !sameModel(before, after) {
				t.Errorf("a refused upload changed the model")
			}
		})
	}
}

func TestGetAgentSettings(t *testing.T) {
	e := newEnv(t)
	ms, err := e.st.AddMachines(e.ctx, 1)
	must(t, "AddMachines", err)
	resp, err := e.agent("machine-"+ms[0].Id).GetAgentSettings(e.ctx, &pb.GetAgentSettingsRequest{})
	must(t, "GetAgentSettings", err)
	if resp.HookTimeoutMs != 5*60*1000 {
		t.Errorf("GetAgentSettings = %d ms, want the default 5 minutes", resp.HookTimeoutMs)
	}
	if resp.UpdateStatusIntervalMs != 5*60*1000 {
		t.Errorf("GetAgentSettings: update-status every %d ms, want the default 5 minutes", resp.UpdateStatusIntervalMs)
	}
	_, err = e.admin().Status(e.ctx, &pb.StatusRequest{})
	must(t, "Status", err)
	_, err = pb.NewAgentServiceClient(e.conn("admin")).GetAgentSettings(e.ctx, &pb.GetAgentSettingsRequest{})
	wantCode(t, "GetAgentSettings as the operator", err, codes.PermissionDenied, "")
}

// An upload that sends nothing at all, not even its header, is invalid
// input, not an internal error (found by the fault suite's fuzzer).
func TestUploadOfNothing(t *testing.T) {
	e := newEnv(t)
	stream, err := e.admin().UploadCharm(e.ctx)
	must(t, "UploadCharm", err)
	_, err = stream.CloseAndRecv()
	wantCode(t, "UploadCharm of nothing", err, codes.InvalidArgument, "must start with its header")
}

// TestUploadWarnings: the controller answers an upload with what the
// charm declares that Lifeline does not use, one line each, for ctl to
// print; with strict it refuses such a charm and stores nothing.
func TestUploadWarnings(t *testing.T) {
	e := newEnv(t)
	op := e.admin()
	data := tarball(t, map[string]string{
		"metadata.yaml": "name: kv\nseries: [focal]\nprovides:\n  server: {interface: kv, optional: true}\n",
		"metrics.yaml":  "metrics: {}\n",
	})
	want := []string{
		"metadata.yaml: series: ignored: Lifeline does not check where or on what a charm runs",
		"metadata.yaml: provides.server.optional: not supported, ignored",
		"metrics.yaml: not used by Lifeline",
	}
	send := func(strict bool) (*pb.UploadCharmResponse, error) {
		stream, err := op.UploadCharm(e.ctx)
		must(t, "UploadCharm", err)
		h := &pb.UploadCharmHeader{Size: int64(len(data)), Strict: strict}
		must(t, "Send header", stream.Send(&pb.UploadCharmRequest{Part: &pb.UploadCharmRequest_Header{Header: h}}))
		if err := stream.Send(&pb.UploadCharmRequest{Part: &pb.UploadCharmRequest_Chunk{Chunk: data}}); err != nil && err != io.EOF {
			return nil, err
		}
		return stream.CloseAndRecv()
	}
	before, err := e.st.Snapshot(e.ctx)
	must(t, "Snapshot", err)
	_, err = send(true)
	wantCode(t, "UploadCharm strict", err, codes.FailedPrecondition, "--strict: charm kv declares what Lifeline does not use: "+strings.Join(want, "; "))
	after, err := e.st.Snapshot(e.ctx)
	must(t, "Snapshot", err)
	if !sameModel(before, after) {
		t.Errorf("a refused strict upload changed the model")
	}
	resp, err := send(false)
	must(t, "UploadCharm", err)
	if !slices.Equal(resp.Warnings, want) || resp.Charm.GetRevision() != 1 {
		t.Errorf("UploadCharm = %v, warnings\n%q\nwant revision 1 and\n%q", resp.Charm, resp.Warnings, want)
	}
}
