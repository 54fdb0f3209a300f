package unitagent_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// TestHookToolsAreConfined: a hook cannot read a relation its unit is not
// in, and a hook tool call with a context id whose hook has ended is
// refused.
func TestHookToolsAreConfined(t *testing.T) {
	w := newWorld(t)
	w.deploy(kvMeta, 1, "server")
	w.deploy(appMeta, 1, "db")
	w.deploy("name: other\nrequires:\n  db: kv\n", 1, "db")
	rel := relate(t, w, "other", "kv") // app/0 is not in it
	w.file("app/0", "probe-start", fmt.Sprintf(`
echo "ids: $(relation-ids)"
relation-get -r db:%d - kv/0 && echo "read it"
relation-list -r db:%d
echo "$LIFELINE_AGENT_SOCKET $LIFELINE_CONTEXT_FILE $(cat "$LIFELINE_CONTEXT_FILE")" > "$LIFELINE_CHARM_DIR/../context"
config-get colour
`, rel.Id, rel.Id))
	w.start("app/0")
	w.waitState("app/0", "running")
	probe := strings.Join(w.lines("app/0", "probe.log"), "\n")
	t.Logf("probe.log:\n%s", probe)
	for _, want := range []string{"ids: \n", "unknown relation", "red"} {
		if !strings.Contains(probe+"\n", want) {
			t.Errorf("probe.log lacks %q", want)
		}
	}
	if strings.Contains(probe, "read it") {
		t.Errorf("a hook read the settings of a relation its unit is not in")
	}

	// The start hook is over: its context file is gone, and its context
	// id, kept by a process that read it in time, is stale.
	data, err := os.ReadFile(filepath.Join(w.dir("app/0"), "context"))
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(string(data))
	if len(fields) != 3 {
		t.Fatalf("the hook saw socket, context file and id %q", fields)
	}
	socket, file, id := fields[0], fields[1], fields[2]
	kept := filepath.Join(t.TempDir(), "kept")
	if err := os.WriteFile(kept, []byte(id), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{file, kept} {
		cmd := exec.Command(filepath.Join(toolsDir, "config-get"), "colour")
		cmd.Env = []string{"LIFELINE_AGENT_SOCKET=" + socket, "LIFELINE_CONTEXT_FILE=" + f}
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "context expired") {
			t.Errorf("config-get with the context file %s of an ended hook = %v, %q; want refused, context expired", f, err, out)
		}
	}
}

// TestContextIDNotInHookEnvironment: the context id that lets a hook's
// tools act as its unit is not in the hook's environment, where any
// process of the machine's user could read it (/proc/<pid>/environ) and
// every process the hook starts would inherit it; the tools still work
// from the hook, from a child of the hook and from the child's child.
func TestContextIDNotInHookEnvironment(t *testing.T) {
	w := newWorld(t)
	w.deploy(kvMeta, 1, "server")
	// The recorder (the hook) runs the probe as a child: sh probe-start.
	w.file("kv/0", "probe-start", `
dir="$LIFELINE_CHARM_DIR/.."
tr '\0' '\n' < /proc/$PPID/environ > "$dir/hook.env"
tr '\0' '\n' < /proc/$$/environ > "$dir/child.env"
cat "$LIFELINE_CONTEXT_FILE" > "$dir/context-id"
echo "child: $(config-get colour)"
sh -c 'echo "grandchild: $(config-get colour)"; status-set active "from a grandchild" && echo "grandchild: status set"'
`)
	w.start("kv/0")
	w.waitState("kv/0", "running")
	probe := strings.Join(w.lines("kv/0", "probe.log"), "\n")
	for _, want := range []string{"child: red", "grandchild: red", "grandchild: status set"} {
		if !strings.Contains(probe, want) {
			t.Errorf("probe.log lacks %q:\n%s", want, probe)
		}
	}
	id := strings.Join(w.lines("kv/0", "context-id"), "")
	if id == "" {
		t.Errorf("the hook's context file gave no context id")
	}
	for _, env := range []string{"hook.env", "child.env"} {
		lines := w.lines("kv/0", env)
		if len(lines) == 0 {
			t.Fatalf("%s is empty", env)
		}
		for _, line := range lines {
			if strings.HasPrefix(line, "LIFELINE_CONTEXT_ID=") || id != "" && strings.Contains(line, id) {
				t.Errorf("%s holds the context id: %s", env, line)
			}
		}
	}
	if hooks := w.hooks("kv/0"); len(hooks) == 0 {
		t.Errorf("no hook succeeded")
	}
}

// TestOversizedSettings: relation-set refuses at once (exit 1, one
// sentence) values past the controller's limit of a unit's settings in a
// relation, and the hook goes on; settings the controller refuses after a
// hook (the unit's settings held already, with the hook's, past the
// limit) fail the hook into the error state, which resolved clears.
func TestOversizedSettings(t *testing.T) {
	w := newWorld(t)
	w.deploy(kvMeta, 1, "server")
	w.deploy(appMeta, 1, "db")
	rel := relate(t, w, "app", "kv")
	// blob is a relation-set argument setting key to kib KiB.
	blob := func(key string, kib int) string {
		return fmt.Sprintf(`%s="$(head -c %d /dev/zero | tr '\0' x)"`, key, kib<<10)
	}
	w.file("kv/0", "probe-server-relation-joined", "relation-set "+blob("big", 70)+" || echo refused $?\nrelation-set "+blob("a", 40)+"\n")
	w.start("kv/0")
	w.start("app/0")
	w.waitHook("kv/0", "server-relation-joined")
	settings := func() map[string]string {
		vals, _, err := w.env.State.Settings(w.env.Ctx, rel.Id, "kv/0")
		if err != nil {
			t.Fatalf("Settings(%d, kv/0): %v", rel.Id, err)
		}
		return vals
	}
	w.waitFor("kv/0's settings to hold a", func() bool { return len(settings()["a"]) == 40<<10 })
	probe := strings.Join(w.lines("kv/0", "probe.log"), "\n")
	want := fmt.Sprintf("relation-set: the settings of this unit in server:%d would hold 70.0 KiB: at most 64 KiB\nrefused 1", rel.Id)
	if !strings.Contains(probe, want) {
		t.Errorf("relation-set of 70 KiB printed %q, want %q", probe, want)
	}
	if _, ok := settings()["big"]; ok {
		t.Errorf("kv/0's settings hold big, refused by relation-set")
	}

	// config-changed sets 40 KiB more: within relation-set's reach, but
	// with a's past the controller's limit.
	w.file("kv/0", "probe-config-changed", `relation-set -r "$(relation-ids server)" `+blob("b", 40)+"\n")
	if _, err := w.op.SetConfig(w.env.Ctx, &pb.SetConfigRequest{Service: "kv", Set: map[string]string{"colour": "blue"}}); err != nil {
		t.Fatal(err)
	}
	// The unit moves to the new revision holding its permit.
	w.grant("kv", "kv/0")
	w.waitFor("kv/0 in hook-error", func() bool {
		s := w.agentStatus("kv/0")
		return s.Agent == "error" && s.State == "hook-error" && s.Message == `hook failed: "config-changed"`
	})
	if _, ok := settings()["b"]; ok {
		t.Errorf("kv/0's settings hold b, refused by the controller")
	}
	// The operator has the charm make room (a goes) and resolves it: the
	// hook runs again, and its settings are committed.
	w.file("kv/0", "probe-config-changed", `relation-set -r "$(relation-ids server)" a= `+blob("b", 40)+"\n")
	if _, err := w.op.Resolved(w.env.Ctx, &pb.ResolvedRequest{Unit: "kv/0"}); err != nil {
		t.Fatal(err)
	}
	w.waitState("kv/0", "running")
	if got := settings(); len(got["b"]) != 40<<10 || got["a"] != "" {
		t.Errorf("kv/0's settings after resolved hold a of %d bytes, b of %d; want b of %d, no a", len(got["a"]), len(got["b"]), 40<<10)
	}
}
