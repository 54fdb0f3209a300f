package e2e

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestOperationsApprovalFlow runs the approval flow of an operation over
// the real binaries, as three users would: an operator runs the demo kv
// charm's unsafe backup action on the service (awaiting approval by an
// admin), its parameters checked first (an invalid run is recorded
// invalid, every error listed, exit 1); the requester cannot approve it,
// nor can another operator; an admin approves what ctl approve showed
// (its digest); another operator cannot execute it, the requester does;
// its tasks are made, one a unit. A safe action runs at once, its tasks
// pause, resume and stop (stopping is final), and ctl status counts
// the operations.
//
// The controller uses the manual provider: no machine agents run, so the
// tasks stay pending (running actions on units is the agents' side and
// has end-to-end tests of its own). ctl has no charm refresh command, so
// an approval voided by a charm's change is covered by the state
// package's tests (A1), not here; expiry has a test of its own below.
func TestOperationsApprovalFlow(t *testing.T) {
	t.Parallel()
	needCharms(t)
	s := newSandbox(t)
	s.OK(t, "bootstrap", "--data-dir", s.DataDir, "--api-port", strconv.Itoa(s.Port), "--provider", "manual")
	s.OK(t, "deploy", charmPath(t, "kv"), "-n", "2")
	olga := newUser(t, s, "olga", "operator")
	oscar := newUser(t, s, "oscar", "operator")
	ada := newUser(t, s, "ada", "admin")
	as := func(config string, args ...string) []string { return append([]string{"--config", config}, args...) }

	out := s.OK(t, as(olga, "actions", "kv")...)
	for _, want := range []string{"backup   no    @admin", "keys     yes", "reindex  yes"} {
		if !strings.Contains(out, want) {
			t.Errorf("ctl actions kv said:\n%s\nwant %q in it", out, want)
		}
	}

	// Invalid parameters: every error listed, the operation recorded.
	r := s.Ctl(as(olga, "run", "kv", "backup", "compress=maybe", "extra=1")...)
	if r.Code != 1 || !strings.Contains(r.Stderr, "is invalid (recorded; nothing runs)") ||
		!strings.Contains(r.Stderr, `parameter "compress": want boolean, got string`) ||
		!strings.Contains(r.Stderr, `parameter "extra" is not allowed`) || !strings.Contains(r.Stderr, `parameter "name" is required`) {
		t.Errorf("%v\nwant exit status 1 and each of the three errors", r)
	}
	if out := s.OK(t, "operations", "--state", "invalid"); !strings.Contains(out, "backup  invalid") {
		t.Errorf("ctl operations --state invalid said:\n%s\nwant the invalid backup", out)
	}

	out = s.OK(t, as(olga, "run", "kv", "backup", "name=nightly")...)
	m := regexp.MustCompile(`^operation (\d+): backup on kv/0 kv/1: awaiting approval by an admin\n$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("ctl run kv backup said %q, want the operation awaiting approval by an admin", out)
	}
	id := m[1]
	oneLine(t, s.Ctl(as(olga, "approve", id)...), 1, "ctl: olga cannot approve operation "+id+": olga requested it")
	oneLine(t, s.Ctl(as(oscar, "approve", id)...), 1, "ctl: oscar cannot approve operation "+id+": only an admin may")
	oneLine(t, s.Ctl(as(olga, "execute", id)...), 1,
		"ctl: operation "+id+" is awaiting approval: only olga or an admin may execute it once approved")

	var doc struct {
		Digest string `json:"digest"`
		State  string `json:"state"`
	}
	if err := json.Unmarshal([]byte(s.OK(t, as(ada, "show-operation", id, "--format", "json")...)), &doc); err != nil || doc.State != "awaiting-approval" {
		t.Fatalf("ctl show-operation --format json: %+v, %v; want it awaiting approval", doc, err)
	}
	out = s.OK(t, as(ada, "approve", id)...)
	for _, want := range []string{"backup on kv", "kv/0 kv/1", `{"compress":false,"name":"nightly"}`, "kv revision 1",
		"Requester:   olga", "Digest:      " + doc.Digest, "approved operation " + id} {
		if !strings.Contains(out, want) {
			t.Errorf("ctl approve said:\n%s\nwant %q in it", out, want)
		}
	}
	oneLine(t, s.Ctl(as(oscar, "execute", id)...), 1, "ctl: oscar cannot execute operation "+id+": only olga or an admin may")
	if out := s.OK(t, as(olga, "execute", id)...); out != "operation "+id+": backup on kv/0 kv/1: running\n" {
		t.Errorf("ctl execute said %q, want it running", out)
	}
	out = s.OK(t, "show-operation", id)
	for _, want := range []string{"Approver:     ada", "Executed by:  olga", "kv/0  pending", "kv/1  pending"} {
		if !strings.Contains(out, want) {
			t.Errorf("ctl show-operation said:\n%s\nwant %q in it", out, want)
		}
	}

	// A safe action runs at once; its tasks pause, resume and stop.
	out = s.OK(t, as(oscar, "run", "kv/1", "keys")...)
	keys := regexp.MustCompile(`^operation (\d+): keys on kv/1: running\n$`).FindStringSubmatch(out)
	if keys == nil {
		t.Fatalf("ctl run kv/1 keys said %q, want it running", out)
	}
	if out := s.OK(t, as(oscar, "pause", keys[1])...); out != "operation "+keys[1]+": paused kv/1\n" {
		t.Errorf("ctl pause said %q", out)
	}
	if out := s.OK(t, as(oscar, "stop", keys[1], "kv/1")...); out != "operation "+keys[1]+": stopped kv/1\n" {
		t.Errorf("ctl stop said %q", out)
	}
	r = s.Ctl(as(oscar, "resume", keys[1], "kv/1")...)
	if r.Code != 1 || !strings.Contains(r.Stderr, "kv/1") {
		t.Errorf("%v\nwant resuming a stopped task refused, exit 1", r)
	}
	if out := s.OK(t, "show-task", keys[1], "kv/1"); !regexp.MustCompile(`(?m)^State:\s+stopped$`).MatchString(out) {
		t.Errorf("ctl show-task said:\n%s\nwant it stopped", out)
	}
	out = s.OK(t, "status")
	if !strings.Contains(out, "Operations: 1 running, 0 awaiting approval, 0 lost tasks") {
		t.Errorf("ctl status said:\n%s\nwant the line of operations", out)
	}
}

// TestOperationsApprovalExpires: an operation awaiting approval lapses
// after the controller's --approval-ttl. Approving it then is refused,
// naming the time it expired, and it shows expired; so does an approved
// one that was not executed in time.
func TestOperationsApprovalExpires(t *testing.T) {
	// Not parallel: three calls must fit in the 3 s approval TTL.
	needCharms(t)
	s := newSandbox(t)
	s.StartController(t, "--provider", "manual", "--approval-ttl", "3s")
	s.OK(t, "deploy", charmPath(t, "kv"), "-n", "1")
	olga := newUser(t, s, "olga", "operator")
	as := func(args ...string) []string { return append([]string{"--config", olga}, args...) }
	run := func(name string) string {
		t.Helper()
		out := s.OK(t, as("run", "kv", "backup", "name="+name)...)
		m := regexp.MustCompile(`^operation (\d+): backup on kv/0: awaiting approval`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("ctl run kv backup said %q, want it awaiting approval", out)
		}
		return m[1]
	}
	lapsed := run("nightly")
	approved := run("weekly")
	s.OK(t, "approve", approved)
	time.Sleep(4 * time.Second) // past the 3 s TTL: the test of a deadline

	// Refused as expired: found lapsed by the call ("expired at …: run it
	// again") or already written expired by the leader's worker.
	expired := regexp.MustCompile(`^ctl: operation \d+ (expired at \S+: run it again|is expired: only .*)\n$`)
	if r := s.Ctl("approve", lapsed); r.Code != 1 || !expired.MatchString(r.Stderr) {
		t.Errorf("%v\nwant approving a lapsed operation refused as expired", r)
	}
	if r := s.Ctl(as("execute", approved)...); r.Code != 1 || !expired.MatchString(r.Stderr) {
		t.Errorf("%v\nwant executing a lapsed approval refused as expired", r)
	}
	for _, id := range []string{lapsed, approved} {
		if out := s.OK(t, "show-operation", id); !regexp.MustCompile(`(?m)^State:\s+expired$`).MatchString(out) {
			t.Errorf("ctl show-operation %s said:\n%s\nwant it expired", id, out)
		}
	}
}

// TestOperationsApprovalVoidAfterRefresh: an approved operation is not
// executed once its service has moved to another charm (A1): what was
// approved is not what would run.
func TestOperationsApprovalVoidAfterRefresh(t *testing.T) {
	t.Parallel()
	needCharms(t)
	s := newSandbox(t)
	s.StartController(t, "--provider", "manual")
	s.OK(t, "deploy", olderCharm(t, "kv"), "kv", "-n", "1")
	olga := newUser(t, s, "olga", "operator")
	out := s.OK(t, "--config", olga, "run", "kv", "backup", "name=weekly")
	m := regexp.MustCompile(`^operation (\d+): backup on kv/0: awaiting approval`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("ctl run kv backup said %q, want it awaiting approval", out)
	}
	s.OK(t, "approve", m[1])
	s.OK(t, "refresh", "kv", "--path", charmPath(t, "kv"))
	r := s.Ctl("--config", olga, "execute", m[1])
	if r.Code != 1 || !strings.Contains(r.Stderr, "charm") {
		t.Errorf("%v\nwant executing an approval of the charm before the refresh refused, naming the charm", r)
	}
}
