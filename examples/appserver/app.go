package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// kvTimeout bounds one call to kv.
const kvTimeout = 5 * time.Second

// app serves the page. It reads the kv address from kvFile on every
// request, so the charm's hooks point it at another kv unit (or at none)
// by rewriting the file, without restarting it.
type app struct {
	unit   string // "app/0"
	kvFile string // "HOST:PORT" of the kv unit; absent or empty: no kv
	key    string // the counter's key in kv
	client *http.Client
	logger *slog.Logger
}

func (a *app) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /{$}", a.page)
	return mux
}

func (a *app) page(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	kv, err := a.kvAddr()
	if err != nil {
		a.logger.Error("cannot read the kv address", "file", a.kvFile, "err", err)
		http.Error(w, "waiting for kv: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	if kv == "" {
		http.Error(w, "waiting for kv", http.StatusServiceUnavailable)
		return
	}
	n, err := a.incr(r.Context(), kv)
	if err != nil {
		a.logger.Warn("kv failed", "kv", kv, "err", err)
		http.Error(w, fmt.Sprintf("kv at %s failed: %v", kv, err), http.StatusBadGateway)
		return
	}
	times := "times"
	if n == 1 {
		times = "time"
	}
	fmt.Fprintf(w, "%s says: this page was seen %d %s (counter kept in kv at %s)\n", a.unit, n, times, kv)
}

// kvAddr returns the kv unit's "HOST:PORT", or "" when there is none.
func (a *app) kvAddr() (string, error) {
	b, err := os.ReadFile(a.kvFile)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	addr := strings.TrimSpace(string(b))
	if addr == "" {
		return "", nil
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return "", fmt.Errorf("%s: %w", a.kvFile, err)
	}
	return addr, nil
}

// incr increments the counter in kv and returns its new value.
func (a *app) incr(ctx context.Context, kv string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, kvTimeout)
	defer cancel()
	u := "http://" + kv + "/keys/" + url.PathEscape(a.key) + "/incr"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
	if err != nil {
		return 0, err
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s answered %s: %s", u, resp.Status, strings.TrimSpace(string(body)))
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(body)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s answered %q, not a number", u, body)
	}
	return n, nil
}
