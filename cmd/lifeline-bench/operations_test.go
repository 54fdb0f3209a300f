package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// The operations scenario end to end at small scale, with a real
// controller and agents: every figure is there, every task of the no-op
// operation done, every task of the sleeping one running, then paused.
func TestOperationsScenario(t *testing.T) {
	res := runScenario(t, config{
		units: 20, machines: 4, related: 1, hooks: "none", scenario: "operations",
		rawTime: time.Second, addConcurrency: 4, fleetGC: "agents", allowMemoryFS: true,
	}, 3*time.Minute)
	o := res.Operations
	if o == nil {
		t.Fatal("no operations figures")
	}
	if o.Tasks != 20 || o.TasksDone != 20 || o.TasksFailed != 0 {
		t.Errorf("noop: %d tasks, %d done, %d failed; want 20 done", o.Tasks, o.TasksDone, o.TasksFailed)
	}
	if o.PausePaused != 20 {
		t.Errorf("sleep: %d paused, want 20", o.PausePaused)
	}
	if o.PauseRunning != 20 || o.PauseProcesses != 4 {
		t.Errorf("sleep: %d running, %d processes when paused; want 20 and 4", o.PauseRunning, o.PauseProcesses)
	}
	for name, v := range map[string]float64{
		"seconds_to_done": o.SecondsToDone, "tasks_per_second": o.TasksPerSecond, "ratio_to_ceiling": o.RatioToCeiling,
		"ceiling_tasks_per_second": o.CeilingTasksPerSecond, "pause_seconds_to_running": o.PauseSecondsToRunning,
		"pause_seconds_to_settled": o.PauseSecondsToSettled, "pause_etcd_txns_per_task": o.PauseEtcdTxnsPerTask,
	} {
		if v <= 0 {
			t.Errorf("%s = %v, want more than 0", name, v)
		}
	}
	// Made, started and finished: fewestTxnsPerTask at least.
	if o.EtcdTxnsPerTask < fewestTxnsPerTask {
		t.Errorf("etcd_txns_per_task = %.2f, want %.3f or more", o.EtcdTxnsPerTask, fewestTxnsPerTask)
	}
	data, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Scenario   string         `json:"scenario"`
		Operations map[string]any `json:"operations"`
	}
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	if out.Scenario != "operations" {
		t.Errorf("scenario = %q", out.Scenario)
	}
	for _, k := range []string{"seconds_to_done", "ratio_to_ceiling", "etcd_txns_per_task", "pause_seconds_to_settled", "pause_tasks_running"} {
		if _, ok := out.Operations[k]; !ok {
			t.Errorf("the JSON has no operations.%s", k)
		}
	}
	var text strings.Builder
	res.print(&text)
	for _, line := range []string{"operation: every task ended", "operation: ratio to ceiling", "pause-all: settled"} {
		if !strings.Contains(text.String(), line) {
			t.Errorf("the summary has no line %q:\n%s", line, text.String())
		}
	}
}
