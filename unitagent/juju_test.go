package unitagent_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/names"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// lead makes unit its service's leader, as the controller's elector
// would: the world runs no machine agent, so the test keeps the unit's
// machine present itself.
func lead(t *testing.T, w *world, unit string) {
	t.Helper()
	u, err := w.env.State.Unit(w.env.Ctx, unit)
	if err != nil {
		t.Fatal(err)
	}
	p, err := w.env.State.Present(w.env.Ctx, names.MachineTag(u.MachineId), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	if err := w.env.State.ElectLeader(w.env.Ctx, unit); err != nil {
		t.Fatal(err)
	}
}

// jujuCase is one call of a tool as a charm written for Juju makes it,
// and what Juju documents it prints (stdout and stderr together) and
// exits with.
type jujuCase struct {
	name string
	// cmd is a shell command line run in the hook.
	cmd  string
	want string
	code int
}

// probeScript runs the cases in order, each marked in probe.log.
func probeScript(cases []jujuCase) string {
	var b strings.Builder
	for i, c := range cases {
		fmt.Fprintf(&b, "echo '== %d'\n%s\necho \"== rc $?\"\n", i, c.cmd)
	}
	return b.String()
}

// checkProbe compares probe.log's sections with the cases.
func checkProbe(t *testing.T, log []string, cases []jujuCase) {
	t.Helper()
	got := map[int]string{}
	codes := map[int]string{}
	cur := -1
	for _, l := range log {
		var n int
		if _, err := fmt.Sscanf(l, "== %d", &n); err == nil && !strings.HasPrefix(l, "== rc") {
			cur = n
			got[cur] = ""
			continue
		}
		if rc, ok := strings.CutPrefix(l, "== rc "); ok && cur >= 0 {
			codes[cur] = rc
			continue
		}
		if cur >= 0 {
			got[cur] += l + "\n"
		}
	}
	for i, c := range cases {
		if got[i] != c.want || codes[i] != fmt.Sprint(c.code) {
			t.Errorf("%s: %s = %q, exit %s; want %q, exit %d", c.name, c.cmd, got[i], codes[i], c.want, c.code)
		}
	}
}

// TestJujuConformance runs each Juju hook tool with each flag form, and
// reads Juju's environment, in hooks of a real unit agent against a real
// controller, comparing the output with Juju's documented output.
func TestJujuConformance(t *testing.T) {
	w := newWorld(t)
	w.deploy(kvMeta, 1, "server")
	w.deploy(appMeta, 1, "db")
	lead(t, w, "kv/0")

	start := []jujuCase{
		{"env", `echo "$JUJU_UNIT_NAME $JUJU_HOOK_NAME $JUJU_MODEL_NAME $JUJU_VERSION ${JUJU_RELATION:-none} $JUJU_AGENT_SOCKET_NETWORK"`,
			"kv/0 start lifeline 2.9.0 none unix\n", 0},
		{"env machine", `[ "$JUJU_MACHINE_ID" = "$LIFELINE_MACHINE_ID" ] && [ -n "$JUJU_MACHINE_ID" ] && echo same`, "same\n", 0},
		{"env charm dir", `[ "$CHARM_DIR" = "$LIFELINE_CHARM_DIR" ] && [ "$JUJU_CHARM_DIR" = "$LIFELINE_CHARM_DIR" ] && [ "$PWD" = "$CHARM_DIR" ] && echo same`, "same\n", 0},
		{"env socket", `[ "$JUJU_AGENT_SOCKET_ADDRESS" = "$LIFELINE_AGENT_SOCKET" ] && echo same`, "same\n", 0},
		{"juju-log", `juju-log hello world`, "", 0},
		{"juju-log -l", `juju-log -l WARNING careful`, "", 0},
		{"juju-log --log-level", `juju-log --log-level=debug details`, "", 0},
		{"juju-log --debug", `juju-log --debug details`, "", 0},
		{"juju-log bad level", `juju-log -l LOUD x`, "", 0},
		{"juju-log nothing", `juju-log`, "juju-log: no message specified\n", 2},
		{"log still", `log -l info hello`, "", 0},
		{"config-get key", `config-get colour`, "red\n", 0},
		{"config-get smart", `config-get --format=smart colour`, "red\n", 0},
		{"config-get yaml", `config-get --format=yaml`, "colour: red\n", 0},
		{"config-get json", `config-get --format=json colour`, "\"red\"\n", 0},
		{"config-get --all", `config-get --all`, "colour: red\n", 0},
		{"config-get -a json", `config-get -a --format json`, "{\"colour\":\"red\"}\n", 0},
		{"config-get unknown", `config-get nothing`, "", 0},
		{"status-set", `status-set maintenance "installing things"`, "", 0},
		{"status-get", `status-get`, "maintenance\n", 0},
		{"status-get --include-data", `status-get --include-data`, "message: installing things\nstatus: maintenance\nstatus-data: {}\n", 0},
		{"status-get json", `status-get --format=json --include-data`, "{\"message\":\"installing things\",\"status\":\"maintenance\",\"status-data\":{}}\n", 0},
		{"status-set --application", `status-set --application active "all good"`, "", 0},
		{"status-get --application", `status-get --application`, "active\n", 0},
		{"status-set bad", `status-set error`, "status-set: unknown status \"error\": use maintenance, blocked, waiting, active\n", 2},
		{"application-version-set", `application-version-set 1.2.3`, "", 0},
		{"network-get ingress", `network-get server --ingress-address`, "10.0.0.kv-0\n", 0},
		{"network-get bind", `network-get server --bind-address`, "10.0.0.kv-0\n", 0},
		{"network-get two", `network-get server --bind-address --ingress-address`, "bind-address: 10.0.0.kv-0\ningress-address: 10.0.0.kv-0\n", 0},
		{"network-get json", `network-get server --format=json --ingress-address`, "\"10.0.0.kv-0\"\n", 0},
		{"network-get", `network-get server`, `bind-addresses:
  - mac-address: ""
    interface-name: ""
    addresses:
      - hostname: 10.0.0.kv-0
        value: 10.0.0.kv-0
        cidr: ""
        address: 10.0.0.kv-0
    macaddress: ""
    interfacename: ""
egress-subnets: []
ingress-addresses:
  - 10.0.0.kv-0
`, 0},
		{"relation-set outside", `relation-set a=1`, "relation-set: no relation id: use -r outside relation hooks\n", 2},
	}
	w.file("kv/0", "probe-start", probeScript(start))

	joined := []jujuCase{
		{"env relation", `echo "$JUJU_RELATION ${JUJU_RELATION_ID%%:*} $JUJU_REMOTE_UNIT $JUJU_REMOTE_APP"`, "db db kv/0 kv\n", 0},
		{"env relation id", `[ "$JUJU_RELATION_ID" = "$LIFELINE_RELATION_ID" ] && echo same`, "same\n", 0},
		{"relation-set --file -", "printf 'host: 10.9.9.9\\nport: 5433\\n' | relation-set --file - extra=1", "", 0},
		{"relation-set --file FILE", `printf 'user=me\n' > ../settings.txt && relation-set --file ../settings.txt`, "", 0},
		{"relation-get own yaml", `relation-get --format=yaml - "$JUJU_UNIT_NAME"`, "extra: \"1\"\nhost: 10.9.9.9\nport: \"5433\"\nprivate-address: 10.0.0.app-0\nuser: me\n", 0},
		{"relation-get own smart key", `relation-get --format=smart port "$JUJU_UNIT_NAME"`, "5433\n", 0},
		{"relation-get own json", `relation-get --format=json host app/0`, "\"10.9.9.9\"\n", 0},
		{"relation-get remote", `relation-get - "$JUJU_REMOTE_UNIT" >/dev/null && echo read`, "read\n", 0},
		{"juju-log in relation", `juju-log -l INFO joined`, "", 0},
	}
	w.file("app/0", "probe-db-relation-joined", probeScript(joined))

	// The leader writes its service's settings; the other side runs
	// relation-changed with no remote unit and reads them.
	appSet := []jujuCase{
		{"relation-set --app", `relation-set --app url=kv:7000 mode=rw`, "", 0},
		{"relation-get --app own unit", `relation-get --app url "$JUJU_UNIT_NAME"`, "kv:7000\n", 0},
		{"relation-get --app own yaml", `relation-get --app --format=yaml - kv`, "mode: rw\nurl: kv:7000\n", 0},
		{"relation-get --app remote, none", `relation-get --app`, "", 0},
	}
	w.file("kv/0", "probe-server-relation-joined", `{
`+probeScript(appSet)+`} > "$CHARM_DIR/../app.log" 2>&1`)
	appChanged := []jujuCase{
		{"env service change", `echo "${JUJU_REMOTE_UNIT:-none} $JUJU_REMOTE_APP $JUJU_RELATION"`, "none kv db\n", 0},
		{"relation-get --app", `relation-get --app`, "mode: rw\nurl: kv:7000\n", 0},
		{"relation-get --app key service", `relation-get --app url kv`, "kv:7000\n", 0},
		{"relation-get --app json", `relation-get --app --format=json url`, "\"kv:7000\"\n", 0},
		{"relation-set --app follower", `relation-set --app x=1`, "relation-set: cannot write relation settings: this unit is not the leader\n", 1},
	}
	w.file("app/0", "probe-db-relation-changed", `[ -n "$JUJU_REMOTE_UNIT" ] || {
`+probeScript(appChanged)+`} > "$CHARM_DIR/../app.log" 2>&1`)

	w.start("kv/0")
	w.waitState("kv/0", "running")
	relate(t, w, "app", "kv")
	w.start("app/0")
	w.waitHook("app/0", "db-relation-joined")

	t.Run("start", func(t *testing.T) { checkProbe(t, w.lines("kv/0", "probe.log"), start) })
	t.Run("relation-joined", func(t *testing.T) { checkProbe(t, w.lines("app/0", "probe.log"), joined) })
	rcs := func(unit string) int {
		n := 0
		for _, l := range w.lines(unit, "app.log") {
			if strings.HasPrefix(l, "== rc") {
				n++
			}
		}
		return n
	}
	w.waitFor("app/0 to run relation-changed for kv's settings", func() bool { return rcs("app/0") == len(appChanged) })
	t.Run("relation-set --app", func(t *testing.T) { checkProbe(t, w.lines("kv/0", "app.log"), appSet) })
	t.Run("relation-changed --app", func(t *testing.T) { checkProbe(t, w.lines("app/0", "app.log"), appChanged) })

	st, err := w.op.Status(w.env.Ctx, &pb.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st.Status.Services {
		if s.Name == "kv" && (s.Version != "1.2.3" || s.Status != "active" || s.Message != "all good") {
			t.Errorf("kv in status: version %q, status %q, message %q; want 1.2.3, active, all good", s.Version, s.Status, s.Message)
		}
	}
}

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
