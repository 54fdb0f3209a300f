package manifest

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// charmsDir holds the demo charms the tests' manifests name.
const charmsDir = "../../examples/charms"

// demo is a shop of the demo charms without a plugin: kv, app with its port
// templated, the relation and the logger.
const demo = `
name: shop
variables: {replicas: 2}
resources:
  db:
    type: service
    config:
      charm: kv
      units: 1
      config: {port: 7070}
  web:
    type: service
    dependencies: {db: db}
    config:
      charm: app
      units: "{{ replicas }}"
      config:
        port: "{{ db.state.config.port + 1000 }}"
  web-db:
    type: relation
    config: {endpoints: ["web:db", "db:server"]}
  logger:
    type: service
    config: {charm: logger, units: 0}
  web-logger:
    type: relation
    dependencies: {web: web, logger: logger}
    config: {endpoints: ["web", "logger"]}
`

func parse(t *testing.T, src string) *Manifest {
	t.Helper()
	m, err := Parse([]byte(src), charmsDir)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return m
}

// problems returns the list of an *Errors, failing otherwise.
func problems(t *testing.T, err error) []string {
	t.Helper()
	var e *Errors
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T), want *Errors", err, err)
	}
	return e.List
}

// wantProblems checks that the problems are exactly want, each found as a
// substring, in order.
func wantProblems(t *testing.T, what string, err error, want ...string) {
	t.Helper()
	got := problems(t, err)
	if len(got) != len(want) {
		t.Fatalf("%s: problems\n  %s\nwant %d:\n  %s", what, strings.Join(got, "\n  "), len(want), strings.Join(want, "\n  "))
	}
	for i := range want {
		if !strings.Contains(got[i], want[i]) {
			t.Errorf("%s: problem %d = %q, want it to say %q", what, i, got[i], want[i])
		}
	}
}

func TestParseDemo(t *testing.T) {
	m := parse(t, demo)
	if m.Name != "shop" || !reflect.DeepEqual(m.Names, []string{"db", "web", "web-db", "logger", "web-logger"}) {
		t.Fatalf("Parse = name %q, resources %v", m.Name, m.Names)
	}
	if got := m.Variables["replicas"]; got != int64(2) {
		t.Errorf("replicas = %#v, want int64 2", got)
	}
	web := m.Resources["web"]
	if web.Line != 11 || web.Type != TypeService || web.Dependencies["db"] != "db" {
		t.Errorf("web = %+v", web)
	}
	if len(m.Digest) != 64 {
		t.Errorf("digest %q", m.Digest)
	}
	order, err := m.Order()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"db", "web", "web-db", "logger", "web-logger"}; !reflect.DeepEqual(order, want) {
		t.Errorf("Order = %v, want %v", order, want)
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, src string
		want      []string
	}{
		{"not a mapping", "- a", []string{"a manifest is a mapping"}},
		{"invalid yaml", "name: [", []string{"invalid yaml"}},
		{"unknown keys, each with its line", `
name: shop
resorces: {}
resources:
  db:
    tpye: service
    type: service
`, []string{`line 3: unknown key "resorces"`, `line 6: resources.db: unknown key "tpye"`}},
		{"name missing", "resources: {}", []string{"name is required"}},
		{"bad names", `
name: Shop
variables: {1x: 2}
resources:
  Web_1: {type: service}
  ok: {type: nosuch}
  dep:
    type: machine
    dependencies: {a-b: ok, gone: nowhere}
`, []string{
			`line 2: name: "Shop" is not a valid name`,
			`line 3: variables: "1x" is not a valid variable name`,
			`line 5: resources: "Web_1" is not a valid resource name`,
			`line 6: resources.ok.type: unknown type "nosuch"`,
			`line 9: resources.dep.dependencies: "a-b" is not a valid local name`,
			`line 7: resources.dep.dependencies.gone: no resource "nowhere"`,
		}},
		{"type missing and config not a mapping", `
name: shop
resources:
  a: {config: [1]}
`, []string{`resources.a.config: want a mapping`, `resources.a: type is required`}},
		{"plugs", `
name: shop
resources:
  a: {type: machine, plugs: {zone: {path: /tmp}}}
  b: {type: "exec:./p", plugs: {zone: {writable: yes, mode: 1}}}
`, []string{`line 4: resources.a.plugs: only a plugin's resource`, `line 5: resources.b.plugs.zone.writable: want true or false`,
			`line 5: resources.b.plugs.zone: unknown key "mode"`, `line 5: resources.b.plugs.zone: path is required`}},
		{"dependency shadowing a variable", `
name: shop
variables: {db: 1}
resources:
  db: {type: machine}
  web: {type: machine, dependencies: {db: db}}
`, []string{`resources.web.dependencies.db: the local name is also a variable's`}},
	}
	for _, tt := range tests {
		_, err := Parse([]byte(tt.src), ".")
		if err == nil {
			t.Errorf("%s: Parse succeeded, want %v", tt.name, tt.want)
			continue
		}
		wantProblems(t, tt.name, err, tt.want...)
	}
}

func TestParseBounds(t *testing.T) {
	if _, err := Parse(make([]byte, MaxFileSize+1), "."); err == nil || !strings.Contains(err.Error(), "over the 4 MiB limit") {
		t.Errorf("Parse of a file too large = %v", err)
	}
	var b strings.Builder
	b.WriteString("name: big\nresources:\n")
	for i := range MaxResources + 1 {
		b.WriteString("  m" + strconv.Itoa(i) + ": {type: machine}\n")
	}
	if _, err := Parse([]byte(b.String()), "."); err == nil || !strings.Contains(err.Error(), "over the limit of 10000") {
		t.Errorf("Parse of too many resources = %v", err)
	}
	bomb := "name: x\nvariables:\n  a: &a [1,1,1,1,1,1,1,1,1,1]\n  b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\n  c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\n  d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\n  e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\n  f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]\n  g: [*f,*f,*f,*f,*f,*f,*f,*f,*f,*f]\n"
	if _, err := Parse([]byte(bomb), "."); err == nil || !strings.Contains(err.Error(), "YAML nodes") {
		t.Errorf("Parse of an alias bomb = %v", err)
	}
}

func TestCycles(t *testing.T) {
	m := parse(t, `
name: shop
resources:
  a: {type: machine, dependencies: {x: b}}
  b: {type: machine, dependencies: {x: c}}
  c: {type: machine, dependencies: {x: a}}
  d: {type: machine, dependencies: {self: d}}
  e: {type: machine, dependencies: {x: a}}
`)
	_, err := m.Order()
	wantProblems(t, "cycles", err, "dependency cycle: a → b → c → a", "dependency cycle: d → d")
	_, err = Check(context.Background(), m, Options{})
	wantProblems(t, "Check", err, "dependency cycle: a → b → c → a", "dependency cycle: d → d")
}

func TestRenderTypesAndUnknowns(t *testing.T) {
	ctx := Context{
		Vars: map[string]any{"replicas": int64(3), "zone": "eu", "ratio": 1.5, "on": true},
		Deps: map[string]Dep{
			"db":  {Name: "db", Type: "service", Known: true, State: map[string]any{"config": map[string]any{"port": int64(7070)}, "units": []any{map[string]any{"address": "10.0.0.1"}}}},
			"new": {Name: "web", Type: "service"},
		},
	}
	config := map[string]any{
		"units":    "{{ replicas }}",
		"ratio":    "{{ ratio }}",
		"on":       "{{ on }}",
		"text":     "zone {{ zone }}",
		"port":     "{{ db.state.config.port }}",
		"addr":     "http://{{ db.state.units[0].address }}:{{ db.state.config.port }}",
		"name":     "{{ new.name }}-{{ new.type }}",
		"later":    "{{ new.state.units[0].address }}",
		"laterMix": "http://{{ new.state.x }}/",
		"loop":     "{% for u in new.state.units %}{{ u }}{% endfor %}",
		"list":     []any{"{{ replicas * 2 }}", int64(7)},
		"plain":    "no template",
		"nested":   map[string]any{"deep": "{{ zone | upper }}"},
	}
	got, errs := Render(config, ctx, "resources.x.config")
	if len(errs) > 0 {
		t.Fatalf("Render: %v", errs)
	}
	want := map[string]any{
		"units": int64(3), "ratio": 1.5, "on": true, "text": "zone eu", "port": int64(7070),
		"addr": "http://10.0.0.1:7070", "name": "web-service",
		"later": Unknown{}, "laterMix": Unknown{}, "loop": Unknown{},
		"list": []any{int64(6), int64(7)}, "plain": "no template",
		"nested": map[string]any{"deep": "EU"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Render =\n%#v\nwant\n%#v", got, want)
	}
	if _, ok := config["units"].(string); !ok {
		t.Errorf("Render changed its input")
	}
}

func TestRenderErrors(t *testing.T) {
	config := map[string]any{
		"a": "{{ nosuch }}",
		"b": "{{ 1 + }}",
		"c": map[string]any{"d": "{% include 'x' %}"},
	}
	_, errs := Render(config, Context{Vars: map[string]any{}}, "resources.x.config")
	if len(errs) != 3 {
		t.Fatalf("Render errors = %v, want 3", errs)
	}
	for i, prefix := range []string{"resources.x.config.a: render", "resources.x.config.b: parse", "resources.x.config.c.d: parse"} {
		if !strings.HasPrefix(errs[i], prefix) {
			t.Errorf("error %d = %q, want it to begin %q", i, errs[i], prefix)
		}
	}
}

func TestCheckListsEverySchemaError(t *testing.T) {
	m := parse(t, `
name: shop
variables: {word: many}
resources:
  db:
    type: service
    config:
      charm: kv
      units: "{{ word }}"
      config: {port: "seven", colour: red}
      extra: 1
  web:
    type: service
    dependencies: {db: db}
    config:
      charm: app
      config: {port: "{{ db.state.config.port }}"}
  nocharm:
    type: service
    config: {charm: ./no/such/charm}
  rel:
    type: relation
    config: {endpoints: ["web:nosuch", "db:server"]}
  rel2:
    type: relation
    config: {endpoints: ["web"]}
  m:
    type: machine
    config: {count: 0}
  log:
    type: service
    config: {charm: logger, units: 2}
  p:
    type: exec:./plugins/x
`)
	_, err := Check(context.Background(), m, Options{})
	wantProblems(t, "Check", err,
		`resources.db.config.config.colour: is not allowed`,
		`resources.db.config.config.port: want integer, got string`,
		`resources.db.config.extra: is not allowed`,
		`resources.db.config.units: want integer, got string`,
		`resources.nocharm.config.charm: `,
		`resources.rel2.config.endpoints: minItems`,
		`resources.m.config.count: minimum`,
		`resources.log.config.units: charm logger is a subordinate`,
		`resources.p.type: plugin types are not available here`,
		`resources.rel.config.endpoints[0]: charm app has no endpoint "nosuch"`,
	)
}

func TestCheckDemo(t *testing.T) {
	m := parse(t, demo)
	c, err := Check(context.Background(), m, Options{Vars: []map[string]any{{"replicas": int64(3)}}})
	if err != nil {
		t.Fatal(err)
	}
	if c.Vars["replicas"] != int64(3) {
		t.Errorf("vars = %v, want replicas 3", c.Vars)
	}
	kv := c.Charms["db"]
	if kv == nil || kv.Charm.Meta.Name != "kv" || len(kv.Digest) != 64 {
		t.Fatalf("db's charm = %+v", kv)
	}
	if c.Charms["web"].Path != filepath.Join(charmsDir, "app") {
		t.Errorf("web's charm path = %s", c.Charms["web"].Path)
	}
	// A variable given beside the file must be a valid name.
	if _, err := Check(context.Background(), m, Options{Vars: []map[string]any{{"bad-name": 1}}}); err == nil {
		t.Errorf("Check with a variable named bad-name succeeded")
	}
}

func TestVars(t *testing.T) {
	for _, tt := range []struct {
		arg  string
		k    string
		v    any
		fail bool
	}{
		{"n=3", "n", int64(3), false},
		{"s=text", "s", "text", false},
		{`q="3"`, "q", "3", false},
		{"b=true", "b", true, false},
		{"e=", "e", "", false},
		{"novalue", "", nil, true},
		{"bad-name=1", "", nil, true},
	} {
		k, v, err := ParseVar(tt.arg)
		if (err != nil) != tt.fail || (!tt.fail && (k != tt.k || !reflect.DeepEqual(v, tt.v))) {
			t.Errorf("ParseVar(%q) = %q, %#v, %v", tt.arg, k, v, err)
		}
	}
	vars, err := ParseVarFile([]byte("replicas: 4\nzone: eu\n"))
	if err != nil || vars["replicas"] != int64(4) || vars["zone"] != "eu" {
		t.Errorf("ParseVarFile = %v, %v", vars, err)
	}
	if _, err := ParseVarFile([]byte("bad-name: 1\n")); err == nil {
		t.Errorf("ParseVarFile of a bad name succeeded")
	}
}
