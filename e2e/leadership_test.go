package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/testing/e2etest"
)

// leaderCharm's hooks say in the workload status which leadership hook
// ran last, and is-leader's answer.
var leaderCharm = map[string]string{
	"metadata.yaml": "name: lead\nsummary: says whether it leads\n",
	"hooks/leader-elected": "#!/bin/sh\nset -e\nstatus-set active \"leader-elected $(is-leader)\"\n" +
		"leader-set leader=\"$LIFELINE_UNIT_NAME\"\n",
	"hooks/leader-settings-changed": "#!/bin/sh\nset -e\nstatus-set active \"leader-settings-changed $(is-leader) $(leader-get leader)\"\n",
}

// TestLeaderFailsOver deploys three units on three machines: status marks
// one leader, which ran leader-elected; the others ran
// leader-settings-changed. Its machine agent killed, another unit is
// elected within the presence timeout and runs leader-elected.
func TestLeaderFailsOver(t *testing.T) {
	s := newSandbox(t)
	dir := filepath.Join(t.TempDir(), "lead")
	for name, content := range leaderCharm {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s.StartController(t, "--presence-timeout", presenceTimeout.String())
	s.OK(t, "deploy", dir, "-n", "3")
	leaderOf := func(doc *e2etest.StatusDoc) (string, int) {
		leader, n := "", 0
		for name, u := range doc.Services["lead"].Units {
			if u.Leader {
				leader, n = name, n+1
			}
		}
		return leader, n
	}
	doc := s.WaitStatus(t, "a leader that ran leader-elected, the others leader-settings-changed", time.Minute, func(doc *e2etest.StatusDoc) bool {
		leader, n := leaderOf(doc)
		if n != 1 || len(doc.Services["lead"].Units) != 3 {
			return false
		}
		for name, u := range doc.Services["lead"].Units {
			want := "leader-settings-changed False " + leader
			if name == leader {
				want = "leader-elected True"
			}
			if u.Message != want {
				return false
			}
		}
		return true
	})
	old, _ := leaderOf(doc)
	if out := s.OK(t, "status"); !strings.Contains(out, old+"*") {
		t.Errorf("ctl status does not mark %s leader:\n%s", old, out)
	}
	m := doc.Services["lead"].Units[old].Machine
	agent := e2etest.ReadPID(t, filepath.Join(s.DataDir, "machines", m, "pid"))
	if err := syscall.Kill(agent, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	s.WaitStatus(t, "another leader that ran leader-elected", presenceTimeout+30*time.Second, func(doc *e2etest.StatusDoc) bool {
		leader, n := leaderOf(doc)
		return n == 1 && leader != old && doc.Services["lead"].Units[leader].Message == "leader-elected True"
	})
	t.Logf("leadership passed %s after the kill (presence timeout %s)", time.Since(start).Round(100*time.Millisecond), presenceTimeout)
}
