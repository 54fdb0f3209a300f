package daemon

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestProbe(t *testing.T) {
	var tries atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if tries.Add(1) < 3 {
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	}))
	defer srv.Close()
	if err := Probe(context.Background(), srv.URL, 10*time.Second); err != nil {
		t.Errorf("Probe(a server ready at the third try) = %v", err)
	}
	if got := tries.Load(); got != 3 {
		t.Errorf("Probe tried %d times, want 3", got)
	}
}

func TestProbeTimeout(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "never", http.StatusInternalServerError)
	}))
	defer srv.Close()
	err := Probe(context.Background(), srv.URL, 300*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "500") {
		t.Errorf("Probe(a failing server) = %v, want an error naming its answer", err)
	}
}

func TestProbeMain(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") }))
	defer srv.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close() // listening, never answering
	tests := []struct {
		args []string
		want int
	}{
		{[]string{srv.URL}, 0},
		{[]string{"-timeout", "1s", srv.URL}, 0},
		{[]string{"-timeout", "200ms", "http://" + ln.Addr().String()}, 1},
		{[]string{}, 2},
		{[]string{"a", "b"}, 2},
		{[]string{"-timeout", "soon", srv.URL}, 2},
	}
	for _, tt := range tests {
		if got := ProbeMain(context.Background(), "x", tt.args, io.Discard); got != tt.want {
			t.Errorf("ProbeMain(%q) = %d, want %d", tt.args, got, tt.want)
		}
	}
}

func TestServe(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	logger := slog.New(slog.DiscardHandler)
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, logger, addr, h) }()
	if err := Probe(context.Background(), "http://"+addr, 10*time.Second); err != nil {
		cancel()
		t.Fatalf("Probe(the served address) = %v", err)
	}
	if err := Serve(context.Background(), logger, addr, h); err == nil {
		t.Errorf("Serve on a taken address = nil, want an error")
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Serve after its context ended = %v, want nil", err)
	}
	if _, err := http.Get("http://" + addr); err == nil {
		t.Errorf("the address still answers after Serve returned")
	}
}
