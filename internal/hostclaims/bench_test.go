package hostclaims

import (
	"fmt"
	"strings"
	"testing"

	"github.com/lifelinehq/lifeline/internal/charm"
)

// benchHost is the scale test's unit: three templated files and a daemon.
const benchHost = `
  ports: [8080/tcp]
  files:
    - {path: conf/a.conf, template: "port={{ config.port }}\nunit={{ unit_name }}\n"}
    - {path: conf/b.conf, template: "{% for i in range(20) %}line {{ i }} {{ config.port }}\n{% endfor %}"}
    - {path: conf/c.conf, content: "static\n"}
  daemons:
    - {name: server, command: [bin/server, --port, "{{ config.port }}"], env: {UNIT: "{{ unit_name }}"}}
`

func benchClaims(b *testing.B, unit string, port int64) *Claims {
	m, err := charm.ParseMetadata([]byte("name: kv\nhost: " + benchHost))
	if err != nil {
		b.Fatal(err)
	}
	f := facts
	f.Unit = unit
	f.UnitDir = "/var/lib/lifeline/units/" + strings.ReplaceAll(unit, "/", "-")
	c, err := Render(m.Host, map[string]any{"port": port}, f)
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// BenchmarkRender renders one unit's claims: the agent's cost per unit and
// pass before any task.
func BenchmarkRender(b *testing.B) {
	m, err := charm.ParseMetadata([]byte("name: kv\nhost: " + benchHost))
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := Render(m.Host, map[string]any{"port": int64(8080)}, facts); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDiffConfigChange diffs a unit's claims before and after a
// config change that rewrites its templated files and restarts its daemon.
func BenchmarkDiffConfigChange(b *testing.B) {
	old, new := benchClaims(b, "kv/0", 8080), benchClaims(b, "kv/0", 8081)
	for b.Loop() {
		Diff(old, new)
	}
}

// BenchmarkResolve10 resolves a machine of ten changed units, each
// conflicting with the next on a port.
func BenchmarkResolve10(b *testing.B) {
	var units []UnitRevisions
	for i := range 10 {
		name := fmt.Sprintf("u%d/0", i)
		cur := benchClaims(b, name, 8080)
		cur.Ports = ports(fmt.Sprintf("%d-%d/tcp", 9000+i, 9001+i))
		units = append(units, UnitRevisions{Unit: name, Order: int64(i), Current: cur, Changed: true, Previous: &Claims{Unit: name}})
	}
	for b.Loop() {
		Resolve(units)
	}
}
