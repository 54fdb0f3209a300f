package hostclaims

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/charm"
)

var facts = Facts{Unit: "kv/0", Service: "kv", MachineID: "3", UnitDir: "/var/lib/lifeline/units/kv-0", MachineAddress: "10.0.0.3"}

// parseHost parses a host section as a charm's metadata.yaml would hold it.
func parseHost(t *testing.T, host string) *charm.HostClaims {
	t.Helper()
	m, err := charm.ParseMetadata([]byte("name: kv\nhost: " + host + "\n"))
	if err != nil {
		t.Fatalf("ParseMetadata(host: %s) = %v", host, err)
	}
	return m.Host
}

func TestRender(t *testing.T) {
	h := parseHost(t, `
  ports: [8080/tcp]
  files:
    - {path: conf/kv.conf, template: "port={{ config.port }} unit={{ unit_name }}\n", mode: "0600"}
    - {path: "/etc/kv/{{ service }}-{{ machine_id }}.conf", content: "{{ literal }}"}
  packages:
    - {name: nginx}
    - {name: kv-server, version: "{{ config.version }}"}
  daemons:
    - name: server
      command: [bin/kv, --listen, "{{ machine_address }}:{{ config.port }}", "{{ unit_dir }}"]
      env: {MODE: "{{ config.mode | default('fast') }}", PLAIN: "{x}"}
`)
	got, err := Render(h, map[string]any{"port": int64(9000), "version": "1.2.*"}, facts)
	if err != nil {
		t.Fatalf("Render = %v", err)
	}
	want := &Claims{
		Unit:  "kv/0",
		Ports: []charm.PortRange{{From: 8080, To: 8080, Protocol: "tcp"}},
		Files: []File{
			{Path: "/var/lib/lifeline/units/kv-0/conf/kv.conf", Content: []byte("port=9000 unit=kv/0\n"), Mode: 0o600},
			{Path: "/etc/kv/kv-3.conf", Content: []byte("{{ literal }}"), Mode: 0o644},
		},
		Packages: []Package{{Name: "nginx"}, {Name: "kv-server", Version: "1.2.*"}},
		Daemons: []Daemon{{
			Name:        "server",
			Command:     []string{"bin/kv", "--listen", "10.0.0.3:9000", "/var/lib/lifeline/units/kv-0"},
			Env:         map[string]string{"MODE": "fast", "PLAIN": "{x}"},
			StopTimeout: 10 * time.Second,
		}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Render = %+v, want %+v", got, want)
	}
	if got, err := Render(nil, nil, facts); err != nil || !reflect.DeepEqual(got, &Claims{Unit: "kv/0"}) {
		t.Errorf("Render(nil) = %+v, %v, want empty claims", got, err)
	}
}

func TestRenderErrors(t *testing.T) {
	tests := []struct {
		host   string
		config map[string]any
		want   string
	}{
		{`{files: [{path: "{{ config.dir }}/x", content: x}]}`, map[string]any{"dir": "../up"}, `host.files[0].path: path "../up/x" holds ".."`},
		{`{files: [{path: "{{ config.dir }}", content: x}]}`, map[string]any{"dir": ""}, `host.files[0].path: path is empty`},
		{`{files: [{path: "{{ config.nope }}", content: x}]}`, nil, "host.files[0].path: render: "},
		{`{files: [{path: a, template: "{{ nope }}"}]}`, nil, "host.files[0].template: render: "},
		{`{files: [{path: a, template: "{% for i in range(5000) %}{{ '0123456789abcdef' }}{% endfor %}"}]}`, nil, "host.files[0].template: renders to more than"},
		{`{files: [{path: "/x/{{ config.a }}", content: x}, {path: "/x/{{ config.b }}", content: x}]}`, map[string]any{"a": "1", "b": "1"}, "host.files[1].path: /x/1 is claimed twice"},
		{`{files: [{path: "{{ unit_dir }}/x", content: x}, {path: x, content: x}]}`, nil, "is claimed twice"},
		{`{packages: [{name: kv, version: "{{ config.v }}"}]}`, map[string]any{"v": "1 2"}, `host.packages[0].version: "1 2" is not a version pattern`},
		{`{daemons: [{name: s, command: ["{{ config.bin }}"]}]}`, map[string]any{"bin": ""}, "host.daemons[0].command[0]: the program is empty"},
		{`{daemons: [{name: s, command: [a, "{{ config.x }}"]}]}`, map[string]any{"x": strings.Repeat("x", charm.MaxDaemonValue+1)}, "host.daemons[0].command[1]: 4097 bytes"},
		{`{daemons: [{name: s, command: [a], env: {E: "{{ nope }}"}}]}`, nil, "host.daemons[0].env.E: render: "},
	}
	for _, tt := range tests {
		_, err := Render(parseHost(t, tt.host), tt.config, facts)
		if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("Render(%s) = %v, want a one-line ErrInvalid containing %q", tt.host, err, tt.want)
		}
	}
	bad := facts
	bad.UnitDir = "units/kv-0"
	if _, err := Render(parseHost(t, "{ports: [80/tcp]}"), nil, bad); !errors.Is(err, ErrInvalid) {
		t.Errorf("Render(relative unit dir) = %v, want ErrInvalid", err)
	}
}
