package main_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
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
	metricsAddr, _ := startController(t, t.TempDir())
	body := getMetrics(t, metricsAddr)
	for _, name := range named {
		if !strings.Contains(body, "\n# TYPE "+name+" ") {
			t.Errorf("an alert names %s, which /metrics does not serve", name)
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
