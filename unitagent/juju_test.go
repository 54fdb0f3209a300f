package unitagent_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// TestHookCannotStart: a hook file that cannot be started fails the hook
// with the reason in the unit's status message and its status history.
func TestHookCannotStart(t *testing.T) {
	w := newWorld(t)
	dir := writeCharm(t, kvMeta, "server")
	if err := os.Chmod(filepath.Join(dir, "hooks", "install"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := w.env.Upload(w.op, dir)
	if _, err := w.op.Deploy(w.env.Ctx, &pb.DeployRequest{Charm: c.Name, NumUnits: 1}); err != nil {
		t.Fatalf("Deploy: %v", err)
	}
	w.start("kv/0")
	want := `hook "install" could not start: permission denied: hooks/install is not executable (mode -rw-r--r--)`
	w.waitFor("kv/0's status to say why install could not start", func() bool {
		s := w.agentStatus("kv/0")
		return s != nil && s.Agent == "error" && strings.HasPrefix(s.Message, want)
	})
}

// TestMissingJujuTool: a hook without set -e that calls a Juju tool
// Lifeline does not provide succeeds, and the unit says so: an entry in
// its status history and a warning in its idle status's message.
func TestMissingJujuTool(t *testing.T) {
	w := newWorld(t)
	dir := writeCharm(t, kvMeta, "server")
	if err := os.WriteFile(filepath.Join(dir, "hooks", "install"), []byte("#!/bin/sh\njuju-reboot --now\necho installed\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	c := w.env.Upload(w.op, dir)
	if _, err := w.op.Deploy(w.env.Ctx, &pb.DeployRequest{Charm: c.Name, NumUnits: 1}); err != nil {
		t.Fatalf("Deploy: %v", err)
	}
	w.start("kv/0")
	want := `warning: hook "install" called juju-reboot, which Lifeline does not provide`
	defer func() {
		if t.Failed() {
			t.Logf("status %+v", w.agentStatus("kv/0"))
		}
	}()
	w.waitFor("kv/0's idle status to warn of juju-reboot", func() bool {
		s := w.agentStatus("kv/0")
		return s != nil && s.Agent == "idle" && s.State == "running" && s.AgentMessage == want
	})
}
