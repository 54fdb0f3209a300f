package hooks_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"maps"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/hooks"
)

const expiredMessage = "context expired: this hook tool was called outside the hook that received it"

// TestHookCallsTools runs a real hook that calls the tools through its
// PATH, in the foreground and in parallel in the background.
func TestHookCallsTools(t *testing.T) {
	a := startAgent(t)
	const script = `#!/bin/sh
set -e
relation-set ready=yes
host=$(relation-get host)
status-set active "talking to $host"
config-get port > port.out
relation-ids --format=json > ids.out
relation-get -r db:2 port pg/1 > p1.out &
relation-get -r db:2 port pg/0 > p0.out &
relation-list > list.out &
log -l debug "in the background" &
wait
relation-get nothing-here
echo done
`
	spec := charmWithHook(t, "db-relation-changed", script, 0o755)
	spec.ToolsDir = a.toolsDir
	f := newFakeContext()
	h := a.begin(t, f)
	spec.Env = map[string]string{
		hooks.EnvUnitName:   "kv/0",
		hooks.EnvHookName:   spec.Hook,
		hooks.EnvRelation:   "db",
		hooks.EnvRelationID: "db:2",
		hooks.EnvRemoteUnit: "pg/0",
	}
	maps.Copy(spec.Env, h.Env)
	res, err := hooks.Run(context.Background(), spec)
	a.srv.End(h.ID)
	if err != nil || !res.Succeeded() {
		t.Fatalf("Run() = %+v, %v, want success", res, err)
	}
	if want := []string{"done"}; !reflect.DeepEqual(res.Tail, want) {
		t.Errorf("Run().Tail = %q, want %q", res.Tail, want)
	}
	files := map[string]string{
		"port.out": "8080\n",
		"ids.out":  `["db:2","db:3"]` + "\n",
		"p0.out":   "5432\n",
		"p1.out":   "5432\n",
		"list.out": "pg/0\npg/1\npg/10\n",
	}
	for name, want := range files {
		if got := readFile(t, filepath.Join(spec.CharmDir, name)); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	if want := []relationSet{{"db:2", map[string]string{"ready": "yes"}, nil}}; !reflect.DeepEqual(f.sets, want) {
		t.Errorf("RelationSet calls = %+v, want %+v", f.sets, want)
	}
	if want := [2]string{"active", "talking to 10.0.0.1"}; f.status != want {
		t.Errorf("workload status = %q, want %q", f.status, want)
	}
	if want := [][2]string{{"debug", "in the background"}}; !reflect.DeepEqual(f.logs, want) {
		t.Errorf("Log calls = %q, want %q", f.logs, want)
	}
	if f.overlapped {
		t.Errorf("the Context's methods ran concurrently, want them to take turns")
	}
}

// TestExpiredContext: a tool presenting an id that was ended, or never
// begun, is refused, and the context file of an ended hook is gone; other
// hooks' ids still work.
func TestExpiredContext(t *testing.T) {
	a := startAgent(t)
	f := newFakeContext()
	ended, err := a.srv.Begin(f)
	if err != nil {
		t.Fatal(err)
	}
	endedFile := ended.Env[hooks.EnvContextFile]
	copied := contextFile(t, readFile(t, endedFile)) // as a process that read it in time holds it
	a.srv.End(ended.ID)
	a.srv.End(ended.ID) // ending twice does nothing
	if _, err := os.Stat(endedFile); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the ended hook's context file: %v, want it gone", err)
	}
	live := a.begin(t, newFakeContext())
	tests := []struct {
		name     string
		file     string
		wantOut  string
		wantErr  string
		wantCode int
	}{
		{"ended", endedFile, "", "relation-ids: " + expiredMessage + "\n", 1},
		{"ended, its id kept", copied, "", "relation-ids: " + expiredMessage + "\n", 1},
		{"bogus", contextFile(t, "bogus"), "", "relation-ids: " + expiredMessage + "\n", 1},
		{"live", live.Env[hooks.EnvContextFile], "db:2\ndb:3\nwebsite:11\n", "", 0},
	}
	for _, tt := range tests {
		out, errOut, code := a.tool(t, tt.file, nil, "relation-ids")
		if out != tt.wantOut || errOut != tt.wantErr || code != tt.wantCode {
			t.Errorf("relation-ids with a context %s = %q, %q, exit %d; want %q, %q, %d", tt.name, out, errOut, code, tt.wantOut, tt.wantErr, tt.wantCode)
		}
	}
	if f.calls != 0 {
		t.Errorf("the ended Context was called %d times, want 0", f.calls)
	}
}

// TestEndWaitsForRunningCalls: End cancels a call still running (from a
// process the hook left behind) and returns only once it has returned.
func TestEndWaitsForRunningCalls(t *testing.T) {
	a := startAgent(t)
	f := newFakeContext()
	f.getStarted = make(chan struct{})
	h := a.begin(t, f)
	cmd := a.command(h.Env[hooks.EnvContextFile], inRelationHook, "relation-get", "host")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-f.getStarted:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		t.Fatal("relation-get never reached the Context")
	}
	a.srv.End(h.ID)
	f.mu.Lock()
	active := f.active
	f.mu.Unlock()
	if active != 0 {
		t.Errorf("after End, %d Context calls still run, want 0", active)
	}
	cmd.Wait()
	if want := "relation-get: the hook ended while this tool ran\n"; errOut.String() != want || cmd.ProcessState.ExitCode() != 1 {
		t.Errorf("relation-get during End = %q, %q, exit %d; want %q, exit 1", out.String(), errOut.String(), cmd.ProcessState.ExitCode(), want)
	}
}

func TestServerSocket(t *testing.T) {
	a := startAgent(t)
	fi, err := os.Stat(a.srv.Socket())
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode = %v, want a socket of mode 0600", fi.Mode())
	}
}

func TestNewServer(t *testing.T) {
	dir := tempDir(t)
	stale := filepath.Join(dir, "stale.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	inUse := filepath.Join(dir, "inuse.sock")
	live, err := net.Listen("unix", inUse)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	regular := filepath.Join(dir, "file")
	writeFile(t, regular, "x", 0o600)
	tests := []struct {
		socket  string
		wantErr string
	}{
		{stale, ""},
		{inUse, "is in use by another process"},
		{regular, "exists and is not a socket"},
		{filepath.Join(dir, "missing", "agent.sock"), "no such file or directory"},
		{filepath.Join(regular, "agent.sock"), "is not a directory"},
		{"agent.sock", `hook tool socket "agent.sock" is not an absolute path`},
		{"/" + strings.Repeat("d", 110), "a unix socket's path is at most 107"},
	}
	for _, tt := range tests {
		srv, err := hooks.NewServer(hooks.ServerConfig{Socket: tt.socket})
		if srv != nil {
			srv.Close()
		}
		if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("NewServer(%s) = %v, want error %q", tt.socket, err, tt.wantErr)
		}
	}
	if _, err := os.Stat(regular); err != nil {
		t.Errorf("NewServer removed a regular file: %v", err)
	}
}

// TestServeStops: when Serve's ctx ends it returns and the socket is gone.
func TestServeStops(t *testing.T) {
	socket := filepath.Join(tempDir(t), "agent.sock")
	srv, err := hooks.NewServer(hooks.ServerConfig{Socket: socket})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve() = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after its ctx ended")
	}
	if _, err := os.Lstat(socket); err == nil {
		t.Errorf("socket %s still exists after Serve returned", socket)
	}
}

// TestBadRequests talks to the server directly, as a broken or foreign
// client would.
func TestBadRequests(t *testing.T) {
	a := startAgent(t)
	id := a.begin(t, newFakeContext()).ID
	req := func(v map[string]any) string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return string(b) + "\n"
	}
	tests := []struct {
		name    string
		request string
		wantErr string
	}{
		{"not json", "hello\n", "hook tool: bad request: "},
		{"old version", req(map[string]any{"version": 0, "context_id": id, "tool": "log", "args": []string{"x"}}), "log: protocol version 0, but the unit agent speaks 1"},
		{"unknown tool", req(map[string]any{"version": 1, "context_id": id, "tool": "rm", "args": []string{"-rf"}}), `hook tool: unknown tool "rm"`},
		{"too large", req(map[string]any{"version": 1, "context_id": id, "tool": "log", "args": []string{strings.Repeat("x", hooks.MaxRequestBytes)}}), "hook tool: request too large"},
		{"no newline", `{"version":1}`, "hook tool: read the request: EOF"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn, err := net.Dial("unix", a.srv.Socket())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			go func() {
				conn.Write([]byte(tt.request))
				conn.(*net.UnixConn).CloseWrite()
			}()
			line, err := bufio.NewReader(conn).ReadString('\n')
			if err != nil {
				t.Fatalf("read the response: %v", err)
			}
			var resp struct {
				Stderr string `json:"stderr"`
				Code   int    `json:"code"`
			}
			if err := json.Unmarshal([]byte(line), &resp); err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(resp.Stderr, tt.wantErr) || resp.Code != 1 {
				t.Errorf("response = %+v, want stderr starting %q, code 1", resp, tt.wantErr)
			}
		})
	}
}

// TestContextFiles: a hook's context id is in a file of its own, private to
// the agent's user, made when the hook begins and removed when it ends; a
// new Server removes the files an earlier agent left.
func TestContextFiles(t *testing.T) {
	dir := tempDir(t)
	socket := filepath.Join(dir, "agent.sock")
	contexts := filepath.Join(dir, hooks.ContextDirName)
	writeFile(t, filepath.Join(contexts, "left-by-a-crash"), "OLDID\n", 0o600)
	srv, err := hooks.NewServer(hooks.ServerConfig{Socket: socket})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if entries, _ := os.ReadDir(contexts); len(entries) != 0 {
		t.Errorf("NewServer left %d files of an earlier agent in %s", len(entries), contexts)
	}
	h, err := srv.Begin(newFakeContext())
	if err != nil {
		t.Fatal(err)
	}
	file := h.Env[hooks.EnvContextFile]
	if filepath.Dir(file) != contexts || h.Env[hooks.EnvAgentSocket] != socket {
		t.Errorf("Begin().Env = %v, want the socket and a file in %s", h.Env, contexts)
	}
	if got := strings.TrimSpace(readFile(t, file)); got != h.ID {
		t.Errorf("the context file holds %q, want the hook's id", got)
	}
	if strings.Contains(file, h.ID) {
		t.Errorf("the context file's name %s holds the id", file)
	}
	for path, want := range map[string]os.FileMode{contexts: 0o700, file: 0o600} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("mode of %s = %04o, want %04o", path, fi.Mode().Perm(), want)
		}
	}
	srv.End(h.ID)
	if _, err := os.Stat(file); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the context file after End: %v, want it gone", err)
	}
}
