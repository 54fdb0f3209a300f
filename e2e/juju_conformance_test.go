package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/testing/e2etest"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
)

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

// probeScript runs the cases in order, each marked in the output.
func probeScript(cases []jujuCase) string {
	var b strings.Builder
	for i, c := range cases {
		fmt.Fprintf(&b, "echo '== %d'\n%s\necho \"== rc $?\"\n", i, c.cmd)
	}
	return b.String()
}

// checkProbe compares a probe's output, split into its sections, with
// the cases.
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

// conformanceStart is what kv/0's start hook runs, and what it prints
// for a unit whose address is addr; nw is network-get's whole answer for
// addr.
func conformanceStart(addr, nw string) []jujuCase {
	return []jujuCase{
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
		{"network-get ingress", `network-get server --ingress-address`, addr + "\n", 0},
		{"network-get bind", `network-get server --bind-address`, addr + "\n", 0},
		{"network-get two", `network-get server --bind-address --ingress-address`, "bind-address: " + addr + "\ningress-address: " + addr + "\n", 0},
		{"network-get json", `network-get server --format=json --ingress-address`, "\"" + addr + "\"\n", 0},
		{"network-get", `network-get server`, nw, 0},
		{"relation-set outside", `relation-set a=1`, "relation-set: no relation id: use -r outside relation hooks\n", 2},
	}
}

// conformanceJoined is what app/0's db-relation-joined hook runs, and
// what it prints for a unit whose address is addr.
func conformanceJoined(addr string) []jujuCase {
	return []jujuCase{
		{"env relation", `echo "$JUJU_RELATION ${JUJU_RELATION_ID%%:*} $JUJU_REMOTE_UNIT $JUJU_REMOTE_APP"`, "db db kv/0 kv\n", 0},
		{"env relation id", `[ "$JUJU_RELATION_ID" = "$LIFELINE_RELATION_ID" ] && echo same`, "same\n", 0},
		{"relation-set --file -", "printf 'host: 10.9.9.9\\nport: 5433\\n' | relation-set --file - extra=1", "", 0},
		{"relation-set --file FILE", `printf 'user=me\n' > ../settings.txt && relation-set --file ../settings.txt`, "", 0},
		{"relation-get own yaml", `relation-get --format=yaml - "$JUJU_UNIT_NAME"`, "extra: \"1\"\nhost: 10.9.9.9\nport: \"5433\"\nprivate-address: " + addr + "\nuser: me\n", 0},
		{"relation-get own smart key", `relation-get --format=smart port "$JUJU_UNIT_NAME"`, "5433\n", 0},
		{"relation-get own json", `relation-get --format=json host app/0`, "\"10.9.9.9\"\n", 0},
		{"relation-get remote", `relation-get - "$JUJU_REMOTE_UNIT" >/dev/null && echo read`, "read\n", 0},
		{"juju-log in relation", `juju-log -l INFO joined`, "", 0},
	}
}

// conformanceAppSet is what kv's leader runs in server-relation-joined:
// it writes its service's settings and reads them back.
var conformanceAppSet = []jujuCase{
	{"relation-set --app", `relation-set --app url=kv:7000 mode=rw`, "", 0},
	{"relation-get --app own unit", `relation-get --app url "$JUJU_UNIT_NAME"`, "kv:7000\n", 0},
	{"relation-get --app own yaml", `relation-get --app --format=yaml - kv`, "mode: rw\nurl: kv:7000\n", 0},
	{"relation-get --app remote, none", `relation-get --app`, "", 0},
}

// conformanceAppChanged is what app's follower runs in the
// db-relation-changed with no remote unit that kv's settings bring.
var conformanceAppChanged = []jujuCase{
	{"env service change", `echo "${JUJU_REMOTE_UNIT:-none} $JUJU_REMOTE_APP $JUJU_RELATION"`, "none kv db\n", 0},
	{"relation-get --app", `relation-get --app`, "mode: rw\nurl: kv:7000\n", 0},
	{"relation-get --app key service", `relation-get --app url kv`, "kv:7000\n", 0},
	{"relation-get --app json", `relation-get --app --format=json url`, "\"kv:7000\"\n", 0},
	{"relation-set --app follower", `relation-set --app x=1`, "relation-set: cannot write relation settings: this unit is not the leader\n", 1},
}

// probeHook is every hook of the conformance charms: it runs the
// charm's probes/<hook>, if any, appending what it prints to probe.log
// in the unit's directory (the charm directory's parent), and succeeds
// whatever the probe does.
const probeHook = `#!/bin/sh
p="$LIFELINE_CHARM_DIR/probes/$LIFELINE_HOOK_NAME"
if [ -f "$p" ]; then sh "$p" >> "$LIFELINE_CHARM_DIR/../probe.log" 2>&1 || echo "exit $?" >> "$LIFELINE_CHARM_DIR/../probe.log"; fi
exit 0
`

// writeProbeCharm writes a charm into dir: metadata, a colour option
// (default red), probeHook as every hook named, and the probes.
func writeProbeCharm(t *testing.T, dir, metadata string, hooks []string, probes map[string]string) string {
	t.Helper()
	files := map[string]string{
		"metadata.yaml": metadata,
		"config.yaml":   "options:\n  colour:\n    type: string\n    default: red\n",
	}
	for _, h := range hooks {
		files["hooks/"+h] = probeHook
	}
	for h, p := range probes {
		files["probes/"+h] = p
	}
	for name, content := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// readLines is the file's lines, none when it does not exist yet.
func readLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

// rcCount is how many cases' exit codes a probe's output holds.
func rcCount(lines []string) int {
	n := 0
	for _, l := range lines {
		if strings.HasPrefix(l, "== rc ") {
			n++
		}
	}
	return n
}

// TestJujuConformance runs each Juju hook tool with each flag form, and
// reads Juju's environment, in hooks of real unit agents (the real
// lifelined controller and machine agents), comparing the output with
// Juju's documented output. One deployment: kv (one unit, so its leader)
// runs the start table; app (two units, one elected leader) relates to
// it, app/0 runs the relation-joined table, kv's leader writes its
// service's settings and app's follower reads them and is refused its
// own.
func TestJujuConformance(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)
	s.Bootstrap(t)
	start := time.Now()
	dir := t.TempDir()

	// The start hook waits (10 s at most) until kv/0 leads, as
	// status-set --application needs: the elector may elect it after the
	// unit's first hooks.
	waitLead := "for i in $(seq 50); do [ \"$(is-leader)\" = True ] && break; sleep 0.2; done\n"
	kv := writeProbeCharm(t, filepath.Join(dir, "kv"), "name: kv\nprovides:\n  server: kv\n",
		[]string{"install", "start", "server-relation-joined"},
		map[string]string{
			"start": waitLead + probeScript(conformanceStart("", "")),
			// The first joined hook only: a second (for app's other
			// unit) would find app's settings as they are then.
			"server-relation-joined": `[ -e "$CHARM_DIR/../app.log" ] && exit 0
{
` + probeScript(conformanceAppSet) + `} > "$CHARM_DIR/../app.log" 2>&1`,
		})
	app := writeProbeCharm(t, filepath.Join(dir, "app"), "name: app\nrequires:\n  db: kv\n",
		[]string{"install", "start", "db-relation-joined", "db-relation-changed"},
		map[string]string{
			"db-relation-joined": `[ "$JUJU_UNIT_NAME" = app/0 ] || exit 0
` + probeScript(conformanceJoined("")),
			// The change of kv's service settings (no remote unit), on
			// the unit that does not lead, once they are written: a
			// change before then would leave an answer of nothing.
			"db-relation-changed": `[ -z "$JUJU_REMOTE_UNIT" ] && [ "$(is-leader)" = False ] && [ -n "$(relation-get --app url kv)" ] || exit 0
{
` + probeScript(conformanceAppChanged) + `} > "$CHARM_DIR/../app.log" 2>&1`,
		})

	s.OK(t, "deploy", kv)
	s.OK(t, "deploy", app, "-n", "2")
	leads := func(doc *e2etest.StatusDoc, svc string) (leader string, others []string) {
		for name, u := range doc.Services[svc].Units {
			if u.Leader {
				leader = name
			} else {
				others = append(others, name)
			}
		}
		return leader, others
	}
	doc := s.WaitStatus(t, "kv/0 started and leading, app's two units started, one leading", time.Minute, func(doc *e2etest.StatusDoc) bool {
		for _, name := range []string{"kv/0", "app/0", "app/1"} {
			if u, ok := doc.Unit(name); !ok || u.State != "running" || u.Agent != "idle" || u.Address == "" {
				return false
			}
		}
		kl, _ := leads(doc, "kv")
		al, _ := leads(doc, "app")
		return kl == "kv/0" && al != ""
	})
	_, followers := leads(doc, "app")
	follower := followers[0]
	unitPath := func(unit, file string) string {
		u, _ := doc.Unit(unit)
		return filepath.Join(unitDir(s, u.Machine, unit), file)
	}
	kvAddr := doc.Services["kv"].Units["kv/0"].Address
	appAddr := doc.Services["app"].Units["app/0"].Address
	t.Logf("deployed at %s: kv/0 at %s, app/0 at %s, app's follower %s", time.Since(start).Round(100*time.Millisecond), kvAddr, appAddr, follower)

	t.Run("start", func(t *testing.T) {
		checkProbe(t, readLines(t, unitPath("kv/0", "probe.log")), conformanceStart(kvAddr, networkGetYAML(t, kvAddr)))
	})

	s.OK(t, "relate", "app", "kv")
	poll.Within(t, "app/0's relation-joined and "+follower+"'s relation-changed for kv's settings", time.Minute, func() (bool, string) {
		j := rcCount(readLines(t, unitPath("app/0", "probe.log")))
		c := rcCount(readLines(t, unitPath(follower, "app.log")))
		return j == len(conformanceJoined("")) && c == len(conformanceAppChanged),
			fmt.Sprintf("%d of %d joined cases, %d of %d changed cases", j, len(conformanceJoined("")), c, len(conformanceAppChanged))
	})
	t.Run("relation-joined", func(t *testing.T) {
		checkProbe(t, readLines(t, unitPath("app/0", "probe.log")), conformanceJoined(appAddr))
	})
	t.Run("relation-set --app", func(t *testing.T) {
		checkProbe(t, readLines(t, unitPath("kv/0", "app.log")), conformanceAppSet)
	})
	t.Run("relation-changed --app", func(t *testing.T) {
		checkProbe(t, readLines(t, unitPath(follower, "app.log")), conformanceAppChanged)
	})

	var st struct {
		Services map[string]struct {
			Status  string `json:"status"`
			Message string `json:"message"`
			Version string `json:"version"`
		} `json:"services"`
	}
	out := s.OK(t, "status", "--format", "json")
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("ctl status --format json: %v\n%s", err, out)
	}
	if k := st.Services["kv"]; k.Version != "1.2.3" || k.Status != "active" || k.Message != "all good" {
		t.Errorf("kv in status: version %q, status %q, message %q; want 1.2.3, active, all good", k.Version, k.Status, k.Message)
	}
	t.Logf("done at %s", time.Since(start).Round(100*time.Millisecond))
}

// networkGetYAML is network-get's whole answer, in Juju's layout, for a
// unit at addr on this host: the interface holding addr (its name, MAC
// and subnet) when there is one, else addr alone in a /32 (or /128).
func networkGetYAML(t *testing.T, addr string) string {
	t.Helper()
	ip := net.ParseIP(addr)
	if ip == nil {
		t.Fatalf("unit address %q is not an IP address", addr)
	}
	single := ip.String() + "/32"
	if ip.To4() == nil {
		single = ip.String() + "/128"
	}
	iface, mac, cidr := "", "", single
	ifaces, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range ifaces {
		addrs, _ := i.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
				iface, mac = i.Name, i.HardwareAddr.String()
				cidr = (&net.IPNet{IP: n.IP.Mask(n.Mask), Mask: n.Mask}).String()
			}
		}
	}
	q := func(s string) string {
		if s == "" {
			return `""`
		}
		return s
	}
	return fmt.Sprintf(`bind-addresses:
  - mac-address: %[1]s
    interface-name: %[2]s
    addresses:
      - hostname: ""
        value: %[3]s
        cidr: %[4]s
        address: %[3]s
    macaddress: %[1]s
    interfacename: %[2]s
egress-subnets:
  - %[5]s
ingress-addresses:
  - %[3]s
`, q(mac), q(iface), addr, cidr, single)
}
