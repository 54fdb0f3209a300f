package main_test

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// TestAlertRulesNameLifelinesMetrics: every lifeline_ metric the shipped
// alerting rules (docs/prometheus/alerts.yml) name is one a controller
// serves, so that a renamed metric cannot leave an alert that never
// fires.
func TestAlertRulesNameLifelinesMetrics(t *testing.T) {
	rules, err := os.ReadFile("../../docs/prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var named []string
	for _, line := range strings.Split(string(rules), "\n") {
		if expr, ok := strings.CutPrefix(strings.TrimSpace(line), "expr:"); ok {
			named = append(named, regexp.MustCompile(`lifeline_[a-z_]+`).FindAllString(expr, -1)...)
		}
	}
	if len(named) < 5 {
		t.Fatalf("docs/prometheus/alerts.yml names %d lifeline_ metrics in its expressions, want one an alert at least", len(named))
	}
	dir := t.TempDir()
	metricsAddr, _ := startController(t, dir)
	// One call, for the gRPC metrics to have a series (they have none
	// of a method not called).
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := operatorOf(t, dir).Status(ctx, &pb.StatusRequest{}, waitForReady()...); err != nil {
		t.Fatal(err)
	}
	body := getMetrics(t, metricsAddr)
	for _, name := range named {
		if !strings.Contains(body, "\n# TYPE "+name+" ") {
			t.Errorf("an alert names %s, which /metrics does not serve", name)
		}
	}
	// The recording rules (docs/prometheus/rules.yml) read the standard
	// gRPC server metrics under the API metrics' former names.
	recording, err := os.ReadFile("../../docs/prometheus/rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	var read []string
	for _, line := range strings.Split(string(recording), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			read = append(read, regexp.MustCompile(`grpc_server_[a-z_]+`).FindAllString(line, -1)...)
		}
	}
	if len(read) < 4 {
		t.Errorf("docs/prometheus/rules.yml reads %d grpc_server_ metrics, want one a rule at least", len(read))
	}
	for _, name := range read {
		family := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_count"), "_sum")
		if !strings.Contains(body, "\n# TYPE "+family+" ") {
			t.Errorf("a recording rule reads %s, which /metrics does not serve", name)
		}
	}
	// The Grafana dashboard's panels read what the controller serves, but
	// for the machine agents' families (e2e TestMachineAgentMetrics).
	for _, name := range dashboardMetrics(t) {
		if strings.HasPrefix(name, "lifeline_hook_") || strings.HasPrefix(name, "lifeline_log_lines_") {
			continue
		}
		if !strings.Contains(body, "\n# TYPE "+name+" ") {
			t.Errorf("docs/grafana/lifeline.json reads %s, which /metrics does not serve", name)
		}
	}
	for _, want := range []string{
		`lifeline_units_by_agent_status{status="error"} 0`,
		`lifeline_units_by_workload_status{status="blocked"} 0`,
		"lifeline_machines_lost 0",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics of an empty model lacks %q", want)
		}
	}
}

// dashboardMetrics lists the metric families the Grafana dashboard's
// panels read.
func dashboardMetrics(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile("../../docs/grafana/lifeline.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("docs/grafana/lifeline.json: %v", err)
	}
	metric := regexp.MustCompile(`\b(lifeline|grpc_server|etcd|process)_[a-z_]+`)
	var out []string
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			for _, name := range metric.FindAllString(tg.Expr, -1) {
				for _, suffix := range []string{"_bucket", "_count", "_sum"} {
					name = strings.TrimSuffix(name, suffix)
				}
				out = append(out, name)
			}
		}
	}
	if len(out) < 10 {
		t.Fatalf("docs/grafana/lifeline.json reads %d metrics, want its panels' at least", len(out))
	}
	return out
}
