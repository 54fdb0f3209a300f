package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// fakeKV answers POST /keys/NAME/incr as kv-server does, counting per key.
type fakeKV struct {
	mu     sync.Mutex
	counts map[string]int
	paths  []string
}

func newFakeKV(t *testing.T) (*fakeKV, string) {
	t.Helper()
	kv := &fakeKV{counts: map[string]int{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /keys/{name}/incr", func(w http.ResponseWriter, r *http.Request) {
		kv.mu.Lock()
		defer kv.mu.Unlock()
		kv.paths = append(kv.paths, r.URL.EscapedPath())
		kv.counts[r.PathValue("name")]++
		fmt.Fprintln(w, kv.counts[r.PathValue("name")])
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return kv, strings.TrimPrefix(srv.URL, "http://")
}

func newTestApp(t *testing.T, key string) (*app, string) {
	t.Helper()
	a := &app{
		unit:   "app/0",
		kvFile: filepath.Join(t.TempDir(), "kv-address"),
		key:    key,
		client: &http.Client{},
		logger: slog.New(slog.DiscardHandler),
	}
	srv := httptest.NewServer(a.handler())
	t.Cleanup(srv.Close)
	return a, srv.URL
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func writeKV(t *testing.T, a *app, content string) {
	t.Helper()
	if err := os.WriteFile(a.kvFile, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestPage(t *testing.T) {
	kv1, addr1 := newFakeKV(t)
	kv2, addr2 := newFakeKV(t)
	a, url := newTestApp(t, "counter")
	page := func(n, addr string) string {
		return "app/0 says: this page was seen " + n + " (counter kept in kv at " + addr + ")\n"
	}
	dead := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return ln.Addr().String()
	}()
	steps := []struct {
		kvFile   *string // nil: remove it
		path     string
		wantCode int
		wantBody string
	}{
		{nil, "/", 503, "waiting for kv\n"},
		{nil, "/health", 200, "ok\n"},
		{ptr(""), "/", 503, "waiting for kv\n"},
		{ptr(" \n"), "/", 503, "waiting for kv\n"},
		{ptr(addr1 + "\n"), "/", 200, page("1 time", addr1)},
		{ptr(addr1), "/", 200, page("2 times", addr1)},
		{ptr(addr1), "/health", 200, "ok\n"},
		{ptr(addr1), "/favicon.ico", 404, ""},
		{ptr(addr2 + "\n"), "/", 200, page("1 time", addr2)},
		{ptr(addr1 + "\n"), "/", 200, page("3 times", addr1)},
		{ptr(dead + "\n"), "/", 502, ""},
		{ptr("no port\n"), "/", 503, ""},
		{nil, "/", 503, "waiting for kv\n"},
	}
	for i, s := range steps {
		if s.kvFile == nil {
			if err := os.Remove(a.kvFile); err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
		} else {
			writeKV(t, a, *s.kvFile)
		}
		code, body := get(t, url+s.path)
		if code != s.wantCode || (s.wantBody != "" && body != s.wantBody) {
			t.Errorf("step %d: GET %s = %d %q, want %d %q", i, s.path, code, body, s.wantCode, s.wantBody)
		}
	}
	if got, want := kv1.counts["counter"], 3; got != want {
		t.Errorf("kv1's counter = %d, want %d", got, want)
	}
	if got, want := kv2.counts["counter"], 1; got != want {
		t.Errorf("kv2's counter = %d, want %d", got, want)
	}
}

func TestPageKey(t *testing.T) {
	kv, addr := newFakeKV(t)
	a, url := newTestApp(t, "a b/c")
	writeKV(t, a, addr)
	if code, _ := get(t, url+"/"); code != 200 {
		t.Fatalf("GET / = %d, want 200", code)
	}
	if want := []string{"/keys/a%20b%2Fc/incr"}; len(kv.paths) != 1 || kv.paths[0] != want[0] {
		t.Errorf("kv was called at %q, want %q", kv.paths, want)
	}
}

func TestKVErrors(t *testing.T) {
	for _, tt := range []struct {
		name    string
		handler http.HandlerFunc
	}{
		{"conflict", func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "not an integer", http.StatusConflict) }},
		{"not a number", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "many") }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			kv := httptest.NewServer(tt.handler)
			defer kv.Close()
			a, url := newTestApp(t, "counter")
			writeKV(t, a, strings.TrimPrefix(kv.URL, "http://"))
			if code, body := get(t, url+"/"); code != 502 || !strings.Contains(body, "kv at ") {
				t.Errorf("GET / = %d %q, want 502 naming kv", code, body)
			}
		})
	}
}

func TestRunUsage(t *testing.T) {
	for _, args := range [][]string{{}, {"-kv-file"}, {"-kv-file", "f", "-key", ""}, {"-kv-file", "f", "x"}, {"probe"}} {
		if code := run(context.Background(), args, io.Discard); code != 2 {
			t.Errorf("app-server %q = exit %d, want 2", args, code)
		}
	}
}

func ptr(s string) *string { return &s }
