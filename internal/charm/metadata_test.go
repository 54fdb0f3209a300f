package charm

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"google.golang.org/protobuf/proto"
)

// ep builds an endpoint for comparisons.
func ep(name, iface string, role pb.Role, scope pb.Scope, limit int32) *pb.Endpoint {
	return &pb.Endpoint{Name: name, Interface: iface, Role: role, Scope: scope, Limit: limit}
}

const (
	provider  = pb.Role_ROLE_PROVIDER
	requirer  = pb.Role_ROLE_REQUIRER
	peer      = pb.Role_ROLE_PEER
	global    = pb.Scope_SCOPE_GLOBAL
	container = pb.Scope_SCOPE_CONTAINER
)

var info = ep(InfoEndpoint, InfoInterface, provider, global, 0)

func endpointsString(eps []*pb.Endpoint) string {
	var parts []string
	for _, e := range eps {
		parts = append(parts, fmt.Sprintf("%s(%s %s %s %d)", e.Name, e.Interface, e.Role, e.Scope, e.Limit))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func sameEndpoints(a, b []*pb.Endpoint) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !proto.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

func TestParseMetadata(t *testing.T) {
	tests := []struct {
		name        string
		yaml        string
		subordinate bool
		endpoints   []*pb.Endpoint
	}{
		{
			name:      "minimal",
			yaml:      "name: kv\n",
			endpoints: []*pb.Endpoint{info},
		},
		{
			name: "short and long forms",
			yaml: `
name: app
summary: an app
description: it serves
provides:
  website: http
requires:
  db: {interface: sql, limit: 1}
  cache:
    interface: kv
    scope: global
peers:
  ring: app-ring
`,
			endpoints: []*pb.Endpoint{
				ep("cache", "kv", requirer, global, 0),
				ep("db", "sql", requirer, global, 1),
				info,
				ep("ring", "app-ring", peer, global, 0),
				ep("website", "http", provider, global, 0),
			},
		},
		{
			name: "unknown keys and nulls tolerated",
			yaml: `
name: app
maintainer: someone
series: [focal, jammy]
summary:
subordinate: ~
provides:
  web:
    interface: http
    optional: true
    limit:
requires:
`,
			endpoints: []*pb.Endpoint{info, ep("web", "http", provider, global, 0)},
		},
		{
			name: "declared lifeline-info with a limit",
			yaml: "name: app\nprovides:\n  lifeline-info: {interface: lifeline-info, limit: 3}\n",
			endpoints: []*pb.Endpoint{
				ep(InfoAlias, InfoAlias, provider, global, 3),
			},
		},
		{
			name: "declared juju-info with a limit",
			yaml: "name: app\nprovides:\n  juju-info: {interface: juju-info, limit: 3}\n",
			endpoints: []*pb.Endpoint{
				ep(InfoEndpoint, InfoInterface, provider, global, 3),
			},
		},
		{
			// As Juju's subordinates often name their requirer.
			name:        "subordinate requires juju-info",
			yaml:        "name: papertrail\nsubordinate: true\nrequires:\n  juju-info: {interface: juju-info, scope: container}\n",
			subordinate: true,
			endpoints: []*pb.Endpoint{
				ep(InfoEndpoint, InfoInterface, requirer, container, 0),
			},
		},
		{
			name: "subordinate has no implicit endpoint",
			yaml: `
name: logger
subordinate: true
requires:
  host: {interface: lifeline-info, scope: container}
peers:
  mesh: {interface: logger-mesh, scope: container}
`,
			subordinate: true,
			endpoints: []*pb.Endpoint{
				ep("host", "lifeline-info", requirer, container, 0),
				ep("mesh", "logger-mesh", peer, container, 0),
			},
		},
		{
			name:      "principal may offer a container-scoped provider",
			yaml:      "name: app\nprovides:\n  logs: {interface: log, scope: container}\n",
			endpoints: []*pb.Endpoint{info, ep("logs", "log", provider, container, 0)},
		},
		{
			name:      "aliases",
			yaml:      "name: app\nprovides:\n  a: &web {interface: http, limit: 2}\n  b: *web\n",
			endpoints: []*pb.Endpoint{ep("a", "http", provider, global, 2), ep("b", "http", provider, global, 2), info},
		},
		{
			name:      "limit in hex",
			yaml:      "name: app\nprovides:\n  a: {interface: http, limit: 0x10}\n",
			endpoints: []*pb.Endpoint{ep("a", "http", provider, global, 16), info},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := ParseMetadata([]byte(tt.yaml))
			if err != nil {
				t.Fatalf("ParseMetadata(%q) = %v, want no error", tt.yaml, err)
			}
			if m.Subordinate != tt.subordinate {
				t.Errorf("ParseMetadata(%q).Subordinate = %v, want %v", tt.yaml, m.Subordinate, tt.subordinate)
			}
			if got := m.Endpoints(); !sameEndpoints(got, tt.endpoints) {
				t.Errorf("ParseMetadata(%q).Endpoints() = %s, want %s", tt.yaml, endpointsString(got), endpointsString(tt.endpoints))
			}
		})
	}
}

func TestParseMetadataErrors(t *testing.T) {
	many := func(section string, n int) string {
		var b strings.Builder
		b.WriteString("name: app\n" + section + ":\n")
		for i := range n {
			fmt.Fprintf(&b, "  e%d: i%d\n", i, i)
		}
		return b.String()
	}
	tests := []struct {
		name string
		yaml string
		want string
	}{
		{"empty", "", "metadata.yaml: file is empty"},
		{"null", "~\n", "metadata.yaml: file is empty"},
		{"malformed", "name: [kv\n", "metadata.yaml: invalid yaml: line 1: did not find expected ',' or ']'"},
		{"not a mapping", "- name\n", "metadata.yaml: want a mapping, got a list"},
		{"tabs", "name: kv\n\tsummary: x\n", "metadata.yaml: invalid yaml: line 2: found a tab character that violates indentation"},
		{"name missing", "summary: x\n", "metadata.yaml: name: is missing"},
		{"name invalid", "name: Key Value\n", `metadata.yaml: name: "Key Value" is invalid: use lowercase letters, digits and hyphens, starting with a letter`},
		{"name unit-like", "name: kv-2\n", `metadata.yaml: name: "kv-2" is invalid: use lowercase letters, digits and hyphens, starting with a letter`},
		{"name a list", "name: [kv]\n", "metadata.yaml: name: want text, got a list"},
		{"summary a mapping", "name: kv\nsummary: {a: b}\n", "metadata.yaml: summary: want text, got a mapping"},
		{"subordinate a string", "name: kv\nsubordinate: \"yes please\"\n", `metadata.yaml: subordinate: want true or false, got "yes please"`},
		{"subordinate yes", "name: kv\nsubordinate: yes\n", `metadata.yaml: subordinate: want true or false, got "yes"`},
		{"subordinate quoted", "name: kv\nsubordinate: \"true\"\n", `metadata.yaml: subordinate: want true or false, got "true"`},
		{"duplicate key", "name: kv\nname: kv2\n", "metadata.yaml: name: key appears twice"},
		{"merge key", "base: &b {name: kv}\n<<: *b\n", "metadata.yaml: merge keys (<<) are not supported"},
		{"provides a list", "name: kv\nprovides: [db]\n", "metadata.yaml: provides: want a mapping, got a list"},
		{"endpoint name invalid", "name: kv\nprovides:\n  Web: http\n", `metadata.yaml: provides: endpoint name "Web" is invalid: use lowercase letters, digits, hyphens and underscores, starting with a letter`},
		{"interface invalid", "name: kv\nrequires:\n  db: Bad Name\n", `metadata.yaml: requires.db: interface "Bad Name" is invalid: use lowercase letters, digits, hyphens and underscores, starting with a letter`},
		{"interface invalid long form", "name: kv\nrequires:\n  db: {interface: 'a.b'}\n", `metadata.yaml: requires.db: interface "a.b" is invalid: use lowercase letters, digits, hyphens and underscores, starting with a letter`},
		{"interface missing", "name: kv\nrequires:\n  db: {scope: global}\n", "metadata.yaml: requires.db: interface is missing"},
		{"endpoint null", "name: kv\nrequires:\n  db:\n", "metadata.yaml: requires.db: interface is missing"},
		{"endpoint a list", "name: kv\nrequires:\n  db: [sql]\n", "metadata.yaml: requires.db: want a mapping, got a list"},
		{"interface a mapping", "name: kv\nrequires:\n  db: {interface: {a: b}}\n", "metadata.yaml: requires.db.interface: want text, got a mapping"},
		{"scope invalid", "name: kv\nrequires:\n  db: {interface: sql, scope: machine}\n", `metadata.yaml: requires.db: scope "machine" is invalid: want global or container`},
		{"limit negative", "name: kv\nrequires:\n  db: {interface: sql, limit: -1}\n", "metadata.yaml: requires.db: limit -1 is invalid: want 0 (no limit) or more"},
		{"limit huge", "name: kv\nrequires:\n  db: {interface: sql, limit: 4294967296}\n", "metadata.yaml: requires.db: limit 4294967296 is invalid: want 0 (no limit) or more"},
		{"limit a string", "name: kv\nrequires:\n  db: {interface: sql, limit: \"1\"}\n", `metadata.yaml: requires.db.limit: want an integer, got "1"`},
		{"limit a float", "name: kv\nrequires:\n  db: {interface: sql, limit: 1.5}\n", `metadata.yaml: requires.db.limit: want an integer, got "1.5"`},
		{"duplicate endpoint", "name: kv\nprovides:\n  db: sql\nrequires:\n  db: sql\n", `metadata.yaml: requires.db: endpoint "db" is also declared in provides`},
		{"duplicate endpoint in section", "name: kv\nprovides:\n  db: sql\n  db: pg\n", "metadata.yaml: provides.db: key appears twice"},
		{"lifeline-info wrong interface", "name: kv\nprovides:\n  lifeline-info: http\n", "metadata.yaml: provides.lifeline-info: is reserved: it must have interface juju-info (or lifeline-info) and global scope"},
		{"lifeline-info container", "name: kv\nprovides:\n  lifeline-info: {interface: lifeline-info, scope: container}\n", "metadata.yaml: provides.lifeline-info: is reserved: it must have interface juju-info (or lifeline-info) and global scope"},
		{"juju-info wrong interface", "name: kv\nprovides:\n  juju-info: http\n", "metadata.yaml: provides.juju-info: is reserved: it must have interface juju-info (or lifeline-info) and global scope"},
		{"juju-info and lifeline-info", "name: kv\nprovides:\n  juju-info: juju-info\n  lifeline-info: lifeline-info\n", "metadata.yaml: provides.lifeline-info: is the same endpoint as provides.juju-info: declare one of them"},
		{"juju-info required", "name: kv\nrequires:\n  juju-info: juju-info\n", "metadata.yaml: requires.juju-info: is reserved for the provider endpoint every principal charm has"},
		{"lifeline-info required", "name: kv\nrequires:\n  lifeline-info: lifeline-info\n", "metadata.yaml: requires.lifeline-info: is reserved for the provider endpoint every principal charm has"},
		{"lifeline-info peer", "name: kv\npeers:\n  lifeline-info: lifeline-info\n", "metadata.yaml: peers.lifeline-info: is reserved for the provider endpoint every principal charm has"},
		{"too many endpoints", many("requires", 32), "metadata.yaml: 33 endpoints (counting the implicit juju-info): at most 32"},
		{"far too many endpoints", many("provides", 1000), "metadata.yaml: more than 32 endpoints"},
		{"too many peers", many("peers", 9), "metadata.yaml: peers: 9 endpoints: at most 8"},
		{"subordinate without container requires", "name: lg\nsubordinate: true\nrequires:\n  host: lifeline-info\n", "metadata.yaml: subordinate: a subordinate charm needs a requires endpoint with scope: container"},
		{"subordinate with container provides only", "name: lg\nsubordinate: true\nprovides:\n  host: {interface: x, scope: container}\n", "metadata.yaml: subordinate: a subordinate charm needs a requires endpoint with scope: container"},
		{"principal container peer", "name: kv\npeers:\n  ring: {interface: ring, scope: container}\n", "metadata.yaml: peers.ring: container scope is only for subordinate charms"},
		{"too big", "name: kv\ndescription: " + strings.Repeat("x", maxYAMLSize) + "\n", "metadata.yaml: file is over the 1 MiB limit"},
		{"non-scalar key", "name: kv\nprovides:\n  ? [a]\n  : b\n", "metadata.yaml: provides: want plain keys, got a list"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := ParseMetadata([]byte(tt.yaml))
			if err == nil {
				t.Fatalf("ParseMetadata(%.80q) = %+v, want error %q", tt.yaml, m, tt.want)
			}
			if err.Error() != tt.want {
				t.Errorf("ParseMetadata(%.80q) = %q, want %q", tt.yaml, err, tt.want)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("ParseMetadata(%.80q) = %v, want an error matching ErrInvalid", tt.yaml, err)
			}
		})
	}
}

func TestEndpointLimits(t *testing.T) {
	// 31 declared endpoints and the implicit one make 32: allowed. A
	// subordinate has no implicit endpoint, so 32 declared are allowed.
	var b strings.Builder
	b.WriteString("name: app\nrequires:\n")
	for i := range 31 {
		fmt.Fprintf(&b, "  e%d: i%d\n", i, i)
	}
	m, err := ParseMetadata([]byte(b.String()))
	if err != nil {
		t.Fatalf("ParseMetadata(31 requires) = %v, want no error", err)
	}
	if got := len(m.Endpoints()); got != MaxEndpoints {
		t.Errorf("len(Endpoints()) = %d, want %d", got, MaxEndpoints)
	}
	b.Reset()
	b.WriteString("name: app\nsubordinate: true\nrequires:\n  host: {interface: lifeline-info, scope: container}\n")
	for i := range 31 {
		fmt.Fprintf(&b, "  e%d: i%d\n", i, i)
	}
	if _, err := ParseMetadata([]byte(b.String())); err != nil {
		t.Errorf("ParseMetadata(subordinate with 32 requires) = %v, want no error", err)
	}
}
