package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/lifelinehq/lifeline/internal/names"
	"github.com/lifelinehq/lifeline/internal/pki"
	"github.com/lifelinehq/lifeline/internal/testing/e2etest"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
)

// writeConfig writes a valid client config for a controller at addr.
func writeConfig(t *testing.T, path, addr string) {
	t.Helper()
	ca, err := pki.NewCA("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cred, _, err := pki.NewCredential(names.AdminTag)
	if err != nil {
		t.Fatal(err)
	}
	cfg := pki.ClientConfig{Controllers: []string{addr}, CACert: string(ca.CertPEM()), Tag: cred.Tag, Secret: cred.Secret}
	if err := pki.WriteClientConfig(path, cfg); err != nil {
		t.Fatal(err)
	}
}

// statusJSON runs ctl status --format json and decodes it.
func (s *sandbox) statusJSON(t *testing.T) map[string]any {
	t.Helper()
	out := s.ok(t, "status", "--format", "json")
	var doc map[string]any
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("ctl status --format json: %v\n%s", err, out)
	}
	return doc
}

// object digs into a decoded document: object(doc, "services", "kv").
func object(t *testing.T, doc map[string]any, path ...string) map[string]any {
	t.Helper()
	cur := doc
	for i, p := range path {
		next, ok := cur[p].(map[string]any)
		if !ok {
			t.Fatalf("status has no object at %s: %v", strings.Join(path[:i+1], "."), cur)
		}
		cur = next
	}
	return cur
}

func (s *sandbox) pid(t *testing.T) int {
	t.Helper()
	pid, err := readPID(s.dataDir + "/" + pidFile)
	if err != nil {
		t.Fatalf("controller pid: %v", err)
	}
	return pid
}

// TestCommandsAgainstAController runs every command against one real
// controller, started by ctl bootstrap and stopped by ctl kill-controller.
// The steps share the model, so they run in order.
func TestCommandsAgainstAController(t *testing.T) {
	s := newSandbox(t)
	s.port = freePorts(t)
	addr := fmt.Sprintf("127.0.0.1:%d", s.port)

	t.Run("bootstrap", func(t *testing.T) {
		// The manual provider: no machine agents, so that units stay
		// allocating and dying units wait; the end-to-end tests with real
		// agents are in ../../e2e.
		out := s.ok(t, "bootstrap", "--data-dir", s.dataDir, "--api-port", fmt.Sprint(s.port), "--provider", "manual")
		for _, want := range []string{"controller started", addr, s.config, s.dataDir, "ctl deploy"} {
			if !strings.Contains(out, want) {
				t.Errorf("ctl bootstrap said:\n%s\nwant %q in it", out, want)
			}
		}
		fi, err := os.Stat(s.config)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("client config mode %v, want 0600", fi.Mode().Perm())
		}
		rec, err := readRecord(recordPath(s.config))
		if err != nil || rec.DataDir != s.dataDir || rec.APIAddr != addr {
			t.Errorf("controller record = %+v, %v; want data dir %s and address %s", rec, err, s.dataDir, addr)
		}
		if !isController(s.pid(t), s.dataDir) {
			t.Errorf("pid %d is not the controller", s.pid(t))
		}
	})
	t.Run("bootstrap refused while the controller answers", func(t *testing.T) {
		s.fails(t, 1, []string{"answers at " + addr, "ctl kill-controller"}, "bootstrap", "--data-dir", s.dataDir+"2", "--api-port", fmt.Sprint(s.port))
	})
	t.Run("version", func(t *testing.T) {
		out := s.ok(t, "version")
		if !strings.Contains(out, "client:     "+stampedLine+"\n") || !strings.Contains(out, "controller: "+stampedLine+" on ") {
			t.Errorf("ctl version said:\n%s\nwant the client's and the controller's %s", out, stampedLine)
		}
		var doc struct {
			Client     map[string]string `json:"client"`
			Controller map[string]string `json:"controller"`
		}
		if err := json.Unmarshal([]byte(s.ok(t, "version", "--format", "json")), &doc); err != nil {
			t.Fatal(err)
		}
		for _, v := range []map[string]string{doc.Client, doc.Controller} {
			if v["version"] != e2etest.StampVersion || v["commit"] != e2etest.StampCommit || v["date"] != e2etest.StampDate || v["go_version"] == "" {
				t.Errorf("ctl version --format json = %+v, want both stamped %s %s %s", doc, e2etest.StampVersion, e2etest.StampCommit, e2etest.StampDate)
			}
		}
		if doc.Controller["id"] == "" {
			t.Errorf("ctl version --format json = %+v, want the controller's id", doc)
		}
	})
	t.Run("wait on an empty model", func(t *testing.T) {
		if out := s.ok(t, "wait", "--timeout", "30s"); !strings.Contains(out, "settled") {
			t.Errorf("ctl wait said %q, want settled", out)
		}
		doc := s.statusJSON(t)
		if len(object(t, doc, "machines"))+len(object(t, doc, "services")) != 0 || len(doc["relations"].([]any)) != 0 {
			t.Errorf("status of a new model = %v, want it empty", doc)
		}
	})
	t.Run("deploy", func(t *testing.T) {
		out := s.ok(t, "deploy", "testdata/kv", "-n", "2", "--service-config", "port=9000", "--service-config", "name=first")
		if !strings.Contains(out, "kv/0 on machine 0") || !strings.Contains(out, "kv/1 on machine 1") || !strings.Contains(out, "revision 1") {
			t.Errorf("ctl deploy kv said:\n%s\nwant kv/0 and kv/1 on machines 0 and 1, revision 1", out)
		}
		if out := s.ok(t, "deploy", "testdata/app"); !strings.Contains(out, "app/0 on machine 2") {
			t.Errorf("ctl deploy app said:\n%s\nwant one unit, app/0 on machine 2", out)
		}
		s.fails(t, 2, []string{"charm logger is a subordinate", "-n"}, "deploy", "testdata/logger", "-n", "1")
		if out := s.ok(t, "deploy", "testdata/logger"); !strings.Contains(out, "subordinate service logger") {
			t.Errorf("ctl deploy logger said:\n%s\nwant a subordinate service", out)
		}
		s.fails(t, 1, []string{"ctl: service kv already exists"}, "deploy", "testdata/kv")
		s.fails(t, 1, []string{`ctl: config option "port" wants an int, got "abc"`}, "deploy", "testdata/kv", "kv2", "--service-config", "port=abc")
		s.fails(t, 1, []string{"ctl: read charm: open testdata/nope: no such file"}, "deploy", "testdata/nope")
		s.fails(t, 1, []string{"ctl: machine 42 not found"}, "deploy", "testdata/kv", "kv3", "--to", "42")
	})
	t.Run("add-unit", func(t *testing.T) {
		if out := s.ok(t, "add-unit", "app", "--to", "0"); !strings.Contains(out, "app/1 on machine 0") {
			t.Errorf("ctl add-unit app --to 0 said %q, want app/1 on machine 0", out)
		}
		s.fails(t, 1, []string{"ctl: service nope not found"}, "add-unit", "nope")
	})
	var emptyMachine string
	t.Run("add-machine", func(t *testing.T) {
		out := s.ok(t, "add-machine")
		m := regexp.MustCompile(`created machine (\d+)`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("ctl add-machine said %q, want the machine's id", out)
		}
		emptyMachine = m[1]
		out = s.ok(t, "add-machine", "-n", "2", "--manual", "--expires", "10m")
		cmds := regexp.MustCompile(`join token for machine (\d+) \(joins one host, once, until \S+\):\n  (\S+)\n.*\n  lifelined machine-agent --join-file FILE --controller (\S+) --data-dir (\S+)`).FindAllStringSubmatch(out, -1)
		if len(cmds) != 2 {
			t.Fatalf("ctl add-machine -n 2 --manual said:\n%s\nwant two join tokens and machine-agent commands", out)
		}
		for _, c := range cmds {
			tok, err := pki.DecodeJoinToken(c[2])
			if err != nil {
				t.Errorf("join token %q: %v", c[2], err)
			} else if tok.Machine != c[1] || time.Until(tok.Expires) > 10*time.Minute {
				t.Errorf("join token for machine %s until %s, want machine %s within 10m", tok.Machine, tok.Expires, c[1])
			}
			if c[3] != addr {
				t.Errorf("--controller %s, want %s", c[3], addr)
			}
		}
		out = s.ok(t, "join-token", cmds[0][1])
		if !strings.Contains(out, "join token for machine "+cmds[0][1]) {
			t.Errorf("ctl join-token %s said:\n%s\nwant a new join token", cmds[0][1], out)
		}
		s.fails(t, 1, []string{"ctl: machine " + emptyMachine + " is not a manual machine: the provisioner starts its agent"}, "join-token", emptyMachine)
		s.fails(t, 2, nil, "join-token")
		s.fails(t, 2, nil, "add-machine", "--expires", "1h")
	})
	t.Run("add-controller", func(t *testing.T) {
		token := s.dir + "/controller.token"
		out := s.ok(t, "add-controller", "--token-file", token, "--expires", "10m")
		for _, want := range []string{"wrote a controller join token to " + token, "works once",
			"lifelined controller --join-file " + token, "--etcd-endpoints unix://", "--namespace /lifeline/"} {
			if !strings.Contains(out, want) {
				t.Errorf("ctl add-controller said:\n%s\nwant %q in it", out, want)
			}
		}
		fi, err := os.Stat(token)
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("the token file: %v, %v; want mode 0600", fi, err)
		}
		data, _ := os.ReadFile(token)
		j, err := pki.DecodeControllerJoin(string(data))
		if err != nil {
			t.Fatalf("the token file holds no controller join token: %v", err)
		}
		if len(j.Controllers) != 1 || j.Controllers[0] != addr || time.Until(j.Expires) > 10*time.Minute || time.Until(j.Expires) < 9*time.Minute {
			t.Errorf("the token names %v until %s, want %s for 10 minutes", j.Controllers, j.Expires, addr)
		}
		if strings.Contains(out, j.Secret) {
			t.Errorf("ctl add-controller printed the token's secret:\n%s", out)
		}
	})
	t.Run("add-relation", func(t *testing.T) {
		if out := s.ok(t, "add-relation", "app", "kv"); !strings.Contains(out, "app:db kv:server") {
			t.Errorf("ctl add-relation app kv said %q, want the relation's key", out)
		}
		s.ok(t, "add-relation", "app", "logger")
		s.fails(t, 1, []string{"ctl: no endpoints of kv:server and logger can be related"}, "add-relation", "kv:server", "logger")
	})
	t.Run("status", func(t *testing.T) {
		doc := s.statusJSON(t)
		checkShape(t, doc)
		kv0 := object(t, doc, "services", "kv", "units", "kv/0")
		if kv0["life"] != "alive" || kv0["machine"] != "0" || kv0["agent"] != "allocating" || kv0["principal"] != "" {
			t.Errorf("kv/0 = %v, want alive, on machine 0, agent allocating, no principal", kv0)
		}
		if kv := object(t, doc, "services", "kv"); kv["charm"] != "kv" || kv["revision"] != float64(1) || kv["life"] != "alive" {
			t.Errorf("service kv = %v, want charm kv revision 1, alive", kv)
		}
		if m0 := object(t, doc, "machines", "0"); fmt.Sprint(m0["units"]) != "[app/1 kv/0]" || m0["agent"] != "pending" {
			t.Errorf("machine 0 = %v, want units app/1 and kv/0, agent pending", m0)
		}
		scopes := map[string]string{}
		for _, r := range doc["relations"].([]any) {
			rel := r.(map[string]any)
			scopes[rel["key"].(string)] = rel["scope"].(string)
		}
		if scopes["app:db kv:server"] != "global" || scopes["app:juju-info logger:host"] != "container" || len(scopes) != 3 {
			t.Errorf("relations = %v, want app-kv (global), app-logger (container) and kv's peers", scopes)
		}

		var ydoc map[string]any
		out := s.ok(t, "status", "--format", "yaml")
		if err := yaml.Unmarshal([]byte(out), &ydoc); err != nil {
			t.Fatalf("status --format yaml: %v\n%s", err, out)
		}
		checkShape(t, ydoc)
		if got := object(t, ydoc, "services", "app", "units", "app/1")["machine"]; got != "0" {
			t.Errorf("yaml app/1 machine = %v, want 0", got)
		}

		out = s.ok(t, "status")
		for _, want := range []string{"Machine ", "Service ", "Unit ", "Relation ", "kv/0 ", "app:db kv:server", "allocating"} {
			if !strings.Contains(out, want) {
				t.Errorf("ctl status said:\n%s\nwant %q in it", out, want)
			}
		}
	})
	t.Run("status selectors", func(t *testing.T) { testStatusSelectors(t, s) })
	t.Run("show-unit and show-machine", func(t *testing.T) { testShow(t, s) })
	t.Run("status --watch", func(t *testing.T) { testWatch(t, s) })
	t.Run("config", func(t *testing.T) {
		out := s.ok(t, "config", "kv")
		if !regexp.MustCompile(`(?m)^port\s+9000\s+int\s+8080\s+the port to serve on$`).MatchString(out) ||
			!regexp.MustCompile(`(?m)^debug\s+false\s+boolean\s+false$`).MatchString(out) ||
			!regexp.MustCompile(`(?m)^name\s+first\s+string\s+-\s+no default$`).MatchString(out) {
			t.Errorf("ctl config kv said:\n%s\nwant port, debug and name with values, types, defaults and descriptions", out)
		}
		if out := s.ok(t, "config", "kv", "port"); out != "9000\n" {
			t.Errorf("ctl config kv port = %q, want 9000", out)
		}
		s.ok(t, "config", "kv", "port=9100", "debug=true", "name=a b=c")
		for key, want := range map[string]string{"port": "9100", "debug": "true", "name": "a b=c"} {
			if out := s.ok(t, "config", "kv", key); out != want+"\n" {
				t.Errorf("after set, ctl config kv %s = %q, want %q", key, out, want)
			}
		}
		s.ok(t, "config", "kv", "--reset", "port", "--reset", "name")
		if out := s.ok(t, "config", "kv", "port"); out != "8080\n" {
			t.Errorf("after --reset port, port = %q, want the default 8080", out)
		}
		if out := s.ok(t, "config", "kv", "name"); out != "\n" {
			t.Errorf("after --reset name, name = %q, want nothing (no default)", out)
		}
		s.fails(t, 1, []string{`ctl: config option "port" wants an int, got "abc"`}, "config", "kv", "port=abc")
		s.fails(t, 1, []string{`ctl: service kv has no config option "colour"`}, "config", "kv", "colour")
		s.fails(t, 1, []string{`ctl: unknown config option "colour"`}, "config", "kv", "colour=red")
		s.fails(t, 1, []string{"ctl: service nope not found"}, "config", "nope")
		s.fails(t, 2, []string{"not both"}, "config", "kv", "port", "debug=false")
	})
	t.Run("resolved refused for a unit not in error", func(t *testing.T) {
		s.fails(t, 1, []string{"ctl: unit kv/0 is not in an error state"}, "resolved", "kv/0")
		s.fails(t, 1, []string{"ctl: unit kv/0 is not in an error state"}, "resolved", "--no-retry", "kv/0")
		r := s.fails(t, 1, []string{"ctl: unit kv/0 is not in an error state", "ctl: unit kv/9 not found"}, "resolved", "kv/0", "kv/9")
		if n := strings.Count(r.stderr, "\n"); n != 2 {
			t.Errorf("%v\nwant one line per refusal", r)
		}
		if out := s.ok(t, "resolved", "--all"); out != "no unit is in an error state\n" {
			t.Errorf("ctl resolved --all with no unit in error said %q, want that none is", out)
		}
	})
	t.Run("wait times out naming what is unsettled", func(t *testing.T) {
		r := s.fails(t, 1, []string{"timed out after 2s", "kv/0 (allocating, new)", "app/1 (allocating, new)"}, "wait", "--timeout", "2s")
		if last := strings.TrimRight(r.stderr, "\n"); !strings.HasPrefix(last[strings.LastIndex(last, "\n")+1:], "ctl: timed out") {
			t.Errorf("%v\nwant it to end with one ctl: line", r)
		}
	})
	t.Run("destroy-machine refused with units assigned", func(t *testing.T) {
		r := s.fails(t, 1, []string{"ctl: machine 0 has units app/1 and kv/0 assigned"}, "destroy-machine", "0", emptyMachine)
		if strings.Count(r.stderr, "ctl:") != 1 || !strings.Contains(r.stdout, "destroying machine "+emptyMachine) {
			t.Errorf("%v\nwant machine 0 refused on one line and machine %s destroyed", r, emptyMachine)
		}
		if m := object(t, s.statusJSON(t), "machines", emptyMachine); m["life"] != "dying" {
			t.Errorf("machine %s = %v, want dying", emptyMachine, m)
		}
	})
	t.Run("destroy-relation", func(t *testing.T) {
		s.ok(t, "destroy-relation", "kv", "app")
		s.fails(t, 1, []string{"ctl: no relation between app and kv"}, "destroy-relation", "app", "kv")
	})
	t.Run("destroy-unit", func(t *testing.T) {
		s.ok(t, "destroy-unit", "kv/1")
		if u := object(t, s.statusJSON(t), "services", "kv", "units", "kv/1"); u["life"] != "dying" || u["waiting_for"] == nil {
			t.Errorf("kv/1 = %v, want dying and waiting for its agent", u)
		}
		r := s.fails(t, 1, []string{"ctl: unit nope/0 not found", "ctl: unit kv/9 not found"}, "destroy-unit", "nope/0", "kv/9")
		if n := strings.Count(r.stderr, "\n"); n != 2 {
			t.Errorf("%v\nwant one line per failure", r)
		}
		s.ok(t, "destroy-unit", "--force", "--no-wait", "app/0")
		poll.UntilSays(t, "app/0 gone after destroy-unit --force --no-wait", func() (bool, string) {
			units := object(t, s.statusJSON(t), "services", "app", "units")
			u, ok := units["app/0"]
			return !ok, fmt.Sprint(u)
		})
	})
	t.Run("destroy-service", func(t *testing.T) {
		r := s.fails(t, 1, []string{"ctl: service nope not found"}, "destroy-service", "logger", "nope")
		if !strings.Contains(r.stdout, "destroying service logger") {
			t.Errorf("%v\nwant logger destroyed though nope failed", r)
		}
		services := object(t, s.statusJSON(t), "services")
		if l, ok := services["logger"].(map[string]any); ok && l["life"] != "dying" {
			t.Errorf("logger = %v, want dying (it has a relation) or gone", l)
		}
	})
	t.Run("kill-controller --keep-data, then bootstrap again", func(t *testing.T) {
		pid := s.pid(t)
		out := s.ok(t, "kill-controller", "--keep-data")
		for _, want := range []string{"kept its data directory " + s.dataDir, "the client config " + s.config, "`ctl bootstrap` with this client config starts this controller again"} {
			if !strings.Contains(out, want) {
				t.Errorf("ctl kill-controller --keep-data said:\n%s\nwant %q in it", out, want)
			}
		}
		if processAlive(pid) {
			t.Fatalf("controller %d still runs after kill-controller", pid)
		}
		s.fails(t, 1, []string{"ctl: cannot reach the controller at " + addr}, "status")

		// Another data directory, or another provider, would start a
		// new controller and leave the kept one's data behind.
		other := s.dataDir + "2"
		s.fails(t, 1, []string{"ctl: the controller of " + s.config + " was stopped with its data kept in " + s.dataDir, "without --data-dir", "ctl kill-controller"},
			"bootstrap", "--data-dir", other)
		s.fails(t, 1, []string{"ctl: the controller kept in " + s.dataDir + " has provider manual, not local"}, "bootstrap", "--provider", "local")
		if _, err := os.Stat(other); !os.IsNotExist(err) {
			t.Errorf("a refused bootstrap made %s (%v)", other, err)
		}

		// The plain command, as kill-controller said: the same controller,
		// its data directory, address and provider.
		out = s.ok(t, "bootstrap")
		for _, want := range []string{"the controller of " + s.config + " was stopped with its data kept in " + s.dataDir + ": restarting it there",
			"controller restarted on its data", "API at " + addr + ", provider manual", "data directory: " + s.dataDir} {
			if !strings.Contains(out, want) {
				t.Errorf("ctl bootstrap after kill-controller --keep-data said:\n%s\nwant %q in it", out, want)
			}
		}
		if !isController(s.pid(t), s.dataDir) {
			t.Errorf("pid %d is not the controller of %s", s.pid(t), s.dataDir)
		}
		if _, ok := object(t, s.statusJSON(t), "services")["kv"]; !ok {
			t.Errorf("after a restart, service kv is gone")
		}
		if m := object(t, s.statusJSON(t), "machines", "0"); m["instance"] != "" {
			t.Errorf("machine 0 = %v after the restart, want no instance (the manual provider starts none)", m)
		}
	})
	t.Run("kill-controller", func(t *testing.T) {
		pid := s.pid(t)
		s.ok(t, "kill-controller")
		if processAlive(pid) {
			t.Errorf("controller %d still runs after kill-controller", pid)
		}
		for _, p := range []string{s.dataDir, s.config, recordPath(s.config)} {
			if _, err := os.Stat(p); !os.IsNotExist(err) {
				t.Errorf("%s is still there after kill-controller (%v)", p, err)
			}
		}
		s.fails(t, 1, []string{"ctl bootstrap"}, "status")
	})
}

// testWatch follows status --watch through one change, then interrupts it.
func testWatch(t *testing.T, s *sandbox) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := s.command(ctx, "status", "--watch", "--format", "json")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(stdout)
	var first map[string]any
	if err := dec.Decode(&first); err != nil {
		t.Fatalf("status --watch: %v", err)
	}
	checkShape(t, first)
	before := len(object(t, first, "machines"))
	s.ok(t, "add-machine")
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); err != nil {
			t.Fatalf("status --watch after add-machine: %v", err)
		}
		if len(object(t, doc, "machines")) == before+1 {
			break
		}
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("status --watch after an interrupt: %v, want exit status 0", err)
	}
}
