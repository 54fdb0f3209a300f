package unitagent_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/lifelinehq/lifeline/internal/hostexec"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// claimsMeta is a kv charm that claims two files and two daemons on its
// host: colour.conf and the daemon painted follow the colour option,
// fixed.conf and plain do not; no claim uses the option other.
const claimsMeta = `name: kv
provides:
  server: kv
host:
  files:
    - {path: colour.conf, template: "colour={{ config.colour }}\n"}
    - {path: fixed.conf, content: "fixed\n"}
  daemons:
    - name: painted
      command: [sleep, "1000"]
      env: {COLOUR: "{{ config.colour }}"}
    - name: plain
      command: [sleep, "1001"]
`

// withHost gives the world's agents a host of their own: a supervisor
// whose daemons are stopped as the test ends.
func (w *world) withHost() *hostexec.Host {
	w.t.Helper()
	stateDir := w.t.TempDir()
	sup, err := hostexec.NewSupervisor(hostexec.SupervisorConfig{
		StateFile: filepath.Join(stateDir, "daemons.json"),
		UnitDir:   w.dir,
		Logger:    hclog.NewNullLogger(),
	})
	if err != nil {
		w.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); sup.Run(ctx) }()
	w.t.Cleanup(func() {
		cancel()
		<-done
		for _, u := range []string{"kv/0", "kv/1"} {
			sup.StopAll(u)
		}
	})
	w.host = &hostexec.Host{Packages: hostexec.NewPackages(stateDir, hostexec.None{}), Supervisor: sup}
	return w.host
}

// pids returns the pids of the unit's daemons by name, running ones only.
func pids(h *hostexec.Host, unit string) map[string]int {
	out := map[string]int{}
	for _, d := range h.Supervisor.States(unit) {
		if d.State == hostexec.Running {
			out[d.Name] = d.Pid
		}
	}
	return out
}

func modTime(t *testing.T, path string) time.Time {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.ModTime()
}

// TestHostClaimsOrderChangesAndRelease: a new unit has its files before
// install and its daemons after config-changed, before start; a colour
// change rewrites only colour.conf and restarts only painted; a change
// of an option no claim uses runs no task; the dying unit's daemons stop
// and its files go after stop, before remove.
func TestHostClaimsOrderChangesAndRelease(t *testing.T) {
	w := newWorld(t)
	h := w.withHost()
	dir := writeCharm(t, claimsMeta, "server")
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte("options:\n  colour:\n    type: string\n    default: red\n  other:\n    type: string\n    default: x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := w.env.Upload(w.op, dir)
	if _, err := w.op.Deploy(w.env.Ctx, &pb.DeployRequest{Charm: c.Name, NumUnits: 1}); err != nil {
		t.Fatal(err)
	}
	const probe = `d="$LIFELINE_CHARM_DIR/.."; f=no; p=no; [ -f "$d/colour.conf" ] && f=yes; [ -e "$d/daemons/painted.log" ] && p=yes; echo "$LIFELINE_HOOK_NAME file=$f daemon=$p"`
	for _, hook := range []string{"install", "config-changed", "start", "stop", "remove"} {
		w.file("kv/0", "probe-"+hook, probe)
	}
	w.start("kv/0")
	w.waitState("kv/0", "running")
	want := []string{
		"install file=yes daemon=no",
		"config-changed file=yes daemon=no",
		"start file=yes daemon=yes",
	}
	if got := w.lines("kv/0", "probe.log"); !equal(got, want) {
		t.Fatalf("a new unit's order: %q, want %q", got, want)
	}
	unitDir := w.dir("kv/0")
	if b, _ := os.ReadFile(filepath.Join(unitDir, "colour.conf")); string(b) != "colour=red\n" {
		t.Errorf("colour.conf holds %q", b)
	}
	before := pids(h, "kv/0")
	if len(before) != 2 {
		t.Fatalf("daemons running: %v, want painted and plain", before)
	}
	fixedAt, colourAt := modTime(t, filepath.Join(unitDir, "fixed.conf")), modTime(t, filepath.Join(unitDir, "colour.conf"))

	// A colour change: colour.conf rewritten, painted restarted, the rest
	// untouched.
	time.Sleep(10 * time.Millisecond) // a rewrite shows in the file's time
	w.setColour("blue")
	w.grant("kv", "kv/0")
	w.waitRevision("kv/0", w.target("kv"))
	if b, _ := os.ReadFile(filepath.Join(unitDir, "colour.conf")); string(b) != "colour=blue\n" {
		t.Errorf("colour.conf holds %q after the change", b)
	}
	if got := modTime(t, filepath.Join(unitDir, "fixed.conf")); !got.Equal(fixedAt) {
		t.Errorf("fixed.conf was rewritten")
	}
	if got := modTime(t, filepath.Join(unitDir, "colour.conf")); got.Equal(colourAt) {
		t.Errorf("colour.conf was not rewritten")
	}
	after := pids(h, "kv/0")
	if after["plain"] != before["plain"] || after["painted"] == before["painted"] || after["painted"] == 0 {
		t.Errorf("daemons %v after the colour change, were %v: want painted alone restarted", after, before)
	}

	// An option no claim uses: no task runs, no daemon restarts.
	colourAt = modTime(t, filepath.Join(unitDir, "colour.conf"))
	if _, err := w.op.SetConfig(w.env.Ctx, &pb.SetConfigRequest{Service: "kv", Set: map[string]string{"other": "y"}}); err != nil {
		t.Fatal(err)
	}
	w.grant("kv", "kv/0")
	w.waitRevision("kv/0", w.target("kv"))
	if got := pids(h, "kv/0"); got["plain"] != after["plain"] || got["painted"] != after["painted"] {
		t.Errorf("daemons %v after an unused option changed, were %v", got, after)
	}
	if got := modTime(t, filepath.Join(unitDir, "colour.conf")); !got.Equal(colourAt) {
		t.Errorf("colour.conf was rewritten for an unused option")
	}

	// Dying: stop, then the daemons and files go, then remove.
	w.destroyed("kv/0")
	lines := w.lines("kv/0", "probe.log")
	tail := lines[max(len(lines)-2, 0):]
	if want := []string{"stop file=yes daemon=yes", "remove file=no daemon=yes"}; !equal(tail, want) {
		t.Errorf("a dying unit's order: %q, want %q", tail, want)
	}
	if got := pids(h, "kv/0"); len(got) != 0 {
		t.Errorf("daemons still running after the unit died: %v", got)
	}
	for _, name := range []string{"colour.conf", "fixed.conf"} {
		if _, err := os.Stat(filepath.Join(unitDir, name)); !os.IsNotExist(err) {
			t.Errorf("%s still there after the unit died (%v)", name, err)
		}
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestHostTaskFailurePutsTheUnitInError: a package claim on a host that
// manages no packages fails its task, which is retried, then puts the
// unit in error with the task named, before install runs.
func TestHostTaskFailurePutsTheUnitInError(t *testing.T) {
	w := newWorld(t)
	w.withHost()
	w.deploy("name: kv\nprovides:\n  server: kv\nhost:\n  packages:\n    - {name: tinypkg}\n", 1, "server")
	w.start("kv/0")
	inError := func() bool {
		s := w.agentStatus("kv/0")
		return s != nil && s.Agent == "error" && s.State == "hook-error" &&
			strings.Contains(s.AgentMessage, "install tinypkg") && strings.Contains(s.AgentMessage, "manages no packages")
	}
	w.waitFor("kv/0 in error, the package task named", inError)
	if got := w.hooks("kv/0"); len(got) != 0 {
		t.Errorf("hooks ran before the host's packages were in place: %q", got)
	}
}
