package manifest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lifelinehq/lifeline/internal/manifest/plugin/plugintest"
	"github.com/lifelinehq/lifeline/internal/testing/controllertest"
)

// TestPlanPlugins plans resources of the example dns-record and file
// plugins: their schemas checked before anything runs, their state
// asked for once their config is known, their state seen by dependents.
func TestPlanPlugins(t *testing.T) {
	dir := t.TempDir()
	if err := plugintest.Build(filepath.Join(dir, "plugins"), plugintest.DNSRecord, plugintest.File); err != nil {
		t.Fatal(err)
	}
	zone := filepath.Join(dir, "zone")
	if err := os.Mkdir(zone, 0o755); err != nil {
		t.Fatal(err)
	}
	motd := filepath.Join(dir, "motd")
	if err := os.WriteFile(motd, []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	src := `
name: shop
resources:
  motd:
    type: exec:./plugins/file
    config: {path: "` + motd + `", content: "hello\n", mode: "0644"}
  dns:
    type: exec:./plugins/dns-record
    dependencies: {motd: motd}
    plugs: {zone: {path: ./zone, writable: true}}
    config: {name: www, address: "10.0.0.{{ motd.state.content | length }}"}
  later:
    type: exec:./plugins/dns-record
    dependencies: {dns: dns}
    plugs: {zone: {path: ./zone, writable: true}}
    config: {name: "{{ dns.state.name }}2", address: 10.0.0.9}
`
	m, err := Parse([]byte(src), dir)
	if err != nil {
		t.Fatal(err)
	}
	e := controllertest.New(t, controllertest.Options{})
	p, err := Plan(context.Background(), m, e.Operator(), Options{Plugins: &ExecPlugins{}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"motd VALID",
		"dns STALE; create: create www → 10.0.0.6 (ttl 300)",
		"later STALE; the plugin's actions are known after apply: its configuration reads a dependency's state",
	}
	if got := describe(p); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("plan:\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	if c, ch, _ := p.Summary(); c != 2 || ch != 0 {
		t.Errorf("Summary = %d to create, %d to change; want 2, 0", c, ch)
	}

	// A config the plugin's schema refuses is listed before any state
	// action runs, with the others.
	bad := strings.Replace(src, `name: www,`, `name: "Not A Label", ttl: 0,`, 1)
	m, err = Parse([]byte(bad), dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Check(context.Background(), m, Options{Plugins: &ExecPlugins{}})
	got := strings.Join(problems(t, err), "\n")
	for _, w := range []string{"resources.dns.config.name: ", "resources.dns.config.ttl: minimum"} {
		if !strings.Contains(got, w) {
			t.Errorf("Check problems:\n%s\nwant %q among them", got, w)
		}
	}
}
