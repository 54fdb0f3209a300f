package hooks_test

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/lifelinehq/lifeline/hooks"
)

// agent is a running Server with the hook tools installed beside it.
type agent struct {
	srv      *hooks.Server
	toolsDir string
}

func startAgent(t *testing.T) *agent {
	t.Helper()
	dir := tempDir(t)
	srv, err := hooks.NewServer(hooks.ServerConfig{Socket: filepath.Join(dir, "agent.sock")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve() = %v, want nil", err)
		}
	})
	toolsDir := filepath.Join(dir, "tools")
	if err := hooks.InstallTools(toolsDir, lifelined); err != nil {
		t.Fatal(err)
	}
	return &agent{srv: srv, toolsDir: toolsDir}
}

// begin registers f for a hook run, ended when the test ends.
func (a *agent) begin(t *testing.T, f hooks.Context) hooks.Hook {
	t.Helper()
	h, err := a.srv.Begin(f)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.srv.End(h.ID) })
	return h
}

// contextFile writes a context file holding id, as Begin does.
func contextFile(t *testing.T, id string) string {
	t.Helper()
	path := filepath.Join(tempDir(t), "context")
	writeFile(t, path, id+"\n", 0o600)
	return path
}

// tool runs a hook tool through its symlink, as a hook would, with the
// context file and the variables in env.
func (a *agent) tool(t *testing.T, file string, env map[string]string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := a.command(file, env, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("run %s: %v", args[0], err)
	}
	return out.String(), errOut.String(), cmd.ProcessState.ExitCode()
}

func (a *agent) command(file string, env map[string]string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(a.toolsDir, args[0]), args[1:]...)
	cmd.Env = []string{hooks.EnvAgentSocket + "=" + a.srv.Socket(), hooks.EnvContextFile + "=" + file}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	return cmd
}

// inRelationHook is the environment of a db-relation-changed hook about
// pg/0.
var inRelationHook = map[string]string{hooks.EnvRelationID: "db:2", hooks.EnvRemoteUnit: "pg/0"}

func TestTools(t *testing.T) {
	a := startAgent(t)
	tests := []struct {
		name     string
		env      map[string]string
		args     []string
		wantOut  string
		wantErr  string
		wantCode int
		// check looks at what the tool did to the Context.
		check func(t *testing.T, f *fakeContext)
	}{
		// relation-get
		{name: "relation-get all", env: inRelationHook, args: []string{"relation-get"}, wantOut: "host: 10.0.0.1\nport: 5432\n"},
		{name: "relation-get -", env: inRelationHook, args: []string{"relation-get", "-"}, wantOut: "host: 10.0.0.1\nport: 5432\n"},
		{name: "relation-get key", env: inRelationHook, args: []string{"relation-get", "host"}, wantOut: "10.0.0.1\n"},
		{name: "relation-get missing key", env: inRelationHook, args: []string{"relation-get", "nothing"}},
		{name: "relation-get json", env: inRelationHook, args: []string{"relation-get", "--format=json"}, wantOut: `{"host":"10.0.0.1","port":"5432"}` + "\n"},
		{name: "relation-get json key", env: inRelationHook, args: []string{"relation-get", "--format", "json", "port"}, wantOut: `"5432"` + "\n"},
		{name: "relation-get json missing key", env: inRelationHook, args: []string{"relation-get", "--format=json", "nothing"}, wantOut: "null\n"},
		{name: "relation-get unit", env: inRelationHook, args: []string{"relation-get", "-", "pg/1"}, wantOut: "host: 10.0.0.2\nnote: a: b\nc\nport: 5432\n"},
		{name: "relation-get own unit", env: inRelationHook, args: []string{"relation-get", "-", "kv/0"}, wantOut: "database: kv\n"},
		{name: "relation-get flags last", args: []string{"relation-get", "host", "pg/1", "-r", "db:2"}, wantOut: "10.0.0.2\n"},
		{name: "relation-get -r=", args: []string{"relation-get", "-r=db:2", "host", "pg/1"}, wantOut: "10.0.0.2\n"},
		{name: "relation-get --relation", args: []string{"relation-get", "--relation", "db:2", "host", "pg/1"}, wantOut: "10.0.0.2\n"},
		{name: "relation-get -r number", args: []string{"relation-get", "-r", "2", "host", "pg/1"}, wantOut: "10.0.0.2\n"},
		{name: "relation-get other relation", env: inRelationHook, args: []string{"relation-get", "-r", "website:11", "url", "kv/0"}, wantOut: "http://kv/?a=1&b=<2>\n"},
		{name: "relation-get json escapes no html", env: inRelationHook, args: []string{"relation-get", "-r", "website:11", "--format=json", "url", "kv/0"}, wantOut: `"http://kv/?a=1&b=<2>"` + "\n"},
		{name: "relation-get unknown relation", args: []string{"relation-get", "-r", "db:9", "host", "pg/0"}, wantErr: "relation-get: relation db:9 not found\n", wantCode: 1},
		{name: "relation-get unknown number", args: []string{"relation-get", "-r", "9", "host", "pg/0"}, wantErr: "relation-get: unknown relation id 9\n", wantCode: 1},
		{name: "relation-get not a member", env: inRelationHook, args: []string{"relation-get", "host", "pg/7"}, wantErr: "relation-get: unit pg/7 is not in relation db:2\n", wantCode: 1},
		{name: "relation-get no relation", args: []string{"relation-get", "host"}, wantErr: "relation-get: no relation id: use -r outside relation hooks\n", wantCode: 2},
		{name: "relation-get no unit", args: []string{"relation-get", "-r", "db:2", "host"}, wantErr: "relation-get: no unit: name UNIT for relation db:2, which is not the hook's relation\n", wantCode: 2},
		{name: "relation-get no remote unit", env: map[string]string{hooks.EnvRelationID: "db:2"}, args: []string{"relation-get", "host"}, wantErr: "relation-get: no unit: name UNIT, as this hook has no remote unit\n", wantCode: 2},
		{name: "relation-get bad relation id", args: []string{"relation-get", "-r", "db", "host", "pg/0"}, wantErr: `relation-get: bad relation id "db": want <endpoint>:<id>, like db:3` + "\n", wantCode: 2},
		{name: "relation-get bad unit", env: inRelationHook, args: []string{"relation-get", "host", "pg"}, wantErr: `relation-get: bad unit name "pg"` + "\n", wantCode: 2},
		{name: "relation-get unknown flag", env: inRelationHook, args: []string{"relation-get", "-x"}, wantErr: "relation-get: unknown flag -x: see relation-get --help\n", wantCode: 2},
		{name: "relation-get unknown long flag", env: inRelationHook, args: []string{"relation-get", "--log-level=info"}, wantErr: "relation-get: unknown flag --log-level: see relation-get --help\n", wantCode: 2},
		{name: "relation-get bad format", env: inRelationHook, args: []string{"relation-get", "--format=xml"}, wantErr: `relation-get: unknown format "xml": use text, smart, yaml, json` + "\n", wantCode: 2},
		{name: "relation-get flag without value", env: inRelationHook, args: []string{"relation-get", "-r"}, wantErr: "relation-get: flag -r needs a value: ID\n", wantCode: 2},
		{name: "relation-get too many", env: inRelationHook, args: []string{"relation-get", "a", "pg/0", "c"}, wantErr: `relation-get: unexpected argument "c": see relation-get --help` + "\n", wantCode: 2},

		// relation-set
		{name: "relation-set", env: inRelationHook, args: []string{"relation-set", "host=10.1.1.1", "port=", "motd=a=b", "port=1", "old="},
			check: wantSets(relationSet{"db:2", map[string]string{"host": "10.1.1.1", "motd": "a=b", "port": "1"}, []string{"old"}})},
		{name: "relation-set -r", args: []string{"relation-set", "-r", "website:11", "url="},
			check: wantSets(relationSet{"website:11", map[string]string{}, []string{"url"}})},
		{name: "relation-set bad argument", env: inRelationHook, args: []string{"relation-set", "a=1", "oops"}, wantErr: `relation-set: bad setting "oops": want KEY=VALUE` + "\n", wantCode: 2, check: wantSets()},
		{name: "relation-set empty key", env: inRelationHook, args: []string{"relation-set", "=1"}, wantErr: `relation-set: bad setting "=1": want KEY=VALUE` + "\n", wantCode: 2, check: wantSets()},
		{name: "relation-set nothing", env: inRelationHook, args: []string{"relation-set"}, wantErr: "relation-set: no settings: give KEY=VALUE...\n", wantCode: 2},
		{name: "relation-set unknown relation", args: []string{"relation-set", "-r", "db:4", "a=1"}, wantErr: "relation-set: relation db:4 not found\n", wantCode: 1},
		{name: "relation-set no relation", args: []string{"relation-set", "a=1"}, wantErr: "relation-set: no relation id: use -r outside relation hooks\n", wantCode: 2},

		// relation-list
		{name: "relation-list", env: inRelationHook, args: []string{"relation-list"}, wantOut: "pg/0\npg/1\npg/10\n"},
		{name: "relation-list json", args: []string{"relation-list", "-r", "db:2", "--format=json"}, wantOut: `["pg/0","pg/1","pg/10"]` + "\n"},
		{name: "relation-list json empty", args: []string{"relation-list", "-r", "db:3", "--format=json"}, wantOut: "[]\n"},
		{name: "relation-list unknown", args: []string{"relation-list", "-r", "db:5"}, wantErr: "relation-list: relation db:5 not found\n", wantCode: 1},

		// relation-ids
		{name: "relation-ids all", args: []string{"relation-ids"}, wantOut: "db:2\ndb:3\nwebsite:11\n"},
		{name: "relation-ids endpoint", args: []string{"relation-ids", "db"}, wantOut: "db:2\ndb:3\n"},
		{name: "relation-ids the hook's endpoint", env: map[string]string{hooks.EnvRelationID: "website:11"}, args: []string{"relation-ids"}, wantOut: "website:11\n"},
		{name: "relation-ids json", args: []string{"relation-ids", "--format=json", "db"}, wantOut: `["db:2","db:3"]` + "\n"},
		{name: "relation-ids json none", args: []string{"relation-ids", "--format=json", "cache"}, wantOut: "[]\n"},
		{name: "relation-ids bad endpoint", args: []string{"relation-ids", "Db!"}, wantErr: `relation-ids: bad endpoint name "Db!"` + "\n", wantCode: 2},

		// config-get
		{name: "config-get all", args: []string{"config-get"}, wantOut: "banner: \ndebug: false\nname: kv store\nport: 8080\nratio: 0.5\n"},
		{name: "config-get key", args: []string{"config-get", "port"}, wantOut: "8080\n"},
		{name: "config-get string", args: []string{"config-get", "name"}, wantOut: "kv store\n"},
		{name: "config-get unset", args: []string{"config-get", "unset"}},
		{name: "config-get unknown", args: []string{"config-get", "nothing"}},
		{name: "config-get json", args: []string{"config-get", "--format=json"}, wantOut: `{"banner":"","debug":false,"name":"kv store","port":8080,"ratio":0.5}` + "\n"},
		{name: "config-get json key", args: []string{"config-get", "--format=json", "ratio"}, wantOut: "0.5\n"},
		{name: "config-get json unset", args: []string{"config-get", "--format=json", "empty"}, wantOut: "null\n"},

		// unit-get
		{name: "unit-get private", args: []string{"unit-get", "private-address"}, wantOut: "10.1.2.3\n"},
		{name: "unit-get public json", args: []string{"unit-get", "--format=json", "public-address"}, wantOut: `"kv.example.com"` + "\n"},
		{name: "unit-get unknown", args: []string{"unit-get", "address"}, wantErr: `unit-get: unknown setting "address": use private-address or public-address` + "\n", wantCode: 2},
		{name: "unit-get nothing", args: []string{"unit-get"}, wantErr: "unit-get: name the setting: private-address or public-address\n", wantCode: 2},

		// status-set, status-get
		{name: "status-set", args: []string{"status-set", "active", "serving on 8080"}, check: wantStatus("active", "serving on 8080")},
		{name: "status-set words", args: []string{"status-set", "maintenance", "installing", "packages"}, check: wantStatus("maintenance", "installing packages")},
		{name: "status-set no message", args: []string{"status-set", "blocked"}, check: wantStatus("blocked", "")},
		{name: "status-set bad", args: []string{"status-set", "error", "oops"}, wantErr: `status-set: unknown status "error": use maintenance, blocked, waiting, active` + "\n", wantCode: 2, check: wantStatus("waiting", "for a database")},
		{name: "status-set nothing", args: []string{"status-set"}, wantErr: "status-set: name the status: maintenance, blocked, waiting, active\n", wantCode: 2},
		{name: "status-get", args: []string{"status-get"}, wantOut: "waiting\n"},
		{name: "status-get json", args: []string{"status-get", "--format=json"}, wantOut: `{"message":"for a database","status":"waiting"}` + "\n"},

		// log
		{name: "log", args: []string{"log", "hello", "world"}, check: wantLogs([2]string{"info", "hello world"})},
		{name: "log -l", args: []string{"log", "-l", "WARNING", "careful"}, check: wantLogs([2]string{"warn", "careful"})},
		{name: "log --log-level", args: []string{"log", "--log-level=debug", "details"}, check: wantLogs([2]string{"debug", "details"})},
		{name: "log --", args: []string{"log", "--", "-l", "--help"}, check: wantLogs([2]string{"info", "-l --help"})},
		{name: "log bad level", args: []string{"log", "-l", "loud", "x"}, wantErr: `log: unknown log level "loud": use trace, debug, info, warning or error` + "\n", wantCode: 2},
		{name: "log nothing", args: []string{"log"}, wantErr: "log: no message\n", wantCode: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeContext()
			h := a.begin(t, f)
			out, errOut, code := a.tool(t, h.Env[hooks.EnvContextFile], tt.env, tt.args...)
			if out != tt.wantOut || errOut != tt.wantErr || code != tt.wantCode {
				t.Errorf("%s = stdout %q, stderr %q, exit %d; want %q, %q, %d",
					strings.Join(tt.args, " "), out, errOut, code, tt.wantOut, tt.wantErr, tt.wantCode)
			}
			if tt.check != nil {
				tt.check(t, f)
			}
		})
	}
}

func wantSets(want ...relationSet) func(*testing.T, *fakeContext) {
	return func(t *testing.T, f *fakeContext) {
		t.Helper()
		if !reflect.DeepEqual(f.sets, want) {
			t.Errorf("RelationSet calls = %+v, want %+v", f.sets, want)
		}
	}
}

func wantStatus(status, message string) func(*testing.T, *fakeContext) {
	return func(t *testing.T, f *fakeContext) {
		t.Helper()
		if f.status != [2]string{status, message} {
			t.Errorf("workload status = %q, want %q, %q", f.status, status, message)
		}
	}
}

func wantLogs(want ...[2]string) func(*testing.T, *fakeContext) {
	return func(t *testing.T, f *fakeContext) {
		t.Helper()
		if !reflect.DeepEqual(f.logs, want) {
			t.Errorf("Log calls = %q, want %q", f.logs, want)
		}
	}
}

// TestToolsHelp: every tool has --help, printed on stdout, exit 0.
func TestToolsHelp(t *testing.T) {
	a := startAgent(t)
	f := newFakeContext()
	h := a.begin(t, f)
	for _, name := range hooks.ToolNames() {
		for _, flag := range []string{"--help", "-h"} {
			out, errOut, code := a.tool(t, h.Env[hooks.EnvContextFile], nil, name, "-r", "db:2", flag)
			if !strings.HasPrefix(out, "Usage: "+name+" ") || !strings.Contains(out, "-h, --help") || errOut != "" || code != 0 {
				t.Errorf("%s %s = stdout %q, stderr %q, exit %d; want its usage, exit 0", name, flag, out, errOut, code)
			}
		}
	}
	if f.calls != 0 {
		t.Errorf("--help called the Context %d times, want 0", f.calls)
	}
}
