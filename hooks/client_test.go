package hooks_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lifelinehq/lifeline/hooks"
)

func TestRunToolFailures(t *testing.T) {
	a := startAgent(t)
	file := a.begin(t, newFakeContext()).Env[hooks.EnvContextFile]
	dir := tempDir(t)
	tests := []struct {
		name    string
		env     map[string]string
		args    []string
		wantErr string
	}{
		{"no socket", map[string]string{hooks.EnvContextFile: file}, []string{"/x/relation-get"},
			"relation-get: not running inside a hook: LIFELINE_AGENT_SOCKET is not set\n"},
		{"no context", map[string]string{hooks.EnvAgentSocket: a.srv.Socket()}, []string{"config-get"},
			"config-get: not running inside a hook: LIFELINE_CONTEXT_FILE is not set\n"},
		{"context file gone", map[string]string{hooks.EnvAgentSocket: a.srv.Socket(), hooks.EnvContextFile: filepath.Join(dir, "gone")}, []string{"config-get"},
			"config-get: " + expiredMessage + "\n"},
		{"context file relative", map[string]string{hooks.EnvAgentSocket: a.srv.Socket(), hooks.EnvContextFile: "context"}, []string{"config-get"},
			`config-get: LIFELINE_CONTEXT_FILE "context" is not an absolute path` + "\n"},
		{"context file empty", map[string]string{hooks.EnvAgentSocket: a.srv.Socket(), hooks.EnvContextFile: contextFile(t, "")}, []string{"config-get"},
			"config-get: the hook's context file "},
		{"no agent", map[string]string{hooks.EnvAgentSocket: filepath.Join(dir, "gone.sock"), hooks.EnvContextFile: file}, []string{"log", "x"},
			"log: cannot reach the unit agent at " + filepath.Join(dir, "gone.sock") + ": no such file or directory\n"},
		{"not utf-8", map[string]string{hooks.EnvAgentSocket: a.srv.Socket(), hooks.EnvContextFile: file}, []string{"relation-set", "a=1", "b=\xff"},
			"relation-set: argument 2 is not valid UTF-8\n"},
		{"too large", map[string]string{hooks.EnvAgentSocket: a.srv.Socket(), hooks.EnvContextFile: file}, []string{"relation-set", "a=" + strings.Repeat("x", hooks.MaxRequestBytes)},
			"relation-set: request of "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := hooks.RunTool(tt.args, func(k string) string { return tt.env[k] }, nil, &stdout, &stderr)
			if code != 1 || stdout.Len() != 0 || !strings.HasPrefix(stderr.String(), tt.wantErr) || strings.Count(stderr.String(), "\n") != 1 {
				t.Errorf("RunTool(%.40q) = %d, stdout %q, stderr %q; want 1, one line starting %q", tt.args, code, stdout.String(), stderr.String(), tt.wantErr)
			}
		})
	}
}

// TestToolOutsideAHook runs the real binary through a tool's name with no
// hook environment.
func TestToolOutsideAHook(t *testing.T) {
	dir := tempDir(t)
	if err := hooks.InstallTools(dir, lifelined); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(dir, "relation-get"), "host")
	cmd.Env = []string{}
	out, err := cmd.CombinedOutput()
	if want := "relation-get: not running inside a hook: LIFELINE_AGENT_SOCKET is not set\n"; string(out) != want || cmd.ProcessState.ExitCode() != 1 {
		t.Errorf("relation-get outside a hook = %q, %v; want %q, exit 1", out, err, want)
	}
}

func TestInstallTools(t *testing.T) {
	dir := filepath.Join(tempDir(t), "tools")
	if err := hooks.InstallTools(dir, lifelined); err != nil {
		t.Fatalf("InstallTools() = %v", err)
	}
	// Wrong links and files are replaced; a second run changes nothing.
	if err := os.Remove(filepath.Join(dir, "log")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/elsewhere/lifelined", filepath.Join(dir, "log")); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(dir, "unit-get"))
	writeFile(t, filepath.Join(dir, "unit-get"), "#!/bin/sh\n", 0o755)
	os.Remove(filepath.Join(dir, "status-get"))
	for range 2 {
		if err := hooks.InstallTools(dir, lifelined); err != nil {
			t.Fatalf("InstallTools() again = %v", err)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
		if target, err := os.Readlink(filepath.Join(dir, e.Name())); err != nil || target != lifelined {
			t.Errorf("%s links to %q, %v; want %s", e.Name(), target, err, lifelined)
		}
	}
	want := []string{"action-fail", "action-get", "action-log", "action-set", "application-version-set", "checkpoint-get", "checkpoint-set",
		"close-port", "config-get", "is-leader", "juju-log", "leader-get", "leader-set", "log", "network-get", "open-port", "opened-ports", "relation-get", "relation-ids", "relation-list", "relation-set", "status-get", "status-set", "unit-get"}
	if !slices.Equal(got, want) || !slices.Equal(hooks.ToolNames(), want) {
		t.Errorf("tools dir holds %q, ToolNames() = %q, want %q", got, hooks.ToolNames(), want)
	}
	for _, name := range want {
		if !hooks.IsTool(name) {
			t.Errorf("IsTool(%s) = false, want true", name)
		}
	}
	for _, name := range []string{"lifelined", "juju-run", ""} {
		if hooks.IsTool(name) {
			t.Errorf("IsTool(%q) = true, want false", name)
		}
	}
}

func TestInstallToolsRefuses(t *testing.T) {
	dir := tempDir(t)
	if err := os.MkdirAll(filepath.Join(dir, "log"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		lifelined string
		want      string
	}{
		{"lifelined", `lifelined path "lifelined" is not absolute`},
		{lifelined, "is a directory"},
	}
	for _, tt := range tests {
		if err := hooks.InstallTools(dir, tt.lifelined); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("InstallTools(%s, %s) = %v, want an error saying %q", dir, tt.lifelined, err, tt.want)
		}
	}
}
