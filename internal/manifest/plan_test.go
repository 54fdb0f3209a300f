package manifest

import (
	"context"
	"encoding/json"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/lifelinehq/lifeline/internal/testing/controllertest"
	"github.com/lifelinehq/lifeline/internal/testing/etcdtest"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

func TestMain(m *testing.M) { etcdtest.Main(m) }

// deployDemo deploys by hand what demo describes with replicas 2: db (kv,
// port 7070, 1 unit), web (app, port 8070, 2 units), logger, and the two
// relations.
func deployDemo(t *testing.T, e *controllertest.Env, op pb.OperatorServiceClient) {
	t.Helper()
	for _, d := range []struct {
		charm, service string
		units          int32
		config         map[string]string
	}{
		{"kv", "db", 1, map[string]string{"port": "7070"}},
		{"app", "web", 2, map[string]string{"port": "8070"}},
		{"logger", "logger", 0, nil},
	} {
		rec := e.Upload(op, filepath.Join(charmsDir, d.charm))
		if _, err := op.Deploy(e.Ctx, &pb.DeployRequest{Charm: rec.Name, Revision: rec.Revision, Service: d.service, NumUnits: d.units, Config: d.config}); err != nil {
			t.Fatalf("deploy %s: %v", d.service, err)
		}
	}
	for _, eps := range [][]string{{"web:db", "db:server"}, {"web", "logger"}} {
		if _, err := op.AddRelation(e.Ctx, &pb.AddRelationRequest{Endpoints: eps}); err != nil {
			t.Fatalf("add-relation %v: %v", eps, err)
		}
	}
}

// describe lists a plan's resources with their status and actions.
func describe(p *PlanResult) []string {
	var out []string
	for _, r := range p.Resources {
		line := r.Name + " " + string(r.Status)
		for _, a := range r.Actions {
			line += "; " + a.Describe()
		}
		out = append(out, line)
	}
	return out
}

// demoWeb is the demo with web's port templated from db's state and a
// variable.
var demoWeb = strings.Replace(demo, "port: \"{{ db.state.config.port + 1000 }}\"", "port: \"{{ db.state.config.port + offset }}\"", 1)

func TestPlan(t *testing.T) {
	e := controllertest.New(t, controllertest.Options{})
	op := e.Operator()
	m := parse(t, strings.Replace(demoWeb, "variables: {replicas: 2}", "variables: {replicas: 2, offset: 1000}", 1))
	ctx := context.Background()

	// From empty: everything is created; web's port is known from db's
	// planned configuration, the relations' ids are not.
	p, err := Plan(ctx, m, op, Options{})
	if err != nil {
		t.Fatal(err)
	}
	kv, app := m.Dir+"/kv", m.Dir+"/app"
	want := []string{
		"db STALE; create service db: charm " + kv + " (sha256 " + p.Inputs["charm/db"][:12] + "), 1 unit, config port=7070",
		"web STALE; create service web: charm " + app + " (sha256 " + p.Inputs["charm/web"][:12] + "), 2 units, config port=8070",
		"web-db STALE; add relation \"web:db\" \"db:server\"",
		"logger STALE; create service logger: charm " + m.Dir + "/logger (sha256 " + p.Inputs["charm/logger"][:12] + "), 0 units",
		"web-logger STALE; add relation \"web\" \"logger\"",
	}
	if got := describe(p); !reflect.DeepEqual(got, want) {
		t.Errorf("plan from empty:\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	if c, ch, d := p.Summary(); c != 5 || ch != 0 || d != 0 || !p.Changes() {
		t.Errorf("Summary = %d, %d, %d; want 5 to create", c, ch, d)
	}
	if p.Inputs["service/db"] != "absent" || p.ModelRevision == 0 {
		t.Errorf("inputs %v, model revision %d", p.Inputs, p.ModelRevision)
	}

	// Deployed by hand, the same: no changes.
	deployDemo(t, e, op)
	p, err = Plan(ctx, m, op, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range describe(p) {
		if !strings.HasSuffix(line, " VALID") {
			t.Errorf("after deploying the demo: %s, want VALID", line)
		}
	}
	if p.Changes() {
		t.Errorf("after deploying the demo the plan has changes")
	}
	db := p.Resources[0]
	if units := db.State["units"].([]any); len(units) != 1 || units[0].(map[string]any)["name"] != "db/0" {
		t.Errorf("db's state = %v", db.State)
	}

	// One variable changed: one action, web's port.
	p, err = Plan(ctx, m, op, Options{Vars: []map[string]any{{"offset": int64(1001)}}})
	if err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, r := range p.Resources {
		for _, a := range r.Actions {
			actions = append(actions, r.Name+": "+a.Describe())
		}
	}
	if want := []string{"web: set config of web: port: 8070 → 8071"}; !reflect.DeepEqual(actions, want) {
		t.Errorf("actions = %q, want %q", actions, want)
	}
	if c, ch, _ := p.Summary(); c != 0 || ch != 1 {
		t.Errorf("Summary = %d to create, %d to change; want 0 and 1", c, ch)
	}

	// db's port changed: db's config changes, and web's follows it.
	m2 := parse(t, strings.Replace(demoWeb, "config: {port: 7070}", "config: {port: 7071}", 1))
	p, err = Plan(ctx, m2, op, Options{Vars: []map[string]any{{"offset": int64(1000)}, {"replicas": int64(3)}}})
	if err != nil {
		t.Fatal(err)
	}
	want = []string{
		"db STALE; set config of db: port: 7070 → 7071",
		"web STALE; set config of web: port: 8070 → 8071; add 1 unit to web",
		"web-db VALID",
		"logger VALID",
		"web-logger VALID",
	}
	if got := describe(p); !reflect.DeepEqual(got, want) {
		t.Errorf("plan of db's port and 3 replicas:\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}

	// Another charm: a refresh of kv's own, a switch to another's.
	m4 := parse(t, strings.Replace(strings.Replace(demoWeb, "charm: kv", "charm: ../../cmd/ctl/testdata/kv", 1), "charm: logger", "charm: app", 1))
	p, err = Plan(ctx, m4, op, Options{Vars: []map[string]any{{"offset": int64(1000)}}})
	if err != nil {
		t.Fatal(err)
	}
	got := describe(p)
	if !strings.HasPrefix(got[0], "db STALE; refresh service db to charm ../../cmd/ctl/testdata/kv (sha256 ") {
		t.Errorf("db: %s, want a refresh", got[0])
	}
	if !strings.HasPrefix(got[3], "logger STALE; switch service logger from charm logger to charm ../../examples/charms/app (sha256 ") {
		t.Errorf("logger: %s, want a switch", got[3])
	}

	// A template reading what only apply knows: unknown, and said so.
	m3 := parse(t, demo+`
  dns:
    type: service
    dependencies: {web: web}
    config:
      charm: kv
      units: 1
      config: {port: "{{ web.state.units | length }}"}
`)
	p, err = Plan(ctx, m3, op, Options{Vars: []map[string]any{{"replicas": int64(3)}}})
	if err != nil {
		t.Fatal(err)
	}
	last := p.Resources[len(p.Resources)-1]
	if got := last.Actions[0].Describe(); !strings.HasSuffix(got, "config port=(known after apply)") {
		t.Errorf("dns: %s, want its port known after apply", got)
	}
	b, err := json.Marshal(p)
	if err != nil || !strings.Contains(string(b), `"port":{"known_after_apply":true}`) {
		t.Errorf("plan as JSON: %v\n%s", err, b)
	}
}

func TestPlanRefusesWhatTheModelMakesInvalid(t *testing.T) {
	e := controllertest.New(t, controllertest.Options{})
	op := e.Operator()
	deployDemo(t, e, op)
	// db's state gives text where kv's port wants an integer.
	m := parse(t, demo+`
  bad:
    type: service
    dependencies: {db: db}
    config:
      charm: kv
      config: {port: "{{ db.state.charm }}"}
`)
	_, err := Plan(context.Background(), m, op, Options{})
	wantProblems(t, "Plan", err, "resources.bad.config.config.port: want integer, got string")
}

// TestPlanCharmKnownFromADependency: a service whose charm's directory
// is templated from a dependency's state is read once the plan knows it;
// one that only apply would know is refused.
func TestPlanCharmKnownFromADependency(t *testing.T) {
	e := controllertest.New(t, controllertest.Options{})
	op := e.Operator()
	m := parse(t, demo+`
  copy:
    type: service
    dependencies: {db: db}
    config:
      charm: "{{ db.state.charm }}"
      config: {port: 9000, colour: red}
`)
	_, err := Plan(context.Background(), m, op, Options{})
	wantProblems(t, "Plan", err, "resources.copy.config.config.colour: is not allowed")

	m = parse(t, demo+`
  copy:
    type: service
    dependencies: {db: db}
    config: {charm: "{{ db.state.charm }}", config: {port: 9000}}
`)
	p, err := Plan(context.Background(), m, op, Options{})
	if err != nil {
		t.Fatal(err)
	}
	last := p.Resources[len(p.Resources)-1]
	if got := last.Actions[0].Describe(); !strings.HasPrefix(got, "create service copy: charm "+m.Dir+"/kv (sha256 ") {
		t.Errorf("copy: %s", got)
	}

	m = parse(t, demo+`
  copy:
    type: service
    dependencies: {db: db}
    config: {charm: "{{ db.state.revision }}"}
`)
	_, err = Plan(context.Background(), m, op, Options{})
	wantProblems(t, "Plan", err, "resources.copy.config.charm: the charm's directory may not depend on what only apply makes")
}
