package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/lifelinehq/lifeline/internal/pki"
)

// TestNamedControllers: bootstrap --name keeps each controller's client
// config under its name and makes it current; controllers lists them,
// switch changes which one commands talk to, status never rewrites the
// client config, and kill-controller NAME removes one (the current one's
// removal makes "default" current again).
func TestNamedControllers(t *testing.T) {
	s := newSandbox(t)
	s.store = true
	dataDir := func(name string) string { return filepath.Join(s.dir, "lifeline", "controllers", name) }
	t.Cleanup(func() {
		for _, n := range []string{"alpha", "beta"} {
			if pid, ok := runningController(dataDir(n)); ok {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	if out := s.ok(t, "controllers"); !strings.Contains(out, "no controllers") {
		t.Errorf("controllers before any = %q, want it to say there are none", out)
	}
	ports := map[string]int{}
	for _, n := range []string{"alpha", "beta"} {
		ports[n] = freePorts(t)
		out := s.ok(t, "bootstrap", "--name", n, "--api-port", fmt.Sprint(ports[n]), "--provider", "manual")
		if !strings.Contains(out, "current controller: "+n) || !strings.Contains(out, dataDir(n)) {
			t.Errorf("bootstrap --name %s said:\n%s\nwant it current, its data in %s", n, out, dataDir(n))
		}
	}
	listed := func() map[string]knownControllerDoc {
		t.Helper()
		var docs []knownControllerDoc
		if err := json.Unmarshal([]byte(s.ok(t, "controllers", "--format", "json")), &docs); err != nil {
			t.Fatal(err)
		}
		out := map[string]knownControllerDoc{}
		for _, d := range docs {
			out[d.Name] = d
		}
		return out
	}
	docs := listed()
	if len(docs) != 2 || !docs["beta"].Current || docs["alpha"].Current || docs["alpha"].User != "admin" ||
		len(docs["alpha"].Controllers) == 0 || !strings.HasSuffix(docs["alpha"].Controllers[0], fmt.Sprintf(":%d", ports["alpha"])) {
		t.Fatalf("controllers = %+v, want alpha and beta (current), admin's, at their ports", docs)
	}
	if out := s.ok(t, "controllers"); !strings.Contains(out, "beta*") {
		t.Errorf("controllers = %q, want beta marked current", out)
	}
	s.fails(t, 1, []string{"no controller called gamma (known: alpha, beta)"}, "switch", "gamma")
	s.ok(t, "switch", "alpha")
	config := filepath.Join(s.dir, "lifeline", "controllers", "alpha", "client.json")
	before, err := os.ReadFile(config)
	if err != nil {
		t.Fatal(err)
	}
	if out := s.ok(t, "status", "--format", "json"); !strings.Contains(out, fmt.Sprintf(":%d", ports["alpha"])) {
		t.Errorf("status after switch alpha = %s, want alpha's controller", out)
	}
	if after, _ := os.ReadFile(config); !bytes.Equal(before, after) {
		t.Errorf("status rewrote the client config:\n%s\nwas\n%s", after, before)
	}
	s.ok(t, "kill-controller", "beta")
	if docs := listed(); len(docs) != 1 || !docs["alpha"].Current {
		t.Errorf("controllers after kill-controller beta = %+v, want alpha alone, current", docs)
	}
	s.ok(t, "kill-controller")
	if docs := listed(); len(docs) != 0 {
		t.Errorf("controllers after kill-controller = %+v, want none", docs)
	}
	if _, err := os.Stat(filepath.Join(s.dir, "lifeline", currentControllerFile)); !os.IsNotExist(err) {
		t.Errorf("current-controller after the current one's removal: %v, want it gone", err)
	}
	s.store = false
	s.fails(t, 1, []string{"LIFELINE_CONFIG is set"}, "controllers")
}

// TestAddressCache: learned addresses are read before the config's own,
// which stay; a damaged cache is ignored.
func TestAddressCache(t *testing.T) {
	path := filepath.Join(t.TempDir(), "client.json")
	cfg := pki.ClientConfig{Controllers: []string{"10.0.0.5:17070"}}
	if got := withCachedAddresses(cfg, path); len(got.Controllers) != 1 {
		t.Errorf("without a cache = %v, want the config's", got.Controllers)
	}
	if err := writeAddressCache(path, []string{"10.0.0.6:17070", "10.0.0.5:17070"}); err != nil {
		t.Fatal(err)
	}
	if got := withCachedAddresses(pki.ClientConfig{Controllers: []string{"10.0.0.5:17070", "vip:17070"}}, path); strings.Join(got.Controllers, " ") != "10.0.0.6:17070 10.0.0.5:17070 vip:17070" {
		t.Errorf("with a cache = %v, want the learned first, then the config's own", got.Controllers)
	}
	if err := os.WriteFile(addressCachePath(path), []byte(`{"controllers":["no port"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := withCachedAddresses(cfg, path); strings.Join(got.Controllers, " ") != "10.0.0.5:17070" {
		t.Errorf("with a damaged cache = %v, want the config's", got.Controllers)
	}
}
