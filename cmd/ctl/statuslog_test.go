package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/lifelinehq/lifeline/internal/apiclient"
	"github.com/lifelinehq/lifeline/internal/pki"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// sampleStatusLog is a unit's install failing, then resolved.
func sampleStatusLog() []*pb.StatusLogEntry {
	at := func(sec int) int64 { return time.Date(2025, 11, 21, 6, 10, sec, 500, time.UTC).UnixNano() }
	return []*pb.StatusLogEntry{
		{Kind: "agent", Status: "allocating", Message: "starting the unit agent", SinceUnixNano: at(1)},
		{Kind: "agent", Status: "executing", Message: "running install hook", Data: map[string]string{"state": "new"}, SinceUnixNano: at(2)},
		{Kind: "workload", Status: "maintenance", Message: "installing", SinceUnixNano: at(3)},
		{Kind: "agent", Status: "error", Message: `hook failed: "install"`, SinceUnixNano: at(4), Data: map[string]string{
			"state": "install-error", "hook": "install",
			"output": "fetching kv 1.2\n\tE: disk full\r\n\x1b[31mfailed\x1b[0m\n",
		}},
		{Kind: "workload", Status: "active", Message: "serving\ton :80", SinceUnixNano: at(5)},
	}
}

func TestRenderStatusLogTabular(t *testing.T) {
	var buf bytes.Buffer
	if err := renderStatusLog(&buf, "kv/0", sampleStatusLog(), formatTabular, time.UTC); err != nil {
		t.Fatal(err)
	}
	want := `Time                   Type      Status       Message
21 Nov 2025 06:10:01Z  agent     allocating   starting the unit agent
21 Nov 2025 06:10:02Z  agent     executing    running install hook
                       state=new
21 Nov 2025 06:10:03Z  workload  maintenance  installing
21 Nov 2025 06:10:04Z  agent     error        hook failed: "install"
                       hook=install state=install-error
                       output:
                         fetching kv 1.2
                                 E: disk full
                         \x1b[31mfailed\x1b[0m
21 Nov 2025 06:10:05Z  workload  active       serving on :80
`
	if got := buf.String(); got != want {
		t.Errorf("renderStatusLog tabular =\n%s\nwant\n%s", got, want)
	}

	buf.Reset()
	east := time.FixedZone("UTC+2", 2*3600)
	if err := renderStatusLog(&buf, "kv/0", sampleStatusLog()[:1], formatTabular, east); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "21 Nov 2025 08:10:01+02:00  agent") {
		t.Errorf("renderStatusLog in UTC+2 =\n%s\nwant the time in that zone", buf.String())
	}

	buf.Reset()
	if err := renderStatusLog(&buf, "kv/0", nil, formatTabular, time.UTC); err != nil {
		t.Fatal(err)
	}
	if got := buf.String(); got != "Unit kv/0 has no status changes recorded yet.\n" {
		t.Errorf("renderStatusLog of no entries = %q, want a sentence saying so", got)
	}
}

func TestRenderStatusLogJSONAndYAML(t *testing.T) {
	for _, format := range []string{formatJSON, formatYAML} {
		t.Run(format, func(t *testing.T) {
			var buf bytes.Buffer
			if err := renderStatusLog(&buf, "kv/0", sampleStatusLog(), format, time.UTC); err != nil {
				t.Fatal(err)
			}
			var doc []map[string]any
			var err error
			if format == formatJSON {
				err = json.Unmarshal(buf.Bytes(), &doc)
			} else {
				err = yaml.Unmarshal(buf.Bytes(), &doc)
			}
			if err != nil {
				t.Fatalf("%s: %v\n%s", format, err, buf.String())
			}
			if len(doc) != 5 {
				t.Fatalf("%s has %d entries, want 5:\n%s", format, len(doc), buf.String())
			}
			e := doc[3]
			data, _ := e["data"].(map[string]any)
			if e["time"] != "2025-11-21T06:10:04.0000005Z" || e["type"] != "agent" || e["status"] != "error" ||
				e["message"] != `hook failed: "install"` || data["output"] != sampleStatusLog()[3].Data["output"] {
				t.Errorf("%s entry 3 = %v, want the install failure with its time and output as is", format, e)
			}
			if _, ok := doc[0]["data"]; ok {
				t.Errorf("%s entry 0 = %v, want no data", format, doc[0])
			}
			for _, k := range []string{"time", "type", "status", "message"} {
				if _, ok := doc[0][k]; !ok {
					t.Errorf("%s entry 0 = %v, want %q in it", format, doc[0], k)
				}
			}

			buf.Reset()
			if err := renderStatusLog(&buf, "kv/0", nil, format, time.UTC); err != nil {
				t.Fatal(err)
			}
			if got := strings.TrimSpace(buf.String()); got != "[]" {
				t.Errorf("%s of no entries = %q, want an empty list", format, got)
			}
		})
	}
}

func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"plain — ünïcode":  "plain — ünïcode",
		"a\tb":             "a b",
		"a\nb\r":           `a\nb\r`,
		"\x1b[2J":          `\x1b[2J`,
		"bad \xff byte":    `bad \xff byte`,
		"c1 \u0085 ctrl":   `c1 \u0085 ctrl`,
		"del \x7f":         `del \x7f`,
		"":                 "",
		"emoji 🙂 fine\x00": `emoji 🙂 fine\x00`,
	} {
		if got := printable(in); got != want {
			t.Errorf("printable(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestShowStatusLogUsage(t *testing.T) {
	s := newSandbox(t) // no controller: usage is checked first
	for _, args := range [][]string{
		{"show-status-log"},
		{"show-status-log", "kv/0", "kv/1"},
		{"show-status-log", "kv/0", "-n", "51"},
		{"show-status-log", "kv/0", "-n", "-1"},
		{"show-status-log", "kv/0", "--format", "xml"},
	} {
		r := s.ctl(t, args...)
		if r.code != 2 || !strings.Contains(r.stderr, "usage: ctl show-status-log UNIT") {
			t.Errorf("%v\nwant exit status 2 and a usage line", r)
		}
	}
}

// TestShowStatusLogAgainstAController has a real controller keep the
// statuses that agents report through the AgentService, and ctl show them.
// There is no machine agent yet: the test acts as a manual machine's agent,
// with the credential in its join token, and as the unit agent it gets a
// credential for.
func TestShowStatusLogAgainstAController(t *testing.T) {
	s := newSandbox(t)
	s.port = freePorts(t)
	s.ok(t, "bootstrap", "--data-dir", s.dataDir, "--api-port", fmt.Sprint(s.port), "--provider", "manual")
	defer s.ok(t, "kill-controller")

	out := s.ok(t, "add-machine", "--manual")
	m := regexp.MustCompile(`(?m)^  (lifeline-join-\S+)$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("ctl add-machine --manual said:\n%s\nwant a join token", out)
	}
	tok, err := pki.DecodeJoinToken(m[1])
	if err != nil {
		t.Fatal(err)
	}
	machineID := tok.Machine
	if out := s.ok(t, "deploy", "testdata/kv", "--to", machineID); !strings.Contains(out, "kv/0 on machine "+machineID) {
		t.Fatalf("ctl deploy kv --to %s said:\n%s\nwant kv/0 on it", machineID, out)
	}

	if out := s.ok(t, "show-status-log", "kv/0"); out != "Unit kv/0 has no status changes recorded yet.\n" {
		t.Errorf("ctl show-status-log of a new unit said %q, want that it has none", out)
	}
	if out := s.ok(t, "show-status-log", "kv/0", "--format", "json"); strings.TrimSpace(out) != "[]" {
		t.Errorf("ctl show-status-log --format json of a new unit said %q, want []", out)
	}
	s.fails(t, 1, []string{"ctl: unit kv/9 not found"}, "show-status-log", "kv/9")
	s.fails(t, 1, []string{"ctl: unit nope/0 not found"}, "show-status-log", "nope/0")
	s.fails(t, 1, []string{"ctl: invalid unit name"}, "show-status-log", "kv")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	agentClient := func(cfg apiclient.Config) pb.AgentServiceClient {
		conn, err := apiclient.Dial(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return pb.NewAgentServiceClient(conn)
	}
	// Joined as a host joins: its credential made here, the token taken.
	machineCred, hash, err := pki.NewCredential("machine-" + machineID)
	if err != nil {
		t.Fatal(err)
	}
	machineCfg := pki.ClientConfig{Controllers: tok.Controllers, CACert: tok.CACert, Tag: machineCred.Tag, Secret: machineCred.Secret}
	joinConn, err := apiclient.Dial(apiclient.Config{Addresses: tok.Controllers, CACert: []byte(tok.CACert)})
	if err != nil {
		t.Fatal(err)
	}
	defer joinConn.Close()
	if _, err := pb.NewMachineJoinServiceClient(joinConn).JoinMachine(ctx, &pb.JoinMachineRequest{Machine: machineID, TokenSecret: tok.Secret, CredentialHash: hash}); err != nil {
		t.Fatalf("Join: %v", err)
	}
	machine := agentClient(apiclient.FromClientConfig(machineCfg))
	set := func(c pb.AgentServiceClient, kind pb.UnitStatusKind, st *pb.Status) {
		t.Helper()
		if _, err := c.SetUnitStatus(ctx, &pb.SetUnitStatusRequest{Unit: "kv/0", Kind: kind, Status: st}); err != nil {
			t.Fatalf("SetUnitStatus(%v, %v): %v", kind, st, err)
		}
	}
	const (
		agent    = pb.UnitStatusKind_UNIT_STATUS_KIND_AGENT
		workload = pb.UnitStatusKind_UNIT_STATUS_KIND_WORKLOAD
	)
	set(machine, agent, &pb.Status{Status: "allocating", Message: "starting the unit agent"})
	creds, err := machine.IssueUnitCredentials(ctx, &pb.IssueUnitCredentialsRequest{Units: []string{"kv/0"}})
	if err != nil {
		t.Fatal(err)
	}
	cred := creds.Credentials[0]
	unitCfg := apiclient.FromClientConfig(machineCfg)
	unitCfg.Credential = pki.Credential{Tag: cred.Tag, Secret: cred.Secret}
	unit := agentClient(unitCfg)
	set(unit, agent, &pb.Status{Status: "executing", Message: "running install hook", Data: map[string]string{"state": "new"}})
	set(unit, workload, &pb.Status{Status: "maintenance", Message: "installing"})
	set(unit, agent, &pb.Status{Status: "error", Message: `hook failed: "install"`,
		Data: map[string]string{"state": "install-error", "output": "fetching kv\nE: disk full\n"}})

	out = s.ok(t, "show-status-log", "kv/0")
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^Time\s+Type\s+Status\s+Message$`),
		regexp.MustCompile(`(?m)^\d\d \w{3} \d{4} \d\d:\d\d:\d\d\S*\s+agent\s+allocating\s+starting the unit agent\n.*agent\s+executing\s+running install hook\n\s+state=new\n.*workload\s+maintenance\s+installing\n.*agent\s+error\s+hook failed: "install"\n\s+state=install-error\n\s+output:\n\s+fetching kv\n\s+E: disk full\n\z`),
	} {
		if !want.MatchString(out) {
			t.Errorf("ctl show-status-log kv/0 said:\n%s\nwant it to match %s", out, want)
		}
	}
	out = s.ok(t, "show-status-log", "kv/0", "-n", "1", "--format", "json")
	var doc []statusLogDoc
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("ctl show-status-log -n 1 --format json: %v\n%s", err, out)
	}
	if len(doc) != 1 || doc[0].Type != "agent" || doc[0].Status != "error" || doc[0].Data["output"] != "fetching kv\nE: disk full\n" {
		t.Errorf("ctl show-status-log -n 1 --format json = %+v, want the install failure alone, with its output", doc)
	}
}
