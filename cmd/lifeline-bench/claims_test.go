package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// The claims scenario end to end at small scale, with a real controller
// and agents: 20 units on 4 machines, each with 3 files and a daemon; the
// change rewrites one file a unit, prunes the rest and restarts no daemon.
func TestClaimsScenario(t *testing.T) {
	res := runScenario(t, config{
		units: 20, machines: 4, related: 1, hooks: "process", scenario: "claims", rolloutMaxParallel: "50%",
		rawTime: time.Second, addConcurrency: 4, fleetGC: "agents", allowMemoryFS: true,
	}, 4*time.Minute)
	r := res.Claims
	if r == nil {
		t.Fatal("no claims figures")
	}
	// Each unit's last job rewrote the one changed file (1 task run and
	// changed) and pruned the other 7 tasks of its two jobs.
	if r.UnitsWithJob != 20 || r.TasksRun != 20 || r.TasksChanged != 20 || r.TasksPruned != 7*20 {
		t.Errorf("last jobs: %d units, %d run, %d changed, %d pruned; want 20, 20, 20, 140", r.UnitsWithJob, r.TasksRun, r.TasksChanged, r.TasksPruned)
	}
	if r.DaemonsRunning != 20 || r.DaemonsRestarted != 0 {
		t.Errorf("daemons: %d running, %d restarted; want 20 running, none restarted", r.DaemonsRunning, r.DaemonsRestarted)
	}
	for name, v := range map[string]float64{
		"seconds_to_applied": r.SecondsToApplied, "seconds_to_rollout_done": r.SecondsToRolloutDone,
		"etcd_txns_per_unit": r.EtcdTxnsPerUnit, "host_reports_per_unit": r.ReportsPerUnit,
	} {
		if v <= 0 {
			t.Errorf("%s = %v, want more than 0", name, v)
		}
	}
	data, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Scenario string         `json:"scenario"`
		Claims   map[string]any `json:"claims"`
	}
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	if out.Scenario != "claims" {
		t.Errorf("scenario = %q", out.Scenario)
	}
	for _, k := range []string{"seconds_to_applied", "tasks_run", "tasks_pruned", "daemons_restarted"} {
		if _, ok := out.Claims[k]; !ok {
			t.Errorf("the JSON has no claims.%s", k)
		}
	}
	var text strings.Builder
	res.print(&text)
	for _, line := range []string{"claims: every unit applied", "claims: last jobs' tasks", "claims: daemons"} {
		if !strings.Contains(text.String(), line) {
			t.Errorf("the summary has no line %q:\n%s", line, text.String())
		}
	}
}
