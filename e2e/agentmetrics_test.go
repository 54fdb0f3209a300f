package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/lifelinehq/lifeline/internal/testing/e2etest"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
)

// TestMachineAgentMetrics: the machine agents the local provider starts
// with --metrics-addr (passed by the controller's --local-agent-arg)
// serve their hooks' runs by hook name and result, with durations, in
// families Prometheus's linter finds nothing in.
func TestMachineAgentMetrics(t *testing.T) {
	t.Parallel()
	needCharms(t)
	s := newSandbox(t)
	s.StartController(t, "--local-agent-arg=--metrics-addr=127.0.0.1:0")
	s.OK(t, "deploy", charmPath(t, "kv"), "-n", "1")
	s.OK(t, "wait", "--timeout", "2m")
	u, ok := s.Status(t).Unit("kv/0")
	if !ok || u.Machine == "" {
		t.Fatalf("kv/0 = %+v (found %v), want it on a machine", u, ok)
	}
	addrFile := filepath.Join(s.MachinesDir(), u.Machine, "metrics.addr")
	var body string
	installed := regexp.MustCompile(`(?m)^lifeline_hook_duration_seconds_count\{hook="install",result="ok"\} 1$`)
	poll.Within(t, "machine "+u.Machine+"'s agent serving kv/0's install hook run", time.Minute, func() (bool, string) {
		addr, err := os.ReadFile(addrFile)
		if err != nil {
			return false, err.Error()
		}
		body, err = e2etest.ScrapeMetrics(strings.TrimSpace(string(addr)))
		if err != nil {
			return false, err.Error()
		}
		return installed.MatchString(body), body
	})
	for _, want := range []string{
		`lifeline_hook_duration_seconds_count{hook="start",result="ok"} 1`,
		`lifeline_build_info{`,
		`process_resident_memory_bytes `,
		`lifeline_log_lines_shipped_total `,
		`lifeline_log_lines_dropped_total `,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the machine agent's metrics hold no %q:\n%s", want, body)
		}
	}
	problems, err := promlint.New(strings.NewReader(body)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "lifeline_") {
			t.Errorf("promlint: %s: %s", p.Metric, p.Text)
		}
	}
}
