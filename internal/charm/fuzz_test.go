package charm

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/lifelinehq/lifeline/internal/names"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"go.yaml.in/yaml/v3"
)

var metadataSeeds = []string{
	"",
	"name: kv\n",
	"name: kv\nsummary: s\ndescription: d\ntags: [a]\nprovides:\n  server: kv\n  metrics: {interface: prometheus, limit: 2}\nrequires:\n  backup: {interface: object-store, scope: global}\npeers:\n  cluster: kv-peer\n",
	"name: lg\nsubordinate: true\nrequires:\n  host: {interface: lifeline-info, scope: container}\npeers:\n  mesh: {interface: m, scope: container}\n",
	"name: app\nprovides:\n  lifeline-info: {interface: lifeline-info, limit: 3}\n",
	"name: app\nprovides:\n  a: &web {interface: http, limit: 2}\n  b: *web\n",
	"name: kv\nsubordinate: \"yes please\"\n",
	"name: kv\nprovides:\n  db: sql\nrequires:\n  db: sql\n",
	"name: kv\nrequires:\n  db: {interface: sql, scope: machine, limit: -1}\n",
	"name: kv\nrequires:\n  lifeline-info: lifeline-info\n",
	"name: kv\npeers:\n  ring: {interface: ring, scope: container}\n",
	"base: &b {name: kv}\n<<: *b\n",
	"name: [kv\n",
	"- name\n",
	"name: kv\nprovides:\n  ? [a]\n  : b\n",
	"a: &a [*a, *a]\nname: kv\n",
	"name: kv\nrequires:\n  db: {interface: sql, limit: 0x7fffffff}\n",
	hostYAML,
	"name: kv\nhost: {ports: [1-65535/udp], files: [{path: a, content: &c x}, {path: /b, template: *c, mode: 0600}]}\n",
	"name: kv\nhost: {daemons: [{name: s, command: [a, ''], env: {}, stop-timeout: 1ns}], packages: [{name: a0, version: ''}]}\n",
	"name: kv\nhost: {files: [{path: a/../b, content: x}], ports: [8080]}\n",
}

var configSeeds = []string{
	"",
	"options:\n",
	sampleConfig,
	"options:\n  port: {type: int, default: abc}\n",
	"options:\n  v: {default: 1.10}\n",
	"options:\n  r: {type: float, default: .nan}\n",
	"options:\n  d: {type: boolean, default: yes}\n",
	"options:\n  Port: {}\n",
	"options: [a]\n",
	"options:\n  a: {}\n  a: {}\n",
	"options:\n  s: {type: string, default: \"line\\nbreak \\u00e9\"}\n",
	"options:\n  i: {type: int, default: -9223372036854775808}\n  f: {type: float, default: -0.0}\n",
	"options: {port\n",
}

var keyValueSeeds = []string{
	"",
	"port=8080",
	"a=\x00b=x=y\x00c==",
	"tls.cert_file=/etc/x\x00max-conns=3",
	"port",
	"=8080",
	"Port=1",
	"a=1\x00a=2",
	"a..b=1",
	"a-=1",
	"é=1",
}

func FuzzParseMetadata(f *testing.F) {
	for _, s := range metadataSeeds {
		f.Add([]byte(s))
	}
	for _, dir := range []string{"testdata/kv", "testdata/logger"} {
		if b, err := os.ReadFile(dir + "/metadata.yaml"); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseMetadata(data)
		if err != nil {
			checkInputError(t, "ParseMetadata", err, "metadata.yaml: ")
			return
		}
		eps := m.Endpoints()
		checkEndpoints(t, m, eps)
		// Rendering the metadata and parsing it again gives the same
		// endpoints.
		again, err := ParseMetadata(renderMetadata(t, m))
		if err != nil {
			t.Fatalf("ParseMetadata(render(%q)) = %v, want no error", data, err)
		}
		if got := again.Endpoints(); !sameEndpoints(got, eps) || again.Name != m.Name || again.Subordinate != m.Subordinate {
			t.Fatalf("ParseMetadata(render(%q)).Endpoints() = %s, want %s", data, endpointsString(got), endpointsString(eps))
		}
		if !reflect.DeepEqual(again.Host, m.Host) {
			t.Fatalf("ParseMetadata(render(%q)).Host = %+v, want %+v", data, again.Host, m.Host)
		}
	})
}

// checkEndpoints checks what every valid charm's endpoints satisfy, the
// rules state applies when a service is added among them.
func checkEndpoints(t *testing.T, m *Metadata, eps []*pb.Endpoint) {
	t.Helper()
	if !names.ValidService(m.Name) {
		t.Fatalf("ParseMetadata accepted name %q", m.Name)
	}
	if len(eps) > MaxEndpoints {
		t.Fatalf("Endpoints() = %d endpoints, want at most %d", len(eps), MaxEndpoints)
	}
	peers, containerRequirer, info := 0, false, false
	for i, e := range eps {
		if i > 0 && eps[i-1].Name >= e.Name {
			t.Fatalf("Endpoints() = %s, want sorted unique names", endpointsString(eps))
		}
		if !names.ValidEndpoint(e.Name) || !names.ValidEndpoint(e.Interface) || e.Limit < 0 {
			t.Fatalf("Endpoints() holds %s", endpointsString([]*pb.Endpoint{e}))
		}
		if e.Scope != pb.Scope_SCOPE_GLOBAL && e.Scope != pb.Scope_SCOPE_CONTAINER {
			t.Fatalf("Endpoints() holds scope %v", e.Scope)
		}
		switch e.Role {
		case pb.Role_ROLE_PEER:
			peers++
			if e.Scope == pb.Scope_SCOPE_CONTAINER && !m.Subordinate {
				t.Fatalf("principal %s has container-scoped peer %s", m.Name, e.Name)
			}
		case pb.Role_ROLE_REQUIRER:
			containerRequirer = containerRequirer || e.Scope == pb.Scope_SCOPE_CONTAINER
		case pb.Role_ROLE_PROVIDER:
		default:
			t.Fatalf("Endpoints() holds role %v", e.Role)
		}
		if IsInfoName(e.Name) && !m.Subordinate {
			info = true
			if e.Role != pb.Role_ROLE_PROVIDER || !IsInfoName(e.Interface) || e.Scope != pb.Scope_SCOPE_GLOBAL {
				t.Fatalf("Endpoints() holds %s", endpointsString([]*pb.Endpoint{e}))
			}
		}
	}
	if peers > MaxPeers {
		t.Fatalf("Endpoints() has %d peers, want at most %d", peers, MaxPeers)
	}
	if !m.Subordinate && !info {
		t.Fatalf("principal %s has no %s endpoint", m.Name, InfoEndpoint)
	}
	if m.Subordinate && !containerRequirer {
		t.Fatalf("subordinate %s has no container-scoped requirer", m.Name)
	}
}

// renderMetadata writes m back as metadata.yaml.
func renderMetadata(t *testing.T, m *Metadata) []byte {
	t.Helper()
	doc := map[string]any{"name": m.Name, "summary": m.Summary, "description": m.Description, "subordinate": m.Subordinate}
	for key, rels := range map[string]map[string]Relation{"provides": m.Provides, "requires": m.Requires, "peers": m.Peers} {
		section := map[string]any{}
		for name, r := range rels {
			scope := "global"
			if r.Scope == pb.Scope_SCOPE_CONTAINER {
				scope = "container"
			}
			section[name] = map[string]any{"interface": r.Interface, "scope": scope, "limit": r.Limit}
		}
		doc[key] = section
	}
	if m.Host != nil {
		doc["host"] = renderHost(m.Host)
	}
	b, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatalf("render %+v: %v", m, err)
	}
	return b
}

// renderHost writes host claims back as metadata.yaml's host section.
func renderHost(h *HostClaims) map[string]any {
	var ports []string
	for _, p := range h.Ports {
		ports = append(ports, p.String())
	}
	var files []map[string]any
	for _, f := range h.Files {
		key := "content"
		if f.Template {
			key = "template"
		}
		files = append(files, map[string]any{"path": f.Path, key: f.Content, "mode": fmt.Sprintf("%04o", f.Mode)})
	}
	var pkgs []map[string]any
	for _, p := range h.Packages {
		pkgs = append(pkgs, map[string]any{"name": p.Name, "version": p.Version})
	}
	var daemons []map[string]any
	for _, d := range h.Daemons {
		dm := map[string]any{"name": d.Name, "command": d.Command, "stop-timeout": d.StopTimeout.String()}
		if d.Env != nil {
			dm["env"] = d.Env
		}
		daemons = append(daemons, dm)
	}
	return map[string]any{"ports": ports, "files": files, "packages": pkgs, "daemons": daemons}
}

func FuzzParseConfig(f *testing.F) {
	for _, s := range configSeeds {
		f.Add([]byte(s))
	}
	if b, err := os.ReadFile("testdata/kv/config.yaml"); err == nil {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data)
		if err != nil {
			checkInputError(t, "ParseConfig", err, "config.yaml: ")
			return
		}
		for name, opt := range c.Options {
			if !ValidOptionName(name) {
				t.Fatalf("ParseConfig accepted option name %q", name)
			}
			if toValue(opt.Default) == nil && opt.Default != nil {
				t.Fatalf("option %s has default %#v", name, opt.Default)
			}
		}
		defaults := c.Defaults()
		if err := c.Validate(defaults); err != nil {
			t.Fatalf("Validate(Defaults()) = %v, want no error", err)
		}
		// Every default survives FormatValue and ParseValues.
		text := map[string]string{}
		for name, v := range defaults {
			text[name] = FormatValue(v)
		}
		back, err := c.ParseValues(text)
		if err != nil || !sameValues(back, defaults) {
			t.Fatalf("ParseValues(%q) = %s, %v, want %s", text, valuesString(back), err, valuesString(defaults))
		}
		// Rendering the options and parsing them again gives the same.
		opts := map[string]any{}
		for name, opt := range c.Options {
			o := map[string]any{"type": opt.Type, "description": opt.Description}
			if opt.Default != nil {
				o["default"] = opt.Default
			}
			opts[name] = o
		}
		rendered, err := yaml.Marshal(map[string]any{"options": opts})
		if err != nil {
			t.Fatalf("render %+v: %v", c, err)
		}
		again, err := ParseConfig(rendered)
		if err != nil || !reflect.DeepEqual(again.Options, c.Options) {
			t.Fatalf("ParseConfig(render(%q)) = %+v, %v, want %+v", data, again, err, c)
		}
	})
}

func FuzzParseKeyValues(f *testing.F) {
	for _, s := range keyValueSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, joined string) {
		var args []string
		if joined != "" {
			args = strings.Split(joined, "\x00")
		}
		kv, err := ParseKeyValues(args)
		if err != nil {
			checkInputError(t, "ParseKeyValues", err, "argument ")
			return
		}
		if len(kv) != len(args) {
			t.Fatalf("ParseKeyValues(%q) = %d keys, want %d", args, len(kv), len(args))
		}
		var again []string
		for k, v := range kv {
			if !ValidOptionName(k) {
				t.Fatalf("ParseKeyValues(%q) accepted key %q", args, k)
			}
			again = append(again, k+"="+v)
		}
		sort.Strings(again)
		kv2, err := ParseKeyValues(again)
		if err != nil || !reflect.DeepEqual(kv2, kv) {
			t.Fatalf("ParseKeyValues(%q) = %v, %v, want %v", again, kv2, err, kv)
		}
	})
}

func FuzzReadArchive(f *testing.F) {
	for _, dir := range []string{"testdata/kv", "testdata/logger"} {
		var buf bytes.Buffer
		if _, err := Pack(dir, &buf); err != nil {
			f.Fatal(err)
		}
		f.Add(buf.Bytes())
	}
	f.Add([]byte{})
	f.Add([]byte("\x1f\x8b"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, raw, err := ReadArchive(bytes.NewReader(data), MaxSize)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("ReadArchive = %v, want an error matching ErrInvalid", err)
			}
			return
		}
		if c.Meta == nil || c.Config == nil || !bytes.Equal(raw, data) {
			t.Fatalf("ReadArchive = %+v, want a whole charm and the bytes read", c)
		}
		// What ReadArchive accepts, Extract accepts, and the result reads
		// as the same charm.
		dir := t.TempDir()
		if err := Extract(data, dir); err != nil {
			t.Fatalf("Extract(accepted archive) = %v", err)
		}
		got, err := ReadDir(dir)
		if err != nil || !sameCharm(got, c) {
			t.Fatalf("ReadDir(Extract(data)) = %+v, %v, want %+v", got, err, c)
		}
	})
}

// checkInputError checks that a parse error is a one-line invalid-input
// error with the expected prefix.
func checkInputError(t *testing.T, fn string, err error, prefix string) {
	t.Helper()
	msg := err.Error()
	if !errors.Is(err, ErrInvalid) || !strings.HasPrefix(msg, prefix) || strings.ContainsAny(msg, "\n\r") {
		t.Fatalf("%s error = %q, want one line starting %q, matching ErrInvalid", fn, msg, prefix)
	}
}

var actionsSeeds = []string{
	"",
	"keys: {safe: true}\n",
	backupActions,
	"a: {params: {n: {type: integer, minimum: 1, default: 20}}, required: [n], max-parallel: 2, pause-grace: 5s}\n",
	"a: {approvers: [alice, \"@admin\"], timeout: 10m}\n",
	"a: {params: {x: {type: strin}}}\n",
	"a: {params: {x: {$ref: \"file:///etc/passwd\"}}}\n",
	"a: {params: {o: {type: object, properties: {p: {default: [1, {q: 2}]}}}}, additionalProperties: false}\n",
	"a: &x {params: {n: {}}}\nb: *x\n",
	"A: {}\n",
	"a: {timeout: 0s}\n",
}

func FuzzParseActions(f *testing.F) {
	for _, s := range actionsSeeds {
		f.Add([]byte(s))
	}
	if b, err := os.ReadFile("testdata/kv/actions.yaml"); err == nil {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		a, err := ParseActions(data)
		if err != nil {
			checkInputError(t, "ParseActions", err, "actions.yaml: ")
			return
		}
		if len(a.Specs) > MaxActions {
			t.Fatalf("ParseActions accepted %d actions", len(a.Specs))
		}
		for name, s := range a.Specs {
			if !ValidActionName(name) {
				t.Fatalf("ParseActions accepted action name %q", name)
			}
			if s.Timeout <= 0 || s.PauseGrace < 0 || s.PauseGrace > s.Timeout || s.MaxParallel < 0 || s.schema == nil {
				t.Fatalf("ParseActions(%q)[%s] = %+v", data, name, s)
			}
			if s.Safe != (len(s.Approvers) == 0) {
				t.Fatalf("ParseActions(%q)[%s]: safe %v with approvers %q", data, name, s.Safe, s.Approvers)
			}
			b, err := CanonicalJSON(s.Schema)
			if err != nil || len(b) > MaxParamsSchemaSize {
				t.Fatalf("CanonicalJSON(schema of %s) = %d bytes, %v", name, len(b), err)
			}
			// With no parameters given, the defaults make the
			// parameters, or the action needs some: either way the
			// answer is one line, and what passes passes again as it is.
			params, err := a.Validate(name, nil)
			if err != nil {
				checkInputError(t, "Validate", err, name+": ")
				continue
			}
			again, err := a.Validate(name, params)
			if err != nil || !reflect.DeepEqual(again, params) {
				t.Fatalf("Validate(%s, Validate(%s, nil)) = %v, %v, want %v", name, name, again, err, params)
			}
		}
	})
}

func FuzzReadActionParams(f *testing.F) {
	f.Add([]byte(""), "")
	f.Add([]byte("name: a\ntarget: {keep: 2}\n"), "name=b\x00target.keep=5\x00n=3")
	f.Add([]byte(`{"a": [1, 2.50, null]}`), "a.b=true\x00s=\"3\"\x00t=a #b")
	f.Add([]byte("a: 1\n"), "a=1\x00a.b=2")
	f.Fuzz(func(t *testing.T, file []byte, joined string) {
		var args []string
		if joined != "" {
			args = strings.Split(joined, "\x00")
		}
		params, err := ReadActionParams(file, args)
		if err != nil {
			if !errors.Is(err, ErrInvalid) || strings.ContainsAny(err.Error(), "\n\r") {
				t.Fatalf("ReadActionParams error = %q, want one line matching ErrInvalid", err)
			}
			return
		}
		// What is read encodes, and reads back the same from its JSON.
		b, err := CanonicalJSON(params)
		if err != nil {
			t.Fatalf("CanonicalJSON(ReadActionParams(%q, %q)) = %v", file, args, err)
		}
		back, err := ReadActionParams(b, nil)
		if err != nil || !reflect.DeepEqual(back, params) {
			t.Fatalf("ReadActionParams(%s) = %#v, %v, want %#v", b, back, err, params)
		}
	})
}
