package main

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/lifelinehq/lifeline/internal/testing/e2etest"
)

// stampedLine is what --version and ctl version say of a binary TestMain
// built (stamped with e2etest.StampFlag).
var stampedLine = fmt.Sprintf("%s (commit %s, built %s, %s %s/%s)", e2etest.StampVersion, e2etest.StampCommit[:12],
	e2etest.StampDate, runtime.Version(), runtime.GOOS, runtime.GOARCH)

func TestVersionFlag(t *testing.T) {
	s := newSandbox(t)
	if got, want := s.ok(t, "--version"), "ctl "+stampedLine+"\n"; got != want {
		t.Errorf("ctl --version = %q, want %q", got, want)
	}
	out, err := exec.Command(filepath.Join(binDir, "lifelined"), "--version").Output()
	if got, want := string(out), "lifelined "+stampedLine+"\n"; err != nil || got != want {
		t.Errorf("lifelined --version = %q, %v; want %q", got, err, want)
	}
}

// ctl version without a controller prints the client's version and says
// in one line that no controller answered.
func TestVersionUnreachable(t *testing.T) {
	s := newSandbox(t)
	port := freePorts(t)
	writeConfig(t, s.config, fmt.Sprintf("127.0.0.1:%d", port))
	r := s.fails(t, 1, []string{fmt.Sprintf("ctl: cannot reach the controller at 127.0.0.1:%d: ", port)}, "version")
	if want := "client:     " + stampedLine + "\n"; r.stdout != want {
		t.Errorf("%v\nwant stdout %q", r, want)
	}
	if n := strings.Count(r.stderr, "\n"); n != 1 {
		t.Errorf("%v\nwant one line on stderr", r)
	}
	r = s.fails(t, 1, []string{"cannot reach the controller"}, "version", "--format", "json")
	var doc map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil {
		t.Fatalf("%v\nnot JSON: %v", r, err)
	}
	if _, ok := doc["controller"]; ok || doc["client"].(map[string]any)["version"] != e2etest.StampVersion {
		t.Errorf("ctl version --format json = %v, want the client's version only", doc)
	}
	s.fails(t, 2, []string{"--format"}, "version", "--format", "xml")
}

func TestCompletion(t *testing.T) {
	s := newSandbox(t)
	for _, shell := range []string{"bash", "zsh", "fish"} {
		if out := s.ok(t, "completion", shell); !strings.Contains(out, "ctl") || len(out) < 1000 {
			t.Errorf("ctl completion %s = %q, want a script for ctl", shell, out)
		}
	}
	s.fails(t, 2, []string{"unknown shell"}, "completion", "powershell")
	s.fails(t, 2, []string{"want 1 argument"}, "completion")
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash to load the script in")
	}
	ctl := filepath.Join(binDir, "ctl")
	out, err := exec.Command("bash", "-c", "source <("+ctl+" completion bash) && complete -p ctl").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "complete") || !strings.Contains(string(out), " ctl") {
		t.Errorf("loading ctl's bash completion: %v\n%s", err, out)
	}
	// The script asks ctl itself for the completions: commands complete.
	out, err = exec.Command(ctl, "__complete", "vers").Output()
	if err != nil || !strings.Contains(string(out), "version") {
		t.Errorf("ctl __complete vers = %q, %v; want version", out, err)
	}
}
