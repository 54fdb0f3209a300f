package gate_test

import (
	"context"
	"encoding/json"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/controller/gate"
)

var question = gate.Question{Service: "kv", Unit: "kv/3", Machine: "2", From: 3, To: 4,
	Changes: []gate.Change{{Key: "port", Old: "8080", New: "9090"}}}

func mustParse(t *testing.T, spec string, cfg gate.Config) gate.Gate {
	t.Helper()
	g, err := gate.Parse(spec, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// A program gets the question on stdin and its stdout is the answer.
func TestProgramAnswers(t *testing.T) {
	dir := t.TempDir()
	asked := filepath.Join(dir, "asked.json")
	for _, c := range []struct {
		answer string
		want   gate.Verdict
	}{
		{`{"decision": "allow"}`, gate.Verdict{Decision: gate.Allow}},
		{`{"decision": "deny", "reason": "change freeze"}`, gate.Verdict{Decision: gate.Deny, Reason: "change freeze"}},
		{`{"decision": "retry", "reason": "busy", "retry_after": 30}`, gate.Verdict{Decision: gate.Retry, Reason: "busy", RetryAfter: 30 * time.Second}},
		{`{"decision": "retry", "retry_after": "1m30s"}`, gate.Verdict{Decision: gate.Retry, RetryAfter: 90 * time.Second}},
	} {
		script := filepath.Join(dir, "orly")
		body := "#!/bin/sh\ncat > " + asked + "\ncat <<'EOF'\n" + c.answer + "\nEOF\n"
		if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
		g := mustParse(t, "orly="+script, gate.Config{})
		if g.Name() != "orly" {
			t.Errorf("name %q, want orly", g.Name())
		}
		if got := g.Ask(context.Background(), question); got != c.want {
			t.Errorf("answer %s: verdict %+v, want %+v", c.answer, got, c.want)
		}
		var q gate.Question
		data, err := os.ReadFile(asked)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(data, &q); err != nil || q.Unit != "kv/3" || q.To != 4 || len(q.Changes) != 1 {
			t.Errorf("the program was asked %s (%v)", data, err)
		}
	}
}

// A gate that errs, says nothing that parses, or takes too long counts
// as retry: it fails closed, and says why.
func TestGateFailsClosed(t *testing.T) {
	for _, c := range []struct {
		name, command, reason string
	}{
		{"exit status", "echo 'no database' >&2; exit 3", "exit status 3: no database"},
		{"not json", "echo maybe", "answer is not JSON"},
		{"unknown decision", `echo '{"decision": "perhaps"}'`, `decision "perhaps" is not allow, deny or retry`},
		{"bad retry_after", `echo '{"decision": "retry", "retry_after": "soon"}'`, `retry_after "soon" is not a duration`},
		{"retry_after too long", `echo '{"decision": "retry", "retry_after": 86400}'`, "is not between 0 and 1h0m0s"},
		{"too long an answer", `head -c 100000 /dev/zero | tr '\0' ' '; echo '{"decision": "allow"}'`, "answer longer than 65536 bytes"},
		{"no such program", "/nonexistent/orly", "not found"},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := mustParse(t, "orly="+c.command, gate.Config{})
			v := g.Ask(context.Background(), question)
			if v.Decision != gate.Retry || !v.Failed || !strings.Contains(v.Reason, c.reason) || !strings.HasPrefix(v.Reason, `gate "orly": `) {
				t.Errorf("verdict %+v, want a failed retry saying %q", v, c.reason)
			}
		})
	}
}

// A program past the timeout is killed, with what it started.
func TestProgramTimeoutKillsItsGroup(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	g := mustParse(t, "slow=sleep 60 & echo $! > "+pidFile+"; wait", gate.Config{Timeout: 300 * time.Millisecond})
	v := g.Ask(context.Background(), question)
	if v.Decision != gate.Retry || !v.Failed || !strings.Contains(v.Reason, "no answer within 300ms") {
		t.Errorf("verdict %+v, want a failed retry, no answer", v)
	}
	data, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	// The kill is sent before Ask returns; the process ends a moment
	// later (and may stay a zombie until init reaps it).
	pid := strings.TrimSpace(string(data))
	poll.Until(t, "the command's child (pid "+pid+") to end", func() bool {
		stat, err := os.ReadFile("/proc/" + pid + "/stat")
		return err != nil || strings.Contains(string(stat), ") Z")
	})
}

// An HTTPS gate is POSTed the question; a status other than 200 fails
// closed.
func TestHTTPSGate(t *testing.T) {
	var mu sync.Mutex
	var got gate.Question
	status := http.StatusOK
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" || json.Unmarshal(body, &got) != nil {
			http.Error(w, "bad question", http.StatusBadRequest)
			return
		}
		if status != http.StatusOK {
			http.Error(w, "on fire", status)
			return
		}
		w.Write([]byte(`{"decision": "deny", "reason": "machine 2 is being serviced"}`))
	}))
	defer srv.Close()
	pool := srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	g := mustParse(t, "orly="+srv.URL+"/ask", gate.Config{RootCAs: pool})
	if v := g.Ask(context.Background(), question); v.Decision != gate.Deny || v.Reason != "machine 2 is being serviced" || v.Failed {
		t.Errorf("verdict %+v, want deny", v)
	}
	if got.Machine != "2" || got.From != 3 {
		t.Errorf("asked %+v", got)
	}
	mu.Lock()
	status = http.StatusInternalServerError
	mu.Unlock()
	if v := g.Ask(context.Background(), question); v.Decision != gate.Retry || !v.Failed || !strings.Contains(v.Reason, "500 Internal Server Error: on fire") {
		t.Errorf("verdict %+v, want a failed retry", v)
	}
	// Not trusting the server's certificate: fails closed.
	untrusting := mustParse(t, "orly="+srv.URL, gate.Config{})
	if v := untrusting.Ask(context.Background(), question); v.Decision != gate.Retry || !v.Failed || !strings.Contains(v.Reason, "certificate") {
		t.Errorf("verdict %+v, want a failed retry over the certificate", v)
	}
}

func TestParseRefusals(t *testing.T) {
	for spec, want := range map[string]string{
		"orly":                                 "want NAME=COMMAND or NAME=https://URL",
		"orly=":                                "want NAME=COMMAND or NAME=https://URL",
		"Orly=/bin/true":                       `invalid name "Orly"`,
		"=/bin/true":                           `invalid name ""`,
		"orly=http://x/ask":                    "must be https://",
		strings.Repeat("o", 33) + "=/bin/true": "invalid name",
	} {
		if _, err := gate.Parse(spec, gate.Config{}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v, want an error saying %q", spec, err, want)
		}
	}
}

// At most Concurrency asks of a gate run at once; the others wait their
// turn.
func TestConcurrencyBound(t *testing.T) {
	var running, most atomic.Int64
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := running.Add(1)
		defer running.Add(-1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		time.Sleep(50 * time.Millisecond)
		w.Write([]byte(`{"decision": "allow"}`))
	}))
	defer srv.Close()
	pool := srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	g := mustParse(t, "orly="+srv.URL, gate.Config{RootCAs: pool, Concurrency: 2, Timeout: time.Minute})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if v := g.Ask(context.Background(), question); v.Decision != gate.Allow {
				t.Errorf("verdict %+v", v)
			}
		})
	}
	wg.Wait()
	if most.Load() > 2 {
		t.Errorf("%d asks ran at once, want at most 2", most.Load())
	}
}
