package examples

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lifelinehq/lifeline/charm"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// charmHooks are the hooks each example charm has.
var charmHooks = map[string][]string{
	"kv": {"config-changed", "install", "server-relation-changed", "server-relation-joined", "start", "stop", "upgrade-charm"},
	"app": {"config-changed", "db-relation-broken", "db-relation-changed", "db-relation-departed",
		"install", "start", "stop"},
	"logger": {"config-changed", "host-relation-broken", "host-relation-changed", "host-relation-created",
		"host-relation-departed", "host-relation-joined", "install", "remove", "start", "stop"},
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
	if want := []string{"app", "kv", "logger"}; !slices.Equal(dirs, want) {
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
		{"logger", true, []endpoint{{"requires", "host", "lifeline-info", pb.Scope_SCOPE_CONTAINER}}, nil, nil},
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
		out, err := exec.Command("sh", "-n", f).CombinedOutput()
		if err != nil || len(out) > 0 {
			t.Errorf("sh -n %s: %v\n%s", f, err, out)
		}
	}
}
