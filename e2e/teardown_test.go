package e2e

import (
	"github.com/lifelinehq/lifeline/internal/testing/poll"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/testing/e2etest"
)

// failedHooks returns the lines of the machine agents' logs (which hold
// their unit agents') that tell of a hook that failed.
func failedHooks(s *e2etest.Sandbox) []string {
	logs, _ := filepath.Glob(filepath.Join(s.MachinesDir(), "*", "agent.log"))
	var out []string
	for _, p := range logs {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(data), "\n") {
			if strings.Contains(l, "hook failed") {
				out = append(out, l)
			}
		}
	}
	return out
}

// unitsInError lists the units whose agent shows an error.
func unitsInError(doc *e2etest.StatusDoc) []string {
	var out []string
	for _, name := range doc.Units() {
		if u, _ := doc.Unit(name); u.Agent == "error" || strings.HasSuffix(u.State, "-error") {
			out = append(out, name+": "+u.Message)
		}
	}
	return out
}

// TestRelatedTeardownRunsNoFailingHook destroys two related services at
// once, nine kv units and three app units: each app unit departs the kv
// units one by one while they leave the relation's scope around it, and
// its db-relation-departed lists the kv units not yet departed and reads
// their settings (relation-get host, port), which their leaving deleted
// at the controller. Every hook succeeds the first time, no unit shows an
// error, and the model empties.
func TestRelatedTeardownRunsNoFailingHook(t *testing.T) {
	t.Parallel()
	needCharms(t)
	s := newSandbox(t)
	s.Bootstrap(t)
	s.OK(t, "deploy", charmPath(t, "kv"), "-n", "9")
	s.OK(t, "deploy", charmPath(t, "app"), "-n", "3")
	s.OK(t, "add-relation", "app", "kv")
	s.OK(t, "wait", "--timeout", "5m")
	if failed := failedHooks(s); len(failed) > 0 {
		t.Fatalf("hooks failed while deploying:\n%s", strings.Join(failed, "\n"))
	}

	s.OK(t, "destroy-service", "app", "kv")
	poll.Within(t, "the services to be gone, every hook succeeding", 5*time.Minute, func() (bool, string) {
		if failed := failedHooks(s); len(failed) > 0 {
			t.Fatalf("hooks failed in the teardown:\n%s", strings.Join(failed, "\n"))
		}
		doc, err := s.TryStatus()
		if err != nil {
			return false, err.Error()
		}
		if errs := unitsInError(doc); len(errs) > 0 {
			t.Fatalf("units in error in the teardown:\n%s", strings.Join(errs, "\n"))
		}
		return len(doc.Services) == 0 && len(doc.Relations) == 0, doc.String()
	})
	var ids []string
	for id := range s.Status(t).Machines {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	s.OK(t, append([]string{"destroy-machine"}, ids...)...)
	s.WaitStatus(t, "an empty model", 2*time.Minute, (*e2etest.StatusDoc).Empty)
	if failed := failedHooks(s); len(failed) > 0 {
		t.Errorf("hooks failed in the teardown:\n%s", strings.Join(failed, "\n"))
	}
}
