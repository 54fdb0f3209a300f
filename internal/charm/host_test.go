package charm

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

const hostYAML = `name: kv
host:
  ports: ["8080/tcp", "9000-9010/udp", 8080/udp]
  files:
    - {path: conf/kv.conf, template: "port={{ config.port }}\n", mode: "0640"}
    - {path: /etc/kv/motd, content: ""}
    - {path: "{{ unit_dir }}/x", content: x, mode: 755}
  packages:
    - {name: nginx}
    - {name: libc6, version: "2.36-*"}
    - {name: kv-server, version: "{{ config.version }}"}
  daemons:
    - name: server
      command: [bin/kv, --port, "{{ config.port }}"]
      env: {KV_MODE: fast, _X: ""}
      stop-timeout: 30s
    - {name: metrics, command: [bin/metrics]}
`

func TestParseHost(t *testing.T) {
	m, err := ParseMetadata([]byte(hostYAML))
	if err != nil {
		t.Fatalf("ParseMetadata = %v, want no error", err)
	}
	want := &HostClaims{
		Ports: []PortRange{{8080, 8080, TCP}, {9000, 9010, UDP}, {8080, 8080, UDP}},
		Files: []FileClaim{
			{Path: "conf/kv.conf", Content: "port={{ config.port }}\n", Template: true, Mode: 0o640},
			{Path: "/etc/kv/motd", Content: "", Mode: 0o644},
			{Path: "{{ unit_dir }}/x", Content: "x", Mode: 0o755},
		},
		Packages: []PackageClaim{{Name: "nginx"}, {Name: "libc6", Version: "2.36-*"}, {Name: "kv-server", Version: "{{ config.version }}"}},
		Daemons: []DaemonClaim{
			{Name: "server", Command: []string{"bin/kv", "--port", "{{ config.port }}"}, Env: map[string]string{"KV_MODE": "fast", "_X": ""}, StopTimeout: 30 * time.Second},
			{Name: "metrics", Command: []string{"bin/metrics"}, StopTimeout: DefaultStopTimeout},
		},
	}
	if !reflect.DeepEqual(m.Host, want) {
		t.Fatalf("ParseMetadata().Host = %+v, want %+v", m.Host, want)
	}
	if got := m.Host.Ports[1].String(); got != "9000-9010/udp" {
		t.Errorf("String() = %q, want 9000-9010/udp", got)
	}
	if m, err := ParseMetadata([]byte("name: kv\n")); err != nil || m.Host != nil {
		t.Errorf("ParseMetadata(no host) = %+v, %v, want no claims", m, err)
	}
}

func TestParseHostErrors(t *testing.T) {
	many := func(n int, item string) string {
		items := make([]string, n)
		for i := range items {
			items[i] = fmt.Sprintf(item, i)
		}
		return "[" + strings.Join(items, ", ") + "]"
	}
	tests := []struct {
		host string
		want string
	}{
		{"[]", "host: want a mapping, got a list"},
		{"{ports: 8080/tcp}", "host.ports: want a list"},
		{"{ports: [8080]}", `host.ports[0]: "8080" is invalid: want PORT/PROTOCOL`},
		{"{ports: [8080/sctp]}", `host.ports[0]: "8080/sctp" is invalid: protocol "sctp" is not tcp or udp`},
		{"{ports: [0/tcp]}", "ports are from 1 to 65535"},
		{"{ports: [65536/tcp]}", "ports are from 1 to 65535"},
		{"{ports: [10-9/tcp]}", "the range ends before it starts"},
		{"{ports: [8000-8100/tcp, 8080/tcp]}", "host.ports[1]: 8080/tcp overlaps 8000-8100/tcp"},
		{"{ports: " + many(65, "%d/tcp") + "}", "host.ports: 65 items: at most 64"},
		{"{files: [{content: x}]}", "host.files[0]: path is missing"},
		{"{files: [{path: a/../b, content: x}]}", `host.files[0].path: path "a/../b" is not clean`},
		{"{files: [{path: ../b, content: x}]}", `host.files[0].path: path "../b" holds ".."`},
		{"{files: [{path: /, content: x}]}", `names no file`},
		{"{files: [{path: a/, content: x}]}", `is not clean`},
		{"{files: [{path: a}]}", "host.files[0]: want exactly one of content and template"},
		{"{files: [{path: a, content: x, template: y}]}", "want exactly one of content and template"},
		{"{files: [{path: a, content: x, mode: rw}]}", `host.files[0].mode: want permission bits in octal like "0644", got "rw"`},
		{"{files: [{path: a, content: x, mode: \"01777\"}]}", "want permission bits in octal"},
		{"{files: [{path: a, content: x}, {path: a, template: y}]}", `host.files[1].path: "a" is claimed twice`},
		{"{files: [{path: a, content: " + strings.Repeat("x", MaxFileContent+1) + "}]}", "host.files[0].content: 65537 bytes: at most 65536"},
		{"{files: " + many(65, "{path: f%d, content: x}") + "}", "host.files: 65 items: at most 64"},
		{"{packages: [{version: '1'}]}", "host.packages[0]: name is missing"},
		{"{packages: [{name: Nginx}]}", `host.packages[0].name: "Nginx" is not a Debian package name`},
		{"{packages: [{name: a}]}", `"a" is not a Debian package name`},
		{"{packages: [{name: nginx, version: 1 2}]}", `host.packages[0].version: "1 2" is not a version pattern`},
		{"{packages: [{name: nginx}, {name: nginx}]}", `host.packages[1].name: "nginx" is claimed twice`},
		{"{packages: " + many(65, "{name: p%d}") + "}", "host.packages: 65 items"},
		{"{daemons: [{command: [a]}]}", "host.daemons[0]: name is missing"},
		{"{daemons: [{name: Server, command: [a]}]}", `host.daemons[0].name: "Server" is invalid`},
		{"{daemons: [{name: s}]}", "host.daemons[0]: command is missing"},
		{"{daemons: [{name: s, command: []}]}", "host.daemons[0]: command is missing"},
		{"{daemons: [{name: s, command: ['']}]}", "host.daemons[0].command: the program is empty"},
		{"{daemons: [{name: s, command: a}]}", "host.daemons[0].command: want a list"},
		{"{daemons: [{name: s, command: [[a]]}]}", "host.daemons[0].command[0]: want text, got a list"},
		{"{daemons: [{name: s, command: [a], env: {1X: a}}]}", `host.daemons[0].env: variable name "1X" is invalid`},
		{"{daemons: [{name: s, command: [a], env: {X: [a]}}]}", "host.daemons[0].env.X: want text"},
		{"{daemons: [{name: s, command: [a], stop-timeout: 6m}]}", `host.daemons[0].stop-timeout: "6m" is invalid`},
		{"{daemons: [{name: s, command: [a], stop-timeout: 0s}]}", `"0s" is invalid`},
		{"{daemons: [{name: s, command: [a], stop-timeout: 10}]}", `"10" is invalid`},
		{"{daemons: [{name: s, command: [a]}, {name: s, command: [b]}]}", `host.daemons[1].name: "s" is declared twice`},
		{"{daemons: " + many(17, "{name: d%d, command: [a]}") + "}", "host.daemons: 17 items: at most 16"},
	}
	for _, tt := range tests {
		_, err := ParseMetadata([]byte("name: kv\nhost: " + tt.host + "\n"))
		if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "metadata.yaml: host") {
			t.Errorf("ParseMetadata(host: %.80s) = %v, want an invalid-input error containing %q", tt.host, err, tt.want)
		}
		if err != nil && strings.Contains(err.Error(), "\n") {
			t.Errorf("ParseMetadata(host: %.80s) = %q, want one line", tt.host, err)
		}
	}
}

func TestPortOverlaps(t *testing.T) {
	tests := []struct {
		a, b string
		want bool
	}{
		{"8080/tcp", "8080/tcp", true},
		{"8080/tcp", "8080/udp", false},
		{"9000-9010/tcp", "9010/tcp", true},
		{"9000-9010/tcp", "9011-9020/tcp", false},
		{"1-65535/udp", "53/udp", true},
	}
	for _, tt := range tests {
		a, errA := ParsePort(tt.a)
		b, errB := ParsePort(tt.b)
		if errA != nil || errB != nil {
			t.Fatalf("ParsePort(%q, %q) = %v, %v", tt.a, tt.b, errA, errB)
		}
		if got := a.Overlaps(b); got != tt.want || b.Overlaps(a) != tt.want {
			t.Errorf("%s.Overlaps(%s) = %v, want %v", a, b, got, tt.want)
		}
	}
}

func TestHostSurvivesPacking(t *testing.T) {
	dir := writeFiles(t, map[string]string{"metadata.yaml": hostYAML})
	c, err := ReadDir(dir)
	if err != nil {
		t.Fatalf("ReadDir = %v", err)
	}
	var buf strings.Builder
	if _, err := Pack(dir, &buf); err != nil {
		t.Fatalf("Pack = %v", err)
	}
	a, _, err := ReadArchive(strings.NewReader(buf.String()), 0)
	if err != nil {
		t.Fatalf("ReadArchive = %v", err)
	}
	if !reflect.DeepEqual(a.Meta.Host, c.Meta.Host) || c.Meta.Host == nil {
		t.Fatalf("ReadArchive().Meta.Host = %+v, want %+v", a.Meta.Host, c.Meta.Host)
	}
}
