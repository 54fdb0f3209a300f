package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

func newTestServer(t *testing.T, path string) *httptest.Server {
	t.Helper()
	s, err := openStore(path)
	if err != nil {
		t.Fatalf("openStore(%s) = %v", path, err)
	}
	srv := httptest.NewServer(newHandler(s, slog.New(slog.DiscardHandler)))
	t.Cleanup(srv.Close)
	return srv
}

func do(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
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

func TestHandler(t *testing.T) {
	srv := newTestServer(t, filepath.Join(t.TempDir(), "data.json"))
	steps := []struct {
		method, path, body string
		wantCode           int
		wantBody           string
	}{
		{"GET", "/health", "", 200, "ok\n"},
		{"GET", "/keys/a", "", 404, "no key a\n"},
		{"PUT", "/keys/a", "one", 204, ""},
		{"GET", "/keys/a", "", 200, "one"},
		{"PUT", "/keys/a", "uno", 204, ""},
		{"GET", "/keys/a", "", 200, "uno"},
		{"PUT", "/keys/empty", "", 204, ""},
		{"GET", "/keys/empty", "", 200, ""},
		{"POST", "/keys/n/incr", "", 200, "1\n"},
		{"POST", "/keys/n/incr", "", 200, "2\n"},
		{"GET", "/keys/n", "", 200, "2"},
		{"PUT", "/keys/m", "41", 204, ""},
		{"POST", "/keys/m/incr", "", 200, "42\n"},
		{"POST", "/keys/a/incr", "", 409, "key a: value is not an integer\n"},
		{"GET", "/keys/a", "", 200, "uno"},
		{"GET", "/keys", "", 200, "a\nempty\nm\nn\n"},
		{"DELETE", "/keys/a", "", 204, ""},
		{"DELETE", "/keys/a", "", 404, "no key a\n"},
		{"GET", "/keys/a", "", 404, "no key a\n"},
		{"PUT", "/keys/big", strings.Repeat("x", maxValue+1), 413, "value over 1048576 bytes\n"},
		{"GET", "/keys/big", "", 404, "no key big\n"},
		{"POST", "/keys/a", "", 405, ""},
		{"GET", "/nothing", "", 404, ""},
	}
	for _, s := range steps {
		code, body := do(t, s.method, srv.URL+s.path, s.body)
		if code != s.wantCode || (s.wantBody != "" && body != s.wantBody) || (s.wantBody == "" && code == 200 && body != "") {
			t.Errorf("%s %s = %d %q, want %d %q", s.method, s.path, code, body, s.wantCode, s.wantBody)
		}
	}
}

func TestPersistence(t *testing.T) {
	path := filepath.Join(t.TempDir(), "data.json")
	srv := newTestServer(t, path)
	do(t, "PUT", srv.URL+"/keys/greeting", "hello\x00\xff")
	do(t, "PUT", srv.URL+"/keys/gone", "x")
	do(t, "DELETE", srv.URL+"/keys/gone", "")
	for range 3 {
		do(t, "POST", srv.URL+"/keys/counter/incr", "")
	}
	srv.Close()

	again := newTestServer(t, path)
	for key, want := range map[string]string{"greeting": "hello\x00\xff", "counter": "3"} {
		if code, got := do(t, "GET", again.URL+"/keys/"+key, ""); code != 200 || got != want {
			t.Errorf("after a restart, GET /keys/%s = %d %q, want 200 %q", key, code, got, want)
		}
	}
	if code, _ := do(t, "GET", again.URL+"/keys/gone", ""); code != 404 {
		t.Errorf("after a restart, GET /keys/gone = %d, want 404", code)
	}
	// Only the data file is left: no temporary files.
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Errorf("the data directory holds %d entries, want only data.json", len(entries))
	}
}

func TestSaveFailureUndoes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	srv := newTestServer(t, filepath.Join(dir, "data.json"))
	do(t, "PUT", srv.URL+"/keys/a", "1")
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct{ method, path, body string }{
		{"PUT", "/keys/a", "2"}, {"PUT", "/keys/b", "2"}, {"POST", "/keys/a/incr", ""}, {"DELETE", "/keys/a", ""},
	} {
		if code, _ := do(t, s.method, srv.URL+s.path, s.body); code != 500 {
			t.Errorf("%s %s with the data directory gone = %d, want 500", s.method, s.path, code)
		}
	}
	if code, got := do(t, "GET", srv.URL+"/keys/a", ""); code != 200 || got != "1" {
		t.Errorf("GET /keys/a after failed changes = %d %q, want 200 %q", code, got, "1")
	}
	if code, _ := do(t, "GET", srv.URL+"/keys/b", ""); code != 404 {
		t.Errorf("GET /keys/b after a failed put = %d, want 404", code)
	}
}

func TestOpenStoreBadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "data.json")
	if err := os.WriteFile(path, []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := openStore(path); err == nil {
		t.Errorf("openStore(a corrupt file) = nil error, want one")
	}
}

func TestIncrConcurrent(t *testing.T) {
	srv := newTestServer(t, filepath.Join(t.TempDir(), "data.json"))
	const workers, each = 20, 10
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		seen = map[int]bool{}
		errs []string
	)
	for range workers {
		wg.Go(func() {
			for range each {
				resp, err := http.Post(srv.URL+"/keys/hits/incr", "", nil)
				if err != nil {
					mu.Lock()
					errs = append(errs, err.Error())
					mu.Unlock()
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				n, err := strconv.Atoi(strings.TrimSpace(string(b)))
				mu.Lock()
				if err != nil || seen[n] {
					errs = append(errs, "answer "+string(b))
				}
				seen[n] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("concurrent incr: %q", errs)
	}
	for n := 1; n <= workers*each; n++ {
		if !seen[n] {
			t.Errorf("no incr answered %d", n)
		}
	}
	if code, got := do(t, "GET", srv.URL+"/keys/hits", ""); code != 200 || got != strconv.Itoa(workers*each) {
		t.Errorf("GET /keys/hits = %d %q, want 200 %q", code, got, strconv.Itoa(workers*each))
	}
}

// TestRun runs the command as its charm does: serve, probe, stop, serve
// again on the same data.
func TestRun(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data.json")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	base := "http://" + addr
	serve := func() (stop func() int) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan int, 1)
		go func() { done <- run(ctx, []string{"-addr", addr, "-data", data}, io.Discard, io.Discard) }()
		if code := run(context.Background(), []string{"probe", "-timeout", "10s", base + "/health"}, io.Discard, io.Discard); code != 0 {
			cancel()
			t.Fatalf("kv-server probe = %d, want 0", code)
		}
		return func() int { cancel(); return <-done }
	}
	stop := serve()
	do(t, "POST", base+"/keys/c/incr", "")
	if code := stop(); code != 0 {
		t.Errorf("kv-server stopped = exit %d, want 0", code)
	}
	stop = serve()
	defer stop()
	if code, got := do(t, "POST", base+"/keys/c/incr", ""); code != 200 || got != "2\n" {
		t.Errorf("incr after a restart = %d %q, want 200 %q", code, got, "2\n")
	}
	// get prints what a 200 answer holds, and fails on anything else.
	do(t, "PUT", base+"/keys/b", "x")
	var out strings.Builder
	if code := run(context.Background(), []string{"get", base + "/keys"}, &out, io.Discard); code != 0 || out.String() != "b\nc\n" {
		t.Errorf("kv-server get /keys = exit %d, %q; want 0, %q", code, out.String(), "b\nc\n")
	}
	var stderr strings.Builder
	if code := run(context.Background(), []string{"get", base + "/keys/nope"}, io.Discard, &stderr); code != 1 || !strings.Contains(stderr.String(), "404 Not Found") {
		t.Errorf("kv-server get of a missing key = exit %d, %q; want 1 naming the 404", code, stderr.String())
	}
}

func TestRunUsage(t *testing.T) {
	ctx := context.Background()
	for _, args := range [][]string{{}, {"-data"}, {"-data", "x", "extra"}, {"-nope"}, {"probe"}, {"get"}, {"get", "a", "b"}} {
		if code := run(ctx, args, io.Discard, io.Discard); code != 2 {
			t.Errorf("kv-server %q = exit %d, want 2", args, code)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if code := run(ctx, []string{"-addr", ln.Addr().String(), "-data", filepath.Join(t.TempDir(), "d")}, io.Discard, io.Discard); code != 1 {
		t.Errorf("kv-server on a taken port = exit %d, want 1", code)
	}
	if code := run(ctx, []string{"probe", "-timeout", "300ms", "http://" + ln.Addr().String() + "/health"}, io.Discard, io.Discard); code != 1 {
		t.Errorf("kv-server probe of a silent port = exit %d, want 1", code)
	}
}
