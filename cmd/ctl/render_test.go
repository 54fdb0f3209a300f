package main

import (
	"bytes"
	"encoding/json"
	"regexp"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// sampleStatus is a model with a bit of everything: principals with a
// subordinate, a dying unit, a dying machine, and machine 10 to sort after 2.
func sampleStatus() *pb.ModelStatus {
	return &pb.ModelStatus{
		Revision: 42,
		Machines: []*pb.MachineStatus{
			{Id: "10", Life: "alive", Agent: "pending"},
			{Id: "0", Life: "alive", Agent: "started", Instance: "i-0", Address: "127.0.1.1", Units: []string{"app/0", "kv/0"}},
			{Id: "2", Life: "dying", Agent: "started", WaitingFor: []string{"unit kv/1"}, Units: []string{"kv/1"}},
		},
		Services: []*pb.ServiceStatus{
			{Name: "logger", Charm: "logger", Revision: 1, Life: "alive", Status: "active", Subordinate: true, Units: []*pb.UnitStatus{
				{Name: "logger/0", Life: "alive", Machine: "0", Principal: "app/0", Agent: "idle", State: "running", Workload: "active"},
			}},
			{Name: "kv", Charm: "kv", Revision: 3, Life: "alive", Status: "active", Units: []*pb.UnitStatus{
				{Name: "kv/1", Life: "dying", Machine: "2", Agent: "executing", State: "running", Workload: "active",
					WaitingFor: []string{"relation 0 (kv:cluster)"}},
				{Name: "kv/0", Life: "alive", Machine: "0", Agent: "idle", State: "running", Workload: "active", Message: "serving"},
			}},
			{Name: "app", Charm: "app", Revision: 1, Life: "alive", Status: "active", Units: []*pb.UnitStatus{
				{Name: "app/0", Life: "alive", Machine: "0", Agent: "idle", State: "running", Workload: "active", Subordinates: []string{"logger/0"}},
			}},
		},
		Relations: []*pb.RelationStatus{
			{Id: 2, Key: "app:juju-info logger:host", Life: "alive", Scope: "container", Units: []string{"app/0", "logger/0"}},
			{Id: 0, Key: "kv:cluster", Life: "dying", Scope: "global", Units: []string{"kv/1"}, WaitingFor: []string{"unit kv/1 to depart"}},
		},
	}
}

func keysOf(t *testing.T, v any) []string {
	t.Helper()
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("%v is a %T, want an object", v, v)
	}
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// hasKeys checks that obj has every key in want.
func hasKeys(t *testing.T, what string, obj any, want ...string) map[string]any {
	t.Helper()
	m, ok := obj.(map[string]any)
	if !ok {
		t.Fatalf("%s is a %T, want an object", what, obj)
	}
	for _, k := range want {
		if _, ok := m[k]; !ok {
			t.Errorf("%s has keys %v, want %q among them", what, keysOf(t, obj), k)
		}
	}
	return m
}

// checkShape checks a decoded status document (JSON or YAML) against the
// shape ctl status promises.
func checkShape(t *testing.T, doc map[string]any) {
	t.Helper()
	// The promised keys, and the extras shown when present.
	var promised []string
	for _, k := range keysOf(t, doc) {
		if k != "controllers" && k != "revision" {
			promised = append(promised, k)
		}
	}
	if got := strings.Join(promised, ","); got != "machines,operations,relations,schema_version,services" {
		t.Errorf("top-level keys = %v, want machines,operations,relations,schema_version,services (and controllers, revision)", keysOf(t, doc))
	}
	if v, ok := doc["schema_version"].(float64); ok && v != 1 {
		t.Errorf("schema_version = %v, want 1", doc["schema_version"])
	} else if v, ok := doc["schema_version"].(int); ok && v != 1 {
		t.Errorf("schema_version = %v, want 1", doc["schema_version"])
	}
	machines := hasKeys(t, "machines", doc["machines"])
	for id, m := range machines {
		mm := hasKeys(t, "machine "+id, m, "life", "instance", "address", "agent", "units")
		if _, ok := mm["units"].([]any); !ok {
			t.Errorf("machine %s units = %#v, want a list", id, mm["units"])
		}
	}
	services := hasKeys(t, "services", doc["services"])
	for name, s := range services {
		sm := hasKeys(t, "service "+name, s, "charm", "revision", "life", "status", "units")
		for un, u := range hasKeys(t, name+" units", sm["units"]) {
			hasKeys(t, "unit "+un, u, "life", "machine", "principal", "agent", "state", "workload", "message")
		}
	}
	rels, ok := doc["relations"].([]any)
	if !ok {
		t.Fatalf("relations = %#v, want a list", doc["relations"])
	}
	for i, r := range rels {
		hasKeys(t, "relation "+strings.Repeat("#", i+1), r, "id", "key", "life", "scope", "endpoints")
	}
}

func TestRenderJSONShape(t *testing.T) {
	var buf bytes.Buffer
	if err := renderStatus(&buf, sampleStatus(), formatJSON); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatalf("status --format json is not JSON: %v\n%s", err, buf.String())
	}
	checkShape(t, doc)
	machines := doc["machines"].(map[string]any)
	if got := len(machines); got != 3 {
		t.Errorf("%d machines, want 3", got)
	}
	m2 := machines["2"].(map[string]any)
	if m2["life"] != "dying" || m2["waiting_for"] == nil {
		t.Errorf(`machine 2 = %v, want life "dying" and waiting_for`, m2)
	}
	kv := doc["services"].(map[string]any)["kv"].(map[string]any)
	if kv["revision"] != float64(3) || kv["charm"] != "kv" {
		t.Errorf("service kv = %v, want charm kv revision 3", kv)
	}
	sub := doc["services"].(map[string]any)["logger"].(map[string]any)["units"].(map[string]any)["logger/0"].(map[string]any)
	if sub["principal"] != "app/0" || sub["agent"] != "idle" || sub["state"] != "running" || sub["workload"] != "active" {
		t.Errorf("logger/0 = %v, want principal app/0, agent idle, state running, workload active", sub)
	}
	rels := doc["relations"].([]any)
	if first := rels[0].(map[string]any); first["id"] != float64(0) || first["scope"] != "global" || first["key"] != "kv:cluster" {
		t.Errorf("first relation = %v, want relation 0 kv:cluster, global (sorted by id)", first)
	}
}

func TestRenderYAMLShape(t *testing.T) {
	var buf bytes.Buffer
	if err := renderStatus(&buf, sampleStatus(), formatYAML); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatalf("status --format yaml is not YAML: %v\n%s", err, buf.String())
	}
	checkShape(t, doc)
	kv0 := doc["services"].(map[string]any)["kv"].(map[string]any)["units"].(map[string]any)["kv/0"].(map[string]any)
	if kv0["machine"] != "0" || kv0["message"] != "serving" {
		t.Errorf("kv/0 = %v, want machine \"0\" (a string) and message serving", kv0)
	}
}

func TestRenderEmptyModel(t *testing.T) {
	for _, format := range []string{formatJSON, formatYAML} {
		var buf bytes.Buffer
		if err := renderStatus(&buf, &pb.ModelStatus{}, format); err != nil {
			t.Fatal(err)
		}
		var doc map[string]any
		var err error
		if format == formatJSON {
			err = json.Unmarshal(buf.Bytes(), &doc)
		} else {
			err = yaml.Unmarshal(buf.Bytes(), &doc)
		}
		if err != nil {
			t.Fatalf("%s: %v", format, err)
		}
		checkShape(t, doc)
		if len(doc["machines"].(map[string]any))+len(doc["services"].(map[string]any))+len(doc["relations"].([]any)) != 0 {
			t.Errorf("%s of an empty model = %s, want empty collections", format, buf.String())
		}
	}
	var buf bytes.Buffer
	if err := renderStatus(&buf, &pb.ModelStatus{}, formatTabular); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "empty") {
		t.Errorf("tabular status of an empty model = %q, want it to say the model is empty", buf.String())
	}
}

func TestRenderTabular(t *testing.T) {
	var buf bytes.Buffer
	if err := renderStatus(&buf, sampleStatus(), formatTabular); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	lines := strings.Split(out, "\n")
	index := func(prefix string) int {
		for i, l := range lines {
			if strings.HasPrefix(l, prefix) {
				return i
			}
		}
		t.Errorf("tabular status has no line starting %q:\n%s", prefix, out)
		return -1
	}
	// Sections in order, machines sorted by number.
	order := []string{"Machine ", "0 ", "2 ", "10 ", "Service ", "app ", "kv ", "logger ", "Unit ", "app/0 ", "  logger/0 ", "kv/0 ", "kv/1 ", "Relation ", "0 ", "2 "}
	last := -1
	for _, p := range order {
		i := -1
		for j := last + 1; j < len(lines); j++ {
			if strings.HasPrefix(lines[j], p) {
				i = j
				break
			}
		}
		if i < 0 {
			t.Fatalf("tabular status: no line starting %q after line %d:\n%s", p, last, out)
		}
		last = i
	}
	if l := lines[index("kv/1 ")]; !strings.Contains(l, "waiting for relation 0 (kv:cluster)") {
		t.Errorf("dying unit's line = %q, want what it waits for", l)
	}
	if l := lines[index("2 ")]; !strings.Contains(l, "waiting for unit kv/1") {
		t.Errorf("dying machine's line = %q, want what it waits for", l)
	}
	if l := lines[index("logger ")]; !strings.Contains(l, "subordinate") {
		t.Errorf("subordinate service's line = %q, want it marked subordinate", l)
	}
	for i, l := range lines {
		if strings.TrimRight(l, " ") != l {
			t.Errorf("line %d %q ends in spaces", i, l)
		}
	}
}

func TestRenderConfig(t *testing.T) {
	resp := &pb.GetConfigResponse{
		Options: []*pb.ConfigOption{
			{Name: "port", Type: "int", Default: &pb.ConfigValue{Value: &pb.ConfigValue_IntValue{IntValue: 8080}}, Description: "the port\nto serve on"},
			{Name: "name", Type: "string", Description: "no default"},
			{Name: "greeting", Type: "string", Default: &pb.ConfigValue{Value: &pb.ConfigValue_StringValue{StringValue: ""}}},
		},
		Values: map[string]*pb.ConfigValue{
			"port":     {Value: &pb.ConfigValue_IntValue{IntValue: 9000}},
			"greeting": {Value: &pb.ConfigValue_StringValue{StringValue: ""}},
		},
	}
	var buf bytes.Buffer
	if err := renderConfig(&buf, "kv", resp); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"Option    Value  Type    Default  Description",
		`greeting  ""     string  ""`,
		"name      -      string  -        no default",
		"port      9000   int     8080     the port to serve on",
	}
	if got := strings.Split(strings.TrimRight(buf.String(), "\n"), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("renderConfig =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// Several controllers are shown, the leader marked; one is not (tabular),
// and JSON lists them whenever any registered.
func TestRenderControllers(t *testing.T) {
	st := sampleStatus()
	st.Controllers = []*pb.ControllerStatus{
		{Id: "c2", Addresses: []string{"10.0.0.2:17070"}},
		{Id: "c1", Addresses: []string{"10.0.0.1:17070"}, Leader: true},
	}
	var buf bytes.Buffer
	if err := renderStatus(&buf, st, formatTabular); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(buf.String(), "\n")
	if !strings.HasPrefix(lines[0], "Controller ") || !strings.HasPrefix(lines[1], "c1 ") || !strings.HasSuffix(lines[1], "leader") ||
		!strings.HasPrefix(lines[2], "c2 ") || !strings.HasSuffix(lines[2], "standby") {
		t.Errorf("tabular status does not start with the controllers, leader marked:\n%s", buf.String())
	}
	buf.Reset()
	if err := renderStatus(&buf, st, formatJSON); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Controllers map[string]struct {
			Addresses []string
			Leader    bool
		}
	}
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if c := doc.Controllers["c1"]; !c.Leader || len(c.Addresses) != 1 || doc.Controllers["c2"].Leader {
		t.Errorf("JSON controllers = %+v, want c1 leading", doc.Controllers)
	}

	st.Controllers = st.Controllers[:1]
	buf.Reset()
	if err := renderStatus(&buf, st, formatTabular); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "Controller") {
		t.Errorf("one controller is shown in the tabular status:\n%s", buf.String())
	}
}

func TestMergeControllers(t *testing.T) {
	live := []*pb.ControllerStatus{
		{Id: "c2", Addresses: []string{"10.0.0.2:17070"}},
		{Id: "c1", Addresses: []string{"10.0.0.1:17070"}, Leader: true},
		{Id: "c3", Addresses: []string{"10.0.0.3:17070", "10.0.0.2:17070"}},
	}
	got := mergeControllers([]string{"lb.example:17070", "10.0.0.2:17070"}, live)
	want := []string{"lb.example:17070", "10.0.0.2:17070", "10.0.0.1:17070", "10.0.0.3:17070"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("mergeControllers = %v, want %v", got, want)
	}
	have := []string{"10.0.0.1:17070", "10.0.0.2:17070", "10.0.0.3:17070"}
	if got := mergeControllers(have, live); strings.Join(got, " ") != strings.Join(have, " ") {
		t.Errorf("mergeControllers of known addresses = %v, want %v unchanged", got, have)
	}
}

// TestRenderAlarms shows the controller's alarms first in the tabular
// status, an empty model's too, and under "alarms" in JSON.
func TestRenderAlarms(t *testing.T) {
	const alarm = "etcd's database is full"
	for _, st := range []*pb.ModelStatus{sampleStatus(), {}} {
		st.Alarms = []string{alarm}
		var buf bytes.Buffer
		if err := renderStatus(&buf, st, formatTabular); err != nil {
			t.Fatal(err)
		}
		if first, _, _ := strings.Cut(buf.String(), "\n"); first != "Alarm: "+alarm {
			t.Errorf("tabular status starts with %q, want the alarm:\n%s", first, buf.String())
		}
		buf.Reset()
		if err := renderStatus(&buf, st, formatJSON); err != nil {
			t.Fatal(err)
		}
		var doc struct{ Alarms []string }
		if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
			t.Fatal(err)
		}
		if len(doc.Alarms) != 1 || doc.Alarms[0] != alarm {
			t.Errorf("JSON alarms = %q, want [%q]", doc.Alarms, alarm)
		}
	}
}

// TestRenderPorts: a unit's ports show in its line, in a Ports column
// there only when a unit has ports, and in JSON.
func TestRenderPorts(t *testing.T) {
	st := sampleStatus()
	var buf bytes.Buffer
	if err := renderStatus(&buf, st, formatTabular); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "Ports") {
		t.Errorf("tabular status of units without ports has a Ports column:\n%s", buf.String())
	}
	for _, s := range st.Services {
		for _, u := range s.Units {
			if u.Name == "kv/0" {
				u.Ports = []string{"8080/tcp", "9000-9010/udp"}
			}
		}
	}
	buf.Reset()
	if err := renderStatus(&buf, st, formatTabular); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if !regexp.MustCompile(`(?m)^Unit .* Address +Ports +Message$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^kv/0 .* 8080/tcp,9000-9010/udp`).MatchString(out) {
		t.Errorf("tabular status:\n%s\nwant a Ports column with kv/0's ports", out)
	}
	buf.Reset()
	if err := renderStatus(&buf, st, formatJSON); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), `"ports":["8080/tcp","9000-9010/udp"]`) && !strings.Contains(buf.String(), "\"ports\": [\n") {
		t.Errorf("JSON status:\n%s\nwant kv/0's ports", buf.String())
	}
}

// TestRenderVersion: a Version column, as Juju's, only when a service has
// a workload version (application-version-set); JSON carries it.
func TestRenderVersion(t *testing.T) {
	st := sampleStatus()
	var buf bytes.Buffer
	if err := renderStatus(&buf, st, formatTabular); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "Version") {
		t.Errorf("tabular status of services without versions has a Version column:\n%s", buf.String())
	}
	for _, s := range st.Services {
		if s.Name == "kv" {
			s.Version = "1.2.3"
		}
	}
	buf.Reset()
	if err := renderStatus(&buf, st, formatTabular); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if !regexp.MustCompile(`(?m)^Service +Version +Charm `).MatchString(out) || !regexp.MustCompile(`(?m)^kv +1\.2\.3 +kv `).MatchString(out) {
		t.Errorf("tabular status:\n%s\nwant a Version column with kv's 1.2.3", out)
	}
	buf.Reset()
	if err := renderStatus(&buf, st, formatJSON); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`"version": ?"1\.2\.3"`).MatchString(buf.String()) {
		t.Errorf("JSON status:\n%s\nwant kv's version", buf.String())
	}
}
