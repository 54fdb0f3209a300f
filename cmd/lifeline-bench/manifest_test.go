package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/manifest"
)

// The generated manifest parses, has the services and relations asked
// for, the units spread over the services and each service on a machine in
// turn, and never relates a pair the same way twice.
func TestBenchManifest(t *testing.T) {
	m := manifestConfig{services: 5, relations: 12, units: 13, parallelism: 1}
	if err := m.validate(); err != nil {
		t.Fatal(err)
	}
	parsed, err := manifest.Parse([]byte(benchManifest("/charms/mf", m, []string{"3", "4"})), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	services, relations, units := 0, 0, int64(0)
	pairs := map[string]bool{}
	for name, r := range parsed.Resources {
		switch r.Type {
		case manifest.TypeService:
			services++
			units += r.Config["units"].(int64)
			want := map[bool]string{true: "3", false: "4"}[name == "svc000" || name == "svc002" || name == "svc004"]
			if r.Config["to"] != want {
				t.Errorf("%s is on machine %v, want %s", name, r.Config["to"], want)
			}
		case manifest.TypeRelation:
			relations++
			eps := r.Config["endpoints"].([]any)
			key := eps[0].(string) + " " + eps[1].(string)
			if pairs[key] || !strings.HasSuffix(key, ":p") || strings.Split(eps[0].(string), ":")[0] == strings.Split(eps[1].(string), ":")[0] {
				t.Errorf("relation %s: %s", name, key)
			}
			pairs[key] = true
		}
	}
	if services != 5 || relations != 12 || units != 13 {
		t.Errorf("%d services, %d relations, %d units; want 5, 12, 13", services, relations, units)
	}
	for _, bad := range []manifestConfig{{services: 1, parallelism: 1}, {services: 3, relations: 7, parallelism: 1}, {services: 3, units: -1, parallelism: 1}, {services: 3}} {
		if bad.validate() == nil {
			t.Errorf("%+v: want an error", bad)
		}
	}
}

// The manifest scenario end to end at small scale, with a real controller
// and agents: 6 services, 9 relations and 12 units on 3 machines applied
// by ctl apply from empty, planned VALID, planned again, destroyed.
func TestManifestScenario(t *testing.T) {
	res := runScenario(t, config{
		units: 1, machines: 3, related: 1, hooks: "process", scenario: "manifest",
		rawTime: time.Second, addConcurrency: 4, fleetGC: "agents", allowMemoryFS: true, timeout: 3 * time.Minute,
		manifest: manifestConfig{services: 6, relations: 9, units: 12, parallelism: 4},
	}, 4*time.Minute)
	r := res.Manifest
	if r == nil {
		t.Fatal("no manifest figures")
	}
	if r.Services != 6 || r.Relations != 9 || r.Units != 12 || len(r.PlanSeconds) != 3 {
		t.Errorf("figures %+v", r)
	}
	for name, v := range map[string]float64{
		"apply_seconds": r.ApplySeconds, "last_actions_seconds": r.LastActionsSeconds, "seconds_to_valid": r.SecondsToValid,
		"plan_seconds[0]": r.PlanSeconds[0], "seconds_to_destroyed": r.SecondsToDestroyed,
	} {
		if v <= 0 {
			t.Errorf("%s = %v, want more than 0", name, v)
		}
	}
	if r.SecondsToValid < r.ApplySeconds || r.LastActionsSeconds > r.ApplySeconds {
		t.Errorf("apply %.1f s, its last actions at %.1f s, VALID at %.1f s: out of order", r.ApplySeconds, r.LastActionsSeconds, r.SecondsToValid)
	}
	data, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Scenario string         `json:"scenario"`
		Manifest map[string]any `json:"manifest"`
	}
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	if out.Scenario != "manifest" || out.Manifest["seconds_to_valid"] == nil || out.Manifest["plan_seconds"] == nil {
		t.Errorf("JSON: %s", data)
	}
	var text strings.Builder
	res.print(&text)
	for _, line := range []string{"manifest: ctl apply from empty", "manifest: settled, whole manifest VALID", "manifest: ctl plan, converged"} {
		if !strings.Contains(text.String(), line) {
			t.Errorf("the summary has no line %q:\n%s", line, text.String())
		}
	}
}
