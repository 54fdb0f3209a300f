package main

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

func TestRenderLines(t *testing.T) {
	st := sampleStatus()
	st.Services[1].Units[1].Revision, st.Services[1].Units[1].TargetRevision = 3, 4
	var buf bytes.Buffer
	if err := renderStatus(&buf, st, formatLine); err != nil {
		t.Fatal(err)
	}
	want := `app/0 service=app machine=0 principal=- life=alive agent=idle state=running workload=active rev=0 target=0 message=""
logger/0 service=logger machine=0 principal=app/0 life=alive agent=idle state=running workload=active rev=0 target=0 message=""
kv/0 service=kv machine=0 principal=- life=alive agent=idle state=running workload=active rev=3 target=4 message="serving"
kv/1 service=kv machine=2 principal=- life=dying agent=executing state=running workload=active rev=0 target=0 message="waiting for relation 0 (kv:cluster)"
`
	if buf.String() != want {
		t.Errorf("--format line =\n%s\nwant\n%s", buf.String(), want)
	}
}

func TestStatusDocumentSinceAndEndpoints(t *testing.T) {
	st := sampleStatus()
	at := time.Date(2026, 12, 2, 17, 45, 31, 0, time.UTC).UnixNano()
	st.Machines[1].Since = at
	st.Services[1].Units[1].AgentSince, st.Services[1].Units[1].WorkloadSince = at, at+int64(time.Second)
	st.Relations[1].Endpoints = []*pb.RelationEndpointStatus{{Service: "kv", Endpoint: "cluster", Role: "peer", Interface: "kv-peers"}}
	var buf bytes.Buffer
	if err := renderStatus(&buf, st, formatJSON); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		SchemaVersion int `json:"schema_version"`
		Machines      map[string]struct {
			Since string `json:"since"`
		} `json:"machines"`
		Services map[string]struct {
			Units map[string]struct {
				AgentSince    string `json:"agent_since"`
				WorkloadSince string `json:"workload_since"`
			} `json:"units"`
		} `json:"services"`
		Relations []struct {
			Key       string           `json:"key"`
			Endpoints []map[string]any `json:"endpoints"`
		} `json:"relations"`
	}
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	kv0 := doc.Services["kv"].Units["kv/0"]
	if doc.SchemaVersion != 1 || doc.Machines["0"].Since != "2026-12-02T17:45:31Z" || doc.Machines["2"].Since != "" ||
		kv0.AgentSince != "2026-12-02T17:45:31Z" || kv0.WorkloadSince != "2026-12-02T17:45:32Z" {
		t.Errorf("document = %+v, want schema_version 1 and the since times of machine 0 and kv/0", doc)
	}
	for _, r := range doc.Relations {
		want := "[]"
		if r.Key == "kv:cluster" {
			want = `[{"endpoint":"cluster","interface":"kv-peers","role":"peer","service":"kv"}]`
		}
		if got, _ := json.Marshal(r.Endpoints); string(got) != want {
			t.Errorf("relation %s endpoints = %s, want %s", r.Key, got, want)
		}
	}
}

func TestRenderJSONPath(t *testing.T) {
	for _, tt := range []struct {
		expr, want string
	}{
		{"$.services.kv.units['kv/0'].message", "serving\n"},
		{"{.services.kv.units['kv/0'].machine}", "0\n"},
		{".machines['2'].waiting_for", `["unit kv/1"]` + "\n"},
		{"$.relations[*].key", "kv:cluster\napp:juju-info logger:host\n"},
		{"$.schema_version", "1\n"},
		// A wildcard over an object visits its keys in order: machines
		// by number, units by name.
		{"$.machines.*.agent", "started\nstarted\npending\n"},
		{"$.services.*.units.*.machine", "0\n0\n2\n0\n"},
		{"$..units['kv/0'].message", "serving\n"},
	} {
		x, err := parseJSONPath(tt.expr)
		if err != nil {
			t.Fatalf("parseJSONPath(%q): %v", tt.expr, err)
		}
		var buf bytes.Buffer
		if err := renderJSONPath(&buf, sampleStatus(), x); err != nil {
			t.Fatalf("jsonpath %s: %v", tt.expr, err)
		}
		if buf.String() != tt.want {
			t.Errorf("jsonpath %s = %q, want %q", tt.expr, buf.String(), tt.want)
		}
	}
	x, _ := parseJSONPath("$.services.nope")
	if err := renderJSONPath(&bytes.Buffer{}, sampleStatus(), x); err == nil || !strings.Contains(err.Error(), "selects nothing") {
		t.Errorf("jsonpath selecting nothing: %v, want an error saying so", err)
	}
	for _, bad := range []string{"", "{}", "$.[", "$..[?(@.x =="} {
		if _, err := parseJSONPath(bad); err == nil {
			t.Errorf("parseJSONPath(%q) took it, want an error", bad)
		}
	}
}

func TestUseColor(t *testing.T) {
	for _, tt := range []struct {
		flag bool
		env  string
		tty  bool
		want bool
	}{
		{false, "", true, true},
		{true, "", true, false},
		{false, "1", true, false},
		{false, "anything", true, false},
		{false, "", false, false}, // never when stdout is no terminal
		{true, "1", false, false},
	} {
		if got := useColor(tt.flag, tt.env, tt.tty); got != tt.want {
			t.Errorf("useColor(--no-color %v, NO_COLOR %q, terminal %v) = %v, want %v", tt.flag, tt.env, tt.tty, got, tt.want)
		}
	}
}

// escapes matches the colour escape sequences.
var escapes = regexp.MustCompile("\x1b\\[[0-9;]*m")

func TestColouredTabular(t *testing.T) {
	st := sampleStatus()
	st.Services[1].Units[0].Agent = "error"
	st.Services[2].Units[0].Workload = "blocked"
	var plain, coloured bytes.Buffer
	if err := renderStatusWith(&plain, st, formatTabular, statusLook{}); err != nil {
		t.Fatal(err)
	}
	if err := renderStatusWith(&coloured, st, formatTabular, statusLook{color: true}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(plain.String(), "\x1b") {
		t.Errorf("the status without colour holds escapes:\n%q", plain.String())
	}
	// The columns line up as without colour: only the escapes differ.
	if got := escapes.ReplaceAllString(coloured.String(), ""); got != plain.String() {
		t.Errorf("coloured status without its escapes =\n%s\nwant the plain one\n%s", got, plain.String())
	}
	for _, want := range []string{colorRed + "error" + colorReset, colorYellow + "blocked" + colorReset,
		colorGreen + "idle" + colorReset, colorGreen + "active" + colorReset, colorGreen + "started" + colorReset} {
		if !strings.Contains(coloured.String(), want) {
			t.Errorf("coloured status lacks %q:\n%s", want, coloured.String())
		}
	}
}

func TestCutLine(t *testing.T) {
	for _, tt := range []struct {
		line  string
		width int
		want  string
	}{
		{"abcdef", 0, "abcdef"},
		{"abcdef", 6, "abcdef"},
		{"abcdef", 4, "abc…"},
		{colorRed + "abc" + colorReset + "def", 6, colorRed + "abc" + colorReset + "def"},
		{colorRed + "abc" + colorReset + "def", 4, colorRed + "abc" + colorReset + "…" + colorReset},
		{"héllo wörld", 5, "héll…"},
	} {
		if got := cutLine(tt.line, tt.width); got != tt.want {
			t.Errorf("cutLine(%q, %d) = %q, want %q", tt.line, tt.width, got, tt.want)
		}
	}
}

func TestStatusHeader(t *testing.T) {
	st := &pb.ModelStatus{Controllers: []*pb.ControllerStatus{{Id: "c-1", Addresses: []string{"10.0.0.1:17070", "10.0.0.2:17070"}}}}
	at := time.Date(2026, 12, 2, 17, 45, 31, 0, time.UTC).UnixNano()
	got := statusHeader("c-1", "1.2.3", at, st, "admin")
	if want := "Controller c-1 at 10.0.0.1:17070, version 1.2.3, model time 2026-12-02T17:45:31Z, user admin\n\n"; got != want {
		t.Errorf("statusHeader = %q, want %q", got, want)
	}
	if got := statusHeader("", "", 0, st, ""); got != "" {
		t.Errorf("statusHeader of nothing = %q, want none", got)
	}
}
