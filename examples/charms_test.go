package examples

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/lifelinehq/lifeline/internal/charm"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// charmHooks are the hooks each example charm has.
var charmHooks = map[string][]string{
	"kv": {"config-changed", "install", "server-relation-changed", "server-relation-joined", "start", "stop", "upgrade-charm"},
	"app": {"config-changed", "db-relation-broken", "db-relation-changed", "db-relation-departed",
		"install", "start", "stop"},
	"logger": {"config-changed", "host-relation-broken", "host-relation-changed", "host-relation-created",
		"host-relation-departed", "host-relation-joined", "install", "remove", "start", "stop"},
	"token-source": {"config-changed", "install", "leader-elected", "leader-settings-changed", "start", "stop",
		"token-relation-changed", "token-relation-departed", "token-relation-joined", "upgrade-charm"},
	"token-sink": {"install", "token-relation-broken", "token-relation-changed", "token-relation-departed"},
}

func TestCharmsRead(t *testing.T) {
	entries, err := os.ReadDir("charms")
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, e := range entries {
		if e.IsDir() {
			dirs = append(dirs, e.Name())
		}
	}
	if want := []string{"app", "kv", "logger", "token-sink", "token-source"}; !slices.Equal(dirs, want) {
		t.Errorf("charms/ holds %q, want %q (update charmHooks and this test)", dirs, want)
	}
	for _, name := range dirs {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join("charms", name)
			c, err := charm.ReadDir(dir)
			if err != nil {
				t.Fatalf("ReadDir(%s) = %v", dir, err)
			}
			if c.Meta.Name != name {
				t.Errorf("ReadDir(%s).Meta.Name = %q, want %q", dir, c.Meta.Name, name)
			}
			// ReadDir lists only executable hooks: a hook file that is not
			// executable is missing here.
			if want := charmHooks[name]; !slices.Equal(c.Hooks, want) {
				t.Errorf("ReadDir(%s).Hooks = %q, want %q", dir, c.Hooks, want)
			}
			files, err := os.ReadDir(filepath.Join(dir, "hooks"))
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range files {
				if !slices.Contains(c.Hooks, f.Name()) {
					t.Errorf("hooks/%s of %s is not an executable hook", f.Name(), name)
				}
			}
			// With its servers built (make charms), the charm fits in an
			// archive: its files' size bounds the archive's, give or take
			// tar's headers. (Packing it is slow under the race detector.)
			var size int64
			err = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
				if err != nil || !d.Type().IsRegular() {
					return err
				}
				info, err := d.Info()
				if err != nil {
					return err
				}
				size += info.Size() + 1024
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if size > charm.MaxSize {
				t.Errorf("charm %s holds %d bytes, over an archive's %d", name, size, charm.MaxSize)
			}
		})
	}
}

func TestCharmsMetadata(t *testing.T) {
	type endpoint struct {
		role, name, iface string
		scope             pb.Scope
	}
	tests := []struct {
		name        string
		subordinate bool
		endpoints   []endpoint
		port        any // the port option's default; nil: no option
		// daemons are the host daemons the charm declares, which its
		// machine agent runs: no hook starts a server.
		daemons []string
	}{
		{"kv", false, []endpoint{{"provides", "server", "kv", pb.Scope_SCOPE_GLOBAL}}, int64(7070), []string{"kv-server"}},
		{"app", false, []endpoint{{"requires", "db", "kv", pb.Scope_SCOPE_GLOBAL}}, int64(8080), []string{"app-server"}},
		{"logger", true, []endpoint{{"requires", "host", "juju-info", pb.Scope_SCOPE_CONTAINER}}, nil, nil},
		{"token-source", false, []endpoint{{"provides", "token", "token", pb.Scope_SCOPE_GLOBAL}}, int64(8080), nil},
		{"token-sink", false, []endpoint{{"requires", "token", "token", pb.Scope_SCOPE_GLOBAL}}, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := charm.ReadDir(filepath.Join("charms", tt.name))
			if err != nil {
				t.Fatal(err)
			}
			if c.Meta.Subordinate != tt.subordinate {
				t.Errorf("subordinate = %v, want %v", c.Meta.Subordinate, tt.subordinate)
			}
			var got []endpoint
			for role, eps := range map[string]map[string]charm.Relation{
				"provides": c.Meta.Provides, "requires": c.Meta.Requires, "peers": c.Meta.Peers,
			} {
				for n, r := range eps {
					got = append(got, endpoint{role, n, r.Interface, r.Scope})
				}
			}
			slices.SortFunc(got, func(a, b endpoint) int { return strings.Compare(a.role+" "+a.name, b.role+" "+b.name) })
			if !slices.Equal(got, tt.endpoints) {
				t.Errorf("endpoints = %v, want %v", got, tt.endpoints)
			}
			opt, ok := c.Config.Options["port"]
			switch {
			case tt.port == nil && ok:
				t.Errorf("config has a port option, want none")
			case tt.port != nil && (!ok || opt.Type != "int" || opt.Default != tt.port):
				t.Errorf("config port = %+v (present %v), want an int defaulting to %v", opt, ok, tt.port)
			}
			var daemons []string
			if c.Meta.Host != nil {
				for _, d := range c.Meta.Host.Daemons {
					daemons = append(daemons, d.Name)
				}
			}
			if !slices.Equal(daemons, tt.daemons) {
				t.Errorf("host daemons %q, want %q", daemons, tt.daemons)
			}
		})
	}
}

// TestShellSyntax runs every hook and shell library of the charms, and the
// tests' fake hook tool, through sh -n.
func TestShellSyntax(t *testing.T) {
	files, err := filepath.Glob("charms/*/hooks/*")
	if err != nil {
		t.Fatal(err)
	}
	libs, err := filepath.Glob("charms/*/lib/*")
	if err != nil {
		t.Fatal(err)
	}
	actions, err := filepath.Glob("charms/*/actions/*")
	if err != nil {
		t.Fatal(err)
	}
	files = append(append(append(files, libs...), actions...), "testdata/fake-tool")
	if len(files) < 20 {
		t.Fatalf("found only %d shell files: %q", len(files), files)
	}
	for _, f := range files {
		// The Juju-style charms are bash, as Juju's shell charms are: their
		// hooks say so on their #! line, their libraries in a shellcheck
		// directive.
		shell := "sh"
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if first, _, _ := strings.Cut(string(data), "\n"); strings.Contains(first, "bash") {
			shell = "bash"
		}
		out, err := exec.Command(shell, "-n", f).CombinedOutput()
		if err != nil || len(out) > 0 {
			t.Errorf("%s -n %s: %v\n%s", shell, f, err, out)
		}
	}
}

// TestJujuCharmsOnlyJuju checks that the charms written as for Juju
// (token-source, token-sink) use nothing of Lifeline's own: no LIFELINE_
// variable, no host claims, no Lifeline keys in actions.yaml, no hook
// tool Juju lacks. What they show runs unchanged on Juju.
func TestJujuCharmsOnlyJuju(t *testing.T) {
	lifelineOnly := regexp.MustCompile(`LIFELINE_|(^|[\s;|&(])(log|checkpoint-get|checkpoint-set|action-log)\s|^\s*(host|safe|approvers|max-parallel|pause-grace|parallel|timeout):`)
	for _, name := range []string{"token-source", "token-sink"} {
		err := filepath.WalkDir(filepath.Join("charms", name), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for i, line := range strings.Split(string(data), "\n") {
				if strings.HasPrefix(strings.TrimSpace(line), "#") {
					continue
				}
				if lifelineOnly.MatchString(line) {
					t.Errorf("%s:%d uses Lifeline's own %q: %s", path, i+1, lifelineOnly.FindString(line), line)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
