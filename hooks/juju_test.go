package hooks_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/lifelinehq/lifeline/hooks"
)

// jujuContext is a fakeContext that acts for its service too, and may
// know leadership.
type jujuContext struct {
	*fakeContext
	appStatus [2]string
	version   string
	// appSets are the relation-set --app calls.
	appSets []relationSet
}

// AppRelationGet answers for services pg and kv in relation db:2.
func (j *jujuContext) AppRelationGet(_ context.Context, relationID, service string) (map[string]string, error) {
	if relationID != "db:2" {
		return nil, fmt.Errorf("unknown relation %q", relationID)
	}
	switch service {
	case "pg":
		return map[string]string{"database": "kvdb"}, nil
	case "kv":
		return map[string]string{"url": "kv:7000"}, nil
	}
	return nil, fmt.Errorf("service %s is not in relation %s", service, relationID)
}

func (j *jujuContext) AppRelationSet(_ context.Context, relationID string, set map[string]string, unset []string) error {
	j.appSets = append(j.appSets, relationSet{relationID, set, unset})
	return nil
}

func (j *jujuContext) SetApplicationStatus(_ context.Context, status, message string) error {
	j.appStatus = [2]string{status, message}
	return nil
}

func (j *jujuContext) ApplicationStatus(context.Context) (string, string, error) {
	return j.appStatus[0], j.appStatus[1], nil
}

func (j *jujuContext) SetApplicationVersion(_ context.Context, v string) error {
	j.version = v
	return nil
}

// follower is a jujuContext whose unit does not lead its service.
type follower struct{ *jujuContext }

func (follower) IsLeader(context.Context) (bool, error) { return false, nil }

// TestJujuToolForms runs the tools with Juju's flags and formats, and
// compares their output with what Juju documents (smart: strings as
// they are, booleans True/False, maps as YAML).
func TestJujuToolForms(t *testing.T) {
	a := startAgent(t)
	tests := []struct {
		name     string
		env      map[string]string
		stdin    string
		args     []string
		wantOut  string
		wantErr  string
		wantCode int
		leader   bool // false: the Context is a follower
		check    func(t *testing.T, j *jujuContext)
	}{
		{name: "juju-log", args: []string{"juju-log", "hello", "world"}, leader: true,
			check: jujuLogs([2]string{"info", "hello world"})},
		{name: "juju-log -l", args: []string{"juju-log", "-l", "WARNING", "careful"}, leader: true,
			check: jujuLogs([2]string{"warn", "careful"})},
		{name: "juju-log --log-level", args: []string{"juju-log", "--log-level", "ERROR", "bad"}, leader: true,
			check: jujuLogs([2]string{"error", "bad"})},
		{name: "juju-log --debug", args: []string{"juju-log", "--debug", "details"}, leader: true,
			check: jujuLogs([2]string{"debug", "details"})},
		{name: "juju-log relation prefix", env: inRelationHook, args: []string{"juju-log", "joined"}, leader: true,
			check: jujuLogs([2]string{"info", "db:2: joined"})},
		{name: "juju-log bad level", args: []string{"juju-log", "-l", "loud", "x"}, leader: true,
			check: jujuLogs([2]string{"warn", `Specified log level of "loud" is not valid`}, [2]string{"info", "x"})},
		{name: "juju-log --format", args: []string{"juju-log", "--format=json", "x"}, leader: true,
			wantErr: `--format flag deprecated for command "juju-log"` + "\n", check: jujuLogs([2]string{"info", "x"})},
		{name: "juju-log nothing", args: []string{"juju-log"}, leader: true, wantErr: "juju-log: no message specified\n", wantCode: 2},

		{name: "config-get smart bool", args: []string{"config-get", "--format=smart", "debug"}, leader: true, wantOut: "False\n"},
		{name: "config-get smart int", args: []string{"config-get", "--format=smart", "port"}, leader: true, wantOut: "8080\n"},
		{name: "config-get yaml string", args: []string{"config-get", "--format=yaml", "name"}, leader: true, wantOut: "kv store\n"},
		{name: "config-get yaml all", args: []string{"config-get", "--format=yaml"}, leader: true,
			wantOut: "banner: \"\"\ndebug: false\nname: kv store\nport: 8080\nratio: 0.5\n"},
		{name: "config-get --all", args: []string{"config-get", "--all", "--format=json"}, leader: true,
			wantOut: `{"banner":"","debug":false,"empty":null,"name":"kv store","port":8080,"ratio":0.5,"unset":null}` + "\n"},
		{name: "config-get -a smart", args: []string{"config-get", "-a", "--format", "smart"}, leader: true,
			wantOut: "banner: \"\"\ndebug: false\nempty: null\nname: kv store\nport: 8080\nratio: 0.5\nunset: null\n"},
		{name: "config-get --all key", args: []string{"config-get", "--all", "port"}, leader: true,
			wantErr: `config-get: cannot use argument --all together with key "port"` + "\n", wantCode: 2},
		{name: "config-get --all=x", args: []string{"config-get", "--all=x"}, leader: true,
			wantErr: "config-get: flag --all takes no value\n", wantCode: 2},

		{name: "relation-get smart all", env: inRelationHook, args: []string{"relation-get", "--format=smart", "-"}, leader: true,
			wantOut: "host: 10.0.0.1\nport: \"5432\"\n"},
		{name: "relation-get yaml key", env: inRelationHook, args: []string{"relation-get", "--format=yaml", "port"}, leader: true,
			wantOut: "\"5432\"\n"},
		{name: "relation-get smart key", env: inRelationHook, args: []string{"relation-get", "--format=smart", "port"}, leader: true,
			wantOut: "5432\n"},
		{name: "relation-get --app", env: inRelationHook, args: []string{"relation-get", "--app"}, leader: true,
			wantOut: "database: kvdb\n"},
		{name: "relation-get --app, the service's change", env: map[string]string{hooks.EnvRelationID: "db:2", hooks.EnvRemoteService: "pg"},
			args: []string{"relation-get", "--app", "database"}, wantOut: "kvdb\n"},
		{name: "relation-get --app own", env: inRelationHook, args: []string{"relation-get", "--app", "--format=json", "-", "kv"},
			wantOut: "{\"url\":\"kv:7000\"}\n"},
		{name: "relation-get --app by unit", env: inRelationHook, args: []string{"relation-get", "--app", "url", "kv/0"}, wantOut: "kv:7000\n"},
		{name: "relation-get --app no remote", env: map[string]string{hooks.EnvRelationID: "db:2"}, args: []string{"relation-get", "--app"},
			wantErr: "relation-get: no unit: name UNIT, as this hook has no remote unit\n", wantCode: 2},
		{name: "relation-set --app", env: inRelationHook, args: []string{"relation-set", "--app", "url=kv:7001", "old="}, leader: true,
			check: func(t *testing.T, j *jujuContext) {
				if want := []relationSet{{"db:2", map[string]string{"url": "kv:7001"}, []string{"old"}}}; !reflect.DeepEqual(j.appSets, want) {
					t.Errorf("relation-set --app: %v, want %v", j.appSets, want)
				}
				wantSets()(t, j.fakeContext)
			}},
		{name: "relation-set --app follower", env: inRelationHook, args: []string{"relation-set", "--app", "url=x"},
			wantErr: "relation-set: cannot write relation settings: this unit is not the leader\n", wantCode: 1},

		{name: "relation-set --file -", env: inRelationHook, stdin: "host: 10.9.9.9\nport: 5433\nold:\n", args: []string{"relation-set", "--file", "-", "port=1"}, leader: true,
			check: func(t *testing.T, j *jujuContext) {
				wantSets(relationSet{"db:2", map[string]string{"host": "10.9.9.9", "port": "1"}, []string{"old"}})(t, j.fakeContext)
			}},
		{name: "relation-set --file lines", env: inRelationHook, stdin: "a=1\nb=x=y\n\n", args: []string{"relation-set", "--file=-"}, leader: true,
			check: func(t *testing.T, j *jujuContext) {
				wantSets(relationSet{"db:2", map[string]string{"a": "1", "b": "x=y"}, nil})(t, j.fakeContext)
			}},
		{name: "relation-set --file list", env: inRelationHook, stdin: "- a\n- b\n", args: []string{"relation-set", "--file", "-"}, leader: true,
			wantErr: "relation-set: --file: expected a YAML map, got - a\n", wantCode: 2},

		{name: "status-set --application", args: []string{"status-set", "--application", "active", "all", "good"}, leader: true,
			check: func(t *testing.T, j *jujuContext) {
				if j.appStatus != [2]string{"active", "all good"} {
					t.Errorf("service status = %q, want active, all good", j.appStatus)
				}
			}},
		{name: "status-set --application follower", args: []string{"status-set", "--application", "active"},
			wantErr: "status-set: cannot set the service's status: this unit is not the leader\n", wantCode: 1},
		{name: "status-get --include-data", args: []string{"status-get", "--include-data"}, leader: true,
			wantOut: "message: for a database\nstatus: waiting\nstatus-data: {}\n"},
		{name: "status-get smart", args: []string{"status-get", "--format=smart"}, leader: true, wantOut: "waiting\n"},
		{name: "status-get yaml", args: []string{"status-get", "--format=yaml"}, leader: true, wantOut: "waiting\n"},

		{name: "application-version-set", args: []string{"application-version-set", "1.2.3"}, leader: true,
			check: func(t *testing.T, j *jujuContext) {
				if j.version != "1.2.3" {
					t.Errorf("version = %q, want 1.2.3", j.version)
				}
			}},
		{name: "application-version-set too long", args: []string{"application-version-set", strings.Repeat("v", 257)}, leader: true,
			wantErr: "application-version-set: bad version: at most 256 bytes, one line\n", wantCode: 2},

		{name: "network-get ingress", args: []string{"network-get", "db", "--ingress-address"}, leader: true, wantOut: "10.1.2.3\n"},
		{name: "network-get bind", args: []string{"network-get", "--bind-address", "db"}, leader: true, wantOut: "10.1.2.3\n"},
		{name: "network-get egress", args: []string{"network-get", "db", "--egress-subnets"}, leader: true, wantOut: "10.1.2.3/32\n"},
		{name: "network-get egress json", args: []string{"network-get", "db", "--egress-subnets", "--format=json"}, leader: true, wantOut: `["10.1.2.3/32"]` + "\n"},
		{name: "network-get two", args: []string{"network-get", "db", "--ingress-address", "--bind-address"}, leader: true,
			wantOut: "bind-address: 10.1.2.3\ningress-address: 10.1.2.3\n"},
		{name: "network-get", args: []string{"network-get", "db"}, leader: true, wantOut: `bind-addresses:
  - mac-address: ""
    interface-name: ""
    addresses:
      - hostname: ""
        value: 10.1.2.3
        cidr: 10.1.2.3/32
        address: 10.1.2.3
    macaddress: ""
    interfacename: ""
egress-subnets:
  - 10.1.2.3/32
ingress-addresses:
  - 10.1.2.3
`},
		{name: "network-get -r", args: []string{"network-get", "-r", "db:9", "db"}, leader: true, wantErr: "network-get: relation db:9 not found\n", wantCode: 1},
		{name: "network-get bad binding", args: []string{"network-get", "Db!"}, leader: true,
			wantErr: `network-get: no network config found for binding "Db!"` + "\n", wantCode: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := &jujuContext{fakeContext: newFakeContext()}
			var hc hooks.Context = j
			if !tt.leader {
				hc = follower{j}
			}
			h := a.begin(t, hc)
			cmd := a.command(h.Env[hooks.EnvContextFile], tt.env, tt.args...)
			cmd.Stdin = strings.NewReader(tt.stdin)
			var out, errOut strings.Builder
			cmd.Stdout, cmd.Stderr = &out, &errOut
			_ = cmd.Run()
			code := cmd.ProcessState.ExitCode()
			if out.String() != tt.wantOut || errOut.String() != tt.wantErr || code != tt.wantCode {
				t.Errorf("%s = stdout %q, stderr %q, exit %d; want %q, %q, %d",
					strings.Join(tt.args, " "), out.String(), errOut.String(), code, tt.wantOut, tt.wantErr, tt.wantCode)
			}
			if tt.check != nil {
				tt.check(t, j)
			}
		})
	}
}

func jujuLogs(want ...[2]string) func(*testing.T, *jujuContext) {
	return func(t *testing.T, j *jujuContext) { t.Helper(); wantLogs(want...)(t, j.fakeContext) }
}

// TestRelationSetFileFromDisk: relation-set --file FILE reads FILE from
// the hook's working directory, not the agent's.
func TestRelationSetFileFromDisk(t *testing.T) {
	a := startAgent(t)
	f := newFakeContext()
	h := a.begin(t, f)
	dir := tempDir(t)
	if err := os.WriteFile(filepath.Join(dir, "settings.yaml"), []byte("url: http://kv/\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := a.command(h.Env[hooks.EnvContextFile], nil, "relation-set", "-r", "website:11", "--file", "settings.yaml")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("relation-set --file settings.yaml = %v, %q", err, out)
	}
	wantSets(relationSet{"website:11", map[string]string{"url": "http://kv/"}, nil})(t, f)
}

// TestJujuEnv: JujuEnv derives Juju's variables from Lifeline's.
func TestJujuEnv(t *testing.T) {
	env := map[string]string{
		hooks.EnvUnitName: "logger/0", hooks.EnvCharmDir: "/var/lib/x/charm", hooks.EnvHookName: "db-relation-joined",
		hooks.EnvMachineID: "3", hooks.EnvRelation: "db", hooks.EnvRelationID: "db:7", hooks.EnvRemoteUnit: "pg/1",
		hooks.EnvAgentSocket: "/var/lib/x/agent.sock",
	}
	hooks.JujuEnv(env, "kv/0")
	app := map[string]string{hooks.EnvRelationID: "db:7", hooks.EnvRemoteService: "pg"}
	if hooks.JujuEnv(app, ""); app["JUJU_REMOTE_APP"] != "pg" || app["JUJU_REMOTE_UNIT"] != "" {
		t.Errorf("JujuEnv for the service's change: JUJU_REMOTE_APP %q, JUJU_REMOTE_UNIT %q; want pg and none", app["JUJU_REMOTE_APP"], app["JUJU_REMOTE_UNIT"])
	}
	want := map[string]string{
		"JUJU_UNIT_NAME": "logger/0", "JUJU_CHARM_DIR": "/var/lib/x/charm", "CHARM_DIR": "/var/lib/x/charm",
		"JUJU_HOOK_NAME": "db-relation-joined", "JUJU_MACHINE_ID": "3", "JUJU_RELATION": "db", "JUJU_RELATION_ID": "db:7",
		"JUJU_REMOTE_UNIT": "pg/1", "JUJU_REMOTE_APP": "pg", "JUJU_PRINCIPAL_UNIT": "kv/0", "JUJU_MODEL_NAME": "lifeline",
		"JUJU_VERSION": "2.9.0", "JUJU_AGENT_SOCKET_ADDRESS": "/var/lib/x/agent.sock", "JUJU_AGENT_SOCKET_NETWORK": "unix",
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("JujuEnv: %s = %q, want %q", k, env[k], v)
		}
	}
	if _, ok := env["JUJU_DEPARTING_UNIT"]; ok {
		t.Errorf("JujuEnv set JUJU_DEPARTING_UNIT outside relation-departed")
	}
}

func TestMissingTools(t *testing.T) {
	lines := []string{
		"hooks/install: 3: goal-state: not found",
		"hooks/install: line 4: secret-get: command not found",
		"hooks/install: line 5: frobnicate: command not found",
		"hooks/install: line 6: is-leader: command not found",
		"sh: 1: goal-state: not found",
		"installing: not found in cache",
	}
	got := hooks.MissingTools(lines)
	if want := []string{"goal-state", "secret-get"}; !slices.Equal(got, want) {
		t.Errorf("MissingTools() = %q, want %q", got, want)
	}
}
