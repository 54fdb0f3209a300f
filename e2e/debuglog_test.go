package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/testing/poll"
)

// ctl debug-log shows the agents' lines through the controller: the
// hook runs of units on other machines (each an agent process of its
// own), replayed and followed, each line with its time and level.
func TestDebugLogFollowsHooks(t *testing.T) {
	t.Parallel()
	needCharms(t)
	s := newSandbox(t)
	s.Bootstrap(t)
	s.OK(t, "deploy", charmPath(t, "kv"), "-n", "2")
	s.OK(t, "wait", "--timeout", "2m")

	// The lines ship as they are logged: poll until both installs' are in.
	var out string
	poll.UntilSays(t, "ctl debug-log --replay --include kv to show both units' install hooks", func() (bool, string) {
		out = s.OK(t, "debug-log", "--replay", "--include", "kv")
		return strings.Contains(out, "kv/0: ") && strings.Contains(out, "kv/1: ") && strings.Contains(out, "hook ran hook=install"), out
	})
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if !strings.HasPrefix(l, "kv/") && !strings.HasPrefix(l, "...") {
			t.Errorf("ctl debug-log --include kv printed %q, want only kv's units' lines", l)
		}
	}

	f := startCtl(t, s, "debug-log", "--follow", "--include", "kv/0", "--lines", "1")
	s.OK(t, "config", "kv", "port=7071")
	var line string
	poll.Within(t, "ctl debug-log --follow to show kv/0's config-changed hook", 2*time.Minute, func() (bool, string) {
		for _, l := range strings.Split(f.stdout.String(), "\n") {
			if strings.Contains(l, "hook ran hook=config-changed") {
				line = l
			}
		}
		return line != "", f.String()
	})
	shown := time.Now()
	// "kv/0: 2026-12-02 21:20:01.123 INFO ..."
	fields := strings.Fields(line)
	if len(fields) < 4 || fields[0] != "kv/0:" || fields[3] != "INFO" || !strings.Contains(line, `status="exited 0"`) || !strings.Contains(line, "duration=") {
		t.Fatalf("followed line %q, want kv/0's INFO hook line with its duration and status", line)
	}
	if logged, err := time.ParseInLocation("2006-01-02 15:04:05.000", fields[1]+" "+fields[2], time.Local); err != nil {
		t.Errorf("followed line %q: %v", line, err)
	} else {
		t.Logf("the hook's line was shown %v after the agent logged it", shown.Sub(logged))
	}
	for _, l := range strings.Split(strings.TrimSpace(f.stdout.String()), "\n") {
		if !strings.HasPrefix(l, "kv/0: ") {
			t.Errorf("ctl debug-log --include kv/0 printed %q, want only kv/0's lines", l)
		}
	}
	f.running(t)
}
