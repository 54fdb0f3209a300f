package main

import (
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"
)

// The stream reader: events of several data lines, a keepalive between
// them, a line longer than the reader's buffer, and an end mid-event.
func TestSSEStream(t *testing.T) {
	long := strings.Repeat("x", 200<<10)
	in := "event: model\nid: 7\ndata: <tr>\ndata: " + long + "\n\n: keepalive\n\nevent: end\ndata: your session ended\n\nevent: model\nid: 9\ndata: cut"
	s := newSSEStream(io.NopCloser(strings.NewReader(in)))
	ev, err := s.next()
	if err != nil || ev.name != "model" || ev.id != 7 || string(ev.data) != "<tr>\n"+long {
		t.Fatalf("first event = %q %d (%d bytes), %v; want model 7 of two lines", ev.name, ev.id, len(ev.data), err)
	}
	ev, err = s.next()
	if err != nil || ev.name != "end" || string(ev.data) != "your session ended" {
		t.Fatalf("second event = %q %q, %v; want the end", ev.name, ev.data, err)
	}
	if ev, err = s.next(); err == nil {
		t.Fatalf("a cut event = %q %d, want an error", ev.name, ev.id)
	}
}

// The deploy scenario with the dashboard probe at small scale, with a
// real controller and agents: the harness logs in, follows the model
// page and times each change to it.
func TestDashboardProbe(t *testing.T) {
	res := runScenario(t, config{
		units: 6, machines: 2, related: 1, hooks: "none", scenario: "deploy", dashboardProbe: 3,
		rawTime: time.Second, addConcurrency: 2, fleetGC: "agents", allowMemoryFS: true,
	}, 3*time.Minute)
	d := res.Dashboard
	if d == nil {
		t.Fatal("no dashboard figures")
	}
	if d.Samples != 3 || d.ChangeToPageP50 <= 0 || d.ChangeToPageMax < d.ChangeToPageP50 || d.FirstEventSeconds <= 0 || d.PageBytes <= 0 {
		t.Errorf("dashboard figures = %+v, want 3 samples, each figure above 0", d)
	}
	data, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Dashboard map[string]any `json:"dashboard"`
	}
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"samples", "change_to_page_p50_s", "change_to_page_max_s", "first_event_seconds", "page_bytes"} {
		if _, ok := out.Dashboard[k]; !ok {
			t.Errorf("the JSON has no dashboard.%s", k)
		}
	}
	var text strings.Builder
	res.print(&text)
	if !strings.Contains(text.String(), "dashboard: a change to an open page") {
		t.Errorf("the summary has no dashboard line:\n%s", text.String())
	}
}
