package plugins

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/lifelinehq/lifeline/internal/manifest/plugin"
	"github.com/lifelinehq/lifeline/internal/manifest/plugin/plugintest"
)

// bin holds the example plugins, built once.
var bin string

func TestMain(m *testing.M) {
	os.Exit(func() int {
		dir, err := os.MkdirTemp("", "plugins-test-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		if err := plugintest.Build(dir, plugintest.File, plugintest.DNSRecord); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		bin = dir
		return m.Run()
	}())
}

// converge runs the protocol once the way an apply does: state, then each
// action, then state again, which must be VALID.
func converge(t *testing.T, p *plugin.Program, name, typ string, config map[string]any) *plugin.StateResponse {
	t.Helper()
	ctx := context.Background()
	s, err := p.State(ctx, name, typ, config)
	if err != nil {
		t.Fatalf("State: %v", err)
	}
	for _, a := range s.Actions {
		if err := p.Do(ctx, name, typ, config, a); err != nil {
			t.Fatalf("Do(%s): %v", a.Name, err)
		}
	}
	after, err := p.State(ctx, name, typ, config)
	if err != nil || after.Status != plugin.StatusValid {
		t.Fatalf("State after the actions = %+v, %v; want VALID", after, err)
	}
	return s
}

func TestFile(t *testing.T) {
	var out strings.Builder
	p := &plugin.Program{Path: filepath.Join(bin, "file"), Output: &out}
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "motd")
	config := map[string]any{"path": path, "content": "hello\n", "mode": "0600"}

	s := converge(t, p, "motd", "exec:./file", config)
	if s.Status != plugin.StatusStale || s.StaleState != nil || len(s.Actions) != 1 || s.Actions[0].Name != "write" {
		t.Errorf("first State = %+v, want STALE with one write and no staleState", s)
	}
	if b, _ := os.ReadFile(path); string(b) != "hello\n" {
		t.Errorf("file holds %q after write", b)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("file mode %v, want 0600", fi.Mode().Perm())
	}
	if !strings.Contains(out.String(), "wrote "+path) {
		t.Errorf("Output = %q, want the action's report", out.String())
	}
	v, err := p.State(ctx, "motd", "exec:./file", config)
	if err != nil || v.State["content"] != "hello\n" || v.State["mode"] != "0600" {
		t.Errorf("VALID state = %+v, %v", v, err)
	}

	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	s = converge(t, p, "motd", "exec:./file", config)
	if s.StaleState["mode"] != "0644" {
		t.Errorf("State after a chmod = %+v, want STALE with the mode it has", s)
	}

	r, err := p.Init(ctx, "motd", "exec:./file")
	if err != nil {
		t.Fatal(err)
	}
	errs := r.Validate(map[string]any{"path": "relative", "mode": "999", "size": 3})
	if len(errs) != 4 {
		t.Errorf("Validate(bad) = %v, want 4 errors (path, mode, size, content)", errs)
	}
}

func TestDNSRecord(t *testing.T) {
	zone := t.TempDir()
	p := &plugin.Program{Path: filepath.Join(bin, "dns-record"), Plugs: map[string]plugin.Plug{"zone": {Path: zone, Writable: true}}}
	ctx := context.Background()
	config := map[string]any{"name": "www", "address": "10.0.0.7"}

	s := converge(t, p, "dns", "exec:./dns-record", config)
	if s.Actions[0].Name != "create" || s.StaleState != nil {
		t.Errorf("first State = %+v, want STALE with create", s)
	}
	v, _ := p.State(ctx, "dns", "exec:./dns-record", config)
	if v.State["address"] != "10.0.0.7" || v.State["ttl"] != 300.0 {
		t.Errorf("VALID state = %v, want the address and the default ttl", v.State)
	}

	config["address"] = "10.0.0.8"
	s = converge(t, p, "dns", "exec:./dns-record", config)
	if s.Actions[0].Name != "update" || s.StaleState["address"] != "10.0.0.7" {
		t.Errorf("State after a change = %+v, want STALE with update and the old address", s)
	}

	r, err := p.Init(ctx, "dns", "exec:./dns-record")
	if err != nil {
		t.Fatal(err)
	}
	if errs := r.Validate(map[string]any{"name": "www", "address": "not-an-address", "ttl": 0}); len(errs) != 2 {
		t.Errorf("Validate(bad) = %v, want the address and the ttl", errs)
	}
}

func TestDNSRecordsInParallel(t *testing.T) {
	zone := t.TempDir()
	p := &plugin.Program{Path: filepath.Join(bin, "dns-record"), Plugs: map[string]plugin.Plug{"zone": {Path: zone, Writable: true}}}
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("host%d", i)
			config := map[string]any{"name": name, "address": fmt.Sprintf("10.0.1.%d", i)}
			errs[i] = p.Do(context.Background(), name, "exec:./dns-record", config, plugin.Action{Name: "create", Args: []string{"set"}})
		}()
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("Do(host%d): %v", i, errs[i])
		}
		name := fmt.Sprintf("host%d", i)
		s, err := p.State(context.Background(), name, "exec:./dns-record", map[string]any{"name": name, "address": fmt.Sprintf("10.0.1.%d", i)})
		if err != nil || s.Status != plugin.StatusValid {
			t.Errorf("State(%s) = %+v, %v; want VALID: a parallel write lost it", name, s, err)
		}
	}
}

func TestDNSRecordPlugRefused(t *testing.T) {
	zone := t.TempDir()
	for name, plugs := range map[string]map[string]plugin.Plug{
		"not given": nil,
		"read-only": {"zone": {Path: zone}},
	} {
		t.Run(name, func(t *testing.T) {
			p := &plugin.Program{Path: filepath.Join(bin, "dns-record"), Plugs: plugs}
			_, err := p.State(context.Background(), "dns", "exec:./dns-record", map[string]any{"name": "www", "address": "10.0.0.7"})
			if !errors.Is(err, plugin.ErrPlug) {
				t.Fatalf("State = %v, want ErrPlug", err)
			}
		})
	}
}

func TestStuckStaysStale(t *testing.T) {
	path, err := plugintest.WriteStuck(t.TempDir(), "stuck")
	if err != nil {
		t.Fatal(err)
	}
	p := &plugin.Program{Path: path}
	ctx := context.Background()
	for range 2 {
		s, err := p.State(ctx, "broken", "exec:./stuck", map[string]any{})
		if err != nil || s.Status != plugin.StatusStale || len(s.Actions) != 1 {
			t.Fatalf("State = %+v, %v; want STALE with fix", s, err)
		}
		if err := p.Do(ctx, "broken", "exec:./stuck", map[string]any{}, s.Actions[0]); err != nil {
			t.Fatalf("Do(fix) = %v, want success", err)
		}
	}
}
