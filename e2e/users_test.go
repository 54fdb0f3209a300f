package e2e

import (
	"context"
	"encoding/json"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/testing/e2etest"
)

// addUser has the sandbox's admin add a user with role, its registration
// token written to a file, and returns the file.
func addUser(t *testing.T, s *e2etest.Sandbox, name, role string, extra ...string) string {
	t.Helper()
	token := filepath.Join(s.Dir, name+".token")
	out := s.OK(t, append([]string{"add-user", name, "--role", role, "--token-file", token}, extra...)...)
	if !strings.Contains(out, "ctl register - --config FILE < "+token) {
		t.Errorf("ctl add-user said:\n%s\nwant the command the user runs", out)
	}
	return token
}

// register runs ctl register with the token on stdin, writing the user's
// client config to config, and returns how it ended.
func register(t *testing.T, s *e2etest.Sandbox, token, config string) e2etest.Result {
	t.Helper()
	f, err := os.Open(token)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	args := []string{"register", "-", "--config", config}
	cmd := s.CtlCommand(ctx, "", args...)
	cmd.Stdin = f
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	r := e2etest.Result{Args: args, Stdout: stdout.String(), Stderr: stderr.String()}
	if err != nil {
		r.Code = -1
		if cmd.ProcessState != nil {
			r.Code = cmd.ProcessState.ExitCode()
		}
	}
	return r
}

// newUser adds a user with role and registers it; it returns the user's
// client config.
func newUser(t *testing.T, s *e2etest.Sandbox, name, role string) string {
	t.Helper()
	config := filepath.Join(s.Dir, name+".json")
	r := register(t, s, addUser(t, s, name, role), config)
	if r.Code != 0 || !strings.Contains(r.Stdout, "registered as "+name+" ("+role+")") {
		t.Fatalf("%v\nwant %s registered", r, name)
	}
	return config
}

// oneLine fails the test unless stderr is one line holding want.
func oneLine(t *testing.T, r e2etest.Result, code int, want string) {
	t.Helper()
	if r.Code != code || !strings.Contains(r.Stderr, want) || strings.Count(strings.TrimRight(r.Stderr, "\n"), "\n") != 0 {
		t.Errorf("%v\nwant exit status %d and one line holding %q on stderr", r, code, want)
	}
}

// TestUsersRegisterAndTheirRoles: a user added by the admin registers with
// the token on stdin, into a client config of its own (0600) that --config
// names; its ctl works as its role allows: a viewer reads the status, whose
// first line names the controller and the user, and is refused a deploy
// with one line; an operator deploys. The status document says nothing of
// credentials.
func TestUsersRegisterAndTheirRoles(t *testing.T) {
	t.Parallel()
	needCharms(t)
	s := newSandbox(t)
	s.Bootstrap(t)
	vic := newUser(t, s, "vic", "viewer")
	if fi, err := os.Stat(vic); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("vic's client config: %v, %v; want mode 0600", fi, err)
	}
	if out := s.OK(t, "--config", vic, "whoami"); !strings.HasPrefix(out, "user vic (viewer) on controller c-") {
		t.Errorf("ctl whoami as vic said %q", out)
	}
	out := s.OK(t, "--config", vic, "status")
	if first, _, _ := strings.Cut(out, "\n"); !strings.HasPrefix(first, "Controller c-") || !strings.HasSuffix(first, ", user vic") {
		t.Errorf("ctl status as vic begins %q, want the controller and user vic", first)
	}
	oneLine(t, s.Ctl("--config", vic, "deploy", charmPath(t, "kv")), 1,
		"ctl: user vic (viewer) may not call UploadCharm: it needs the operator role")

	olga := newUser(t, s, "olga", "operator")
	s.OK(t, "--config", olga, "deploy", charmPath(t, "kv"), "-n", "0")
	js := s.OK(t, "--config", vic, "status", "--format", "json")
	var doc map[string]any
	if err := json.Unmarshal([]byte(js), &doc); err != nil {
		t.Fatalf("ctl status --format json: %v\n%s", err, js)
	}
	if _, ok := doc["services"].(map[string]any)["kv"]; !ok {
		t.Errorf("ctl status --format json as vic:\n%s\nwant olga's kv", js)
	}
	// Nothing a credential is made of, nor who asks, is in the document.
	for _, secret := range []string{"secret", "hash", "credential", "token", "user"} {
		if strings.Contains(strings.ToLower(js), secret) {
			t.Errorf("ctl status --format json says %q:\n%s", secret, js)
		}
	}
	// A new role holds from the next call.
	oneLine(t, s.Ctl("--config", vic, "config", "kv", "port=7071"), 1, "ctl: user vic (viewer) may not call SetConfig")
	s.OK(t, "set-role", "vic", "operator")
	s.OK(t, "--config", vic, "config", "kv", "port=7071")
	oneLine(t, s.Ctl("remove-user", "admin"), 1, "ctl: user admin is the last admin")
	oneLine(t, s.Ctl("set-role", "admin", "viewer"), 1, "ctl: user admin is the last admin")
	// The tabular audit log names who deployed and who changed the config.
	out = s.OK(t, "audit", "--entity", "kv")
	for _, want := range []string{"olga", "Deploy", "vic", "SetConfig", "PermissionDenied"} {
		if !strings.Contains(out, want) {
			t.Errorf("ctl audit --entity kv said:\n%s\nwant %q in it", out, want)
		}
	}
}

// TestRegistrationTokenWorksOnceAndNotAfterExpiry: a token registers its
// user once; the same token again is refused, and so is a token presented
// after it expired; neither writes a client config.
func TestRegistrationTokenWorksOnceAndNotAfterExpiry(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)
	s.Bootstrap(t)
	token := addUser(t, s, "ann", "viewer")
	if r := register(t, s, token, filepath.Join(s.Dir, "ann.json")); r.Code != 0 {
		t.Fatalf("%v\nwant ann registered", r)
	}
	again := filepath.Join(s.Dir, "again.json")
	oneLine(t, register(t, s, token, again), 1, `registration of user "ann" is not valid`)

	token = addUser(t, s, "ben", "viewer", "--expires", "1s")
	var expires time.Time
	var users []struct {
		Name    string `json:"name"`
		Expires string `json:"registration-expires"`
	}
	if err := json.Unmarshal([]byte(s.OK(t, "users", "--format", "json")), &users); err != nil {
		t.Fatal(err)
	}
	for _, u := range users {
		if u.Name == "ben" {
			expires, _ = time.Parse(time.RFC3339, u.Expires)
		}
	}
	if expires.IsZero() {
		t.Fatalf("ctl users lists %+v, want ben with his token's expiry", users)
	}
	// The expiry is stamped to the second: past it by one, the token is
	// past its own.
	time.Sleep(time.Until(expires.Add(time.Second)))
	oneLine(t, register(t, s, token, again), 1, `registration of user "ben" is not valid`)
	if _, err := os.Stat(again); !os.IsNotExist(err) {
		t.Errorf("a refused registration wrote %s (%v)", again, err)
	}
}

// TestRemovedUsersStatusWatchEnds: a user's open ctl status --watch ends
// with Unauthenticated, exit status 1 and one line, once an admin removes
// the user.
func TestRemovedUsersStatusWatchEnds(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)
	s.Bootstrap(t)
	vic := newUser(t, s, "vic", "viewer")
	w := startCtl(t, s, "--config", vic, "status", "--watch")
	poll.Within(t, "vic's watch to show a status", time.Minute, func() (bool, string) {
		out := w.stdout.String()
		return strings.Contains(out, "user vic"), out
	})
	w.running(t)
	s.OK(t, "remove-user", "vic")
	removed := time.Now()
	if code := w.end(t, time.Minute); code != 1 {
		t.Errorf("%v\nexit %d, want 1", w, code)
	}
	t.Logf("vic's watch ended %v after remove-user returned", time.Since(removed))
	stderr := w.stderr.String()
	if !strings.Contains(stderr, "ctl: credential of user vic revoked") || strings.Count(strings.TrimRight(stderr, "\n"), "\n") != 0 {
		t.Errorf("%v\nwant one line saying vic's credential is revoked", w)
	}
	oneLine(t, s.Ctl("--config", vic, "status"), 1, "ctl: credential of user-vic is not valid")
}

// TestAuditFollowShowsAnotherUsersDeploy: the admin's ctl audit --follow
// shows an operator's deploy as it ends, and the refusal of a viewer's.
func TestAuditFollowShowsAnotherUsersDeploy(t *testing.T) {
	t.Parallel()
	needCharms(t)
	s := newSandbox(t)
	s.Bootstrap(t)
	olga := newUser(t, s, "olga", "operator")
	vic := newUser(t, s, "vic", "viewer")
	follow := startCtl(t, s, "audit", "--follow", "--entity", "kv", "--format", "json")
	s.Fails(t, 1, "may not call", "--config", vic, "destroy-service", "kv")
	s.OK(t, "--config", olga, "deploy", charmPath(t, "kv"), "-n", "0")
	deployed := time.Now()
	type entry struct {
		User, Call, Result string
		Targets            []string
	}
	var got []entry
	poll.Within(t, "ctl audit --follow to show olga's deploy", time.Minute, func() (bool, string) {
		got = nil
		for _, l := range strings.Split(strings.TrimSpace(follow.stdout.String()), "\n") {
			var e entry
			if json.Unmarshal([]byte(l), &e) == nil {
				got = append(got, e)
			}
		}
		for _, e := range got {
			if e.Call == "Deploy" {
				return true, ""
			}
		}
		return false, follow.String()
	})
	t.Logf("ctl audit --follow showed olga's deploy %v after ctl deploy returned", time.Since(deployed))
	// The charm's upload names it (charm:kv) as the deploy does.
	want := []string{"vic DestroyService PermissionDenied", "olga UploadCharm OK", "olga Deploy OK"}
	var have []string
	for _, e := range got {
		have = append(have, e.User+" "+e.Call+" "+e.Result)
	}
	if strings.Join(have, ", ") != strings.Join(want, ", ") {
		t.Errorf("ctl audit --follow --entity kv showed %q, want %q", have, want)
	}
	follow.running(t)
}
