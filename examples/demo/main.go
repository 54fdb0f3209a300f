// Command demo is what `make demo` runs: it bootstraps a local controller
// (embedded etcd, the local provider) in a temporary directory, deploys the
// example charms and relates them, waits until everything is running,
// shows the status, fetches each app unit's page twice to show the counter
// moving through kv, then destroys everything, waits until the model is
// empty and kills the controller. With -keep (KEEP=1) it leaves the model
// running and says how to look around and tear it down.
//
// It drives the real ctl, printing each command before its output, so
// that what it does can be done by hand.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctlPath := flag.String("ctl", "bin/ctl", "the ctl binary")
	charms := flag.String("charms", "examples/charms", "the example charms, their servers built")
	keep := flag.Bool("keep", false, "leave the model running and say how to look around")
	flag.Parse()
	if err := run(*ctlPath, *charms, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

type demo struct {
	ctl    string
	env    []string
	config string
	data   string
}

func run(ctlPath, charms string, keep bool) error {
	start := time.Now()
	ctlPath, err := filepath.Abs(ctlPath)
	if err != nil {
		return err
	}
	for _, bin := range []string{"kv/bin/kv-server", "app/bin/app-server"} {
		if _, err := os.Stat(filepath.Join(charms, bin)); err != nil {
			return fmt.Errorf("%s is missing: run 'make charms'", filepath.Join(charms, bin))
		}
	}
	dir, err := os.MkdirTemp("", "lifeline-demo-")
	if err != nil {
		return err
	}
	d := &demo{
		ctl: ctlPath, config: filepath.Join(dir, "client.json"), data: filepath.Join(dir, "controller"),
	}
	d.env = append(os.Environ(), "LIFELINE_CONFIG="+d.config)
	port, err := freePort()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	say("Lifeline demo: a local controller in %s", dir)
	if err := d.run(ctx, "bootstrap", "--data-dir", d.data, "--api-port", fmt.Sprint(port)); err != nil {
		return err
	}
	torn := false
	defer func() {
		if !keep && !torn {
			say("tearing down")
			d.run(context.Background(), "kill-controller")
			os.RemoveAll(dir)
		}
	}()
	steps := [][]string{
		{"deploy", filepath.Join(charms, "kv")},
		{"deploy", filepath.Join(charms, "app"), "-n", "2"},
		{"add-relation", "app", "kv"},
		{"deploy", filepath.Join(charms, "logger")},
		{"add-relation", "app", "logger"},
		{"wait", "--timeout", "2m"},
		{"status"},
	}
	for _, args := range steps {
		if err := d.run(ctx, args...); err != nil {
			return err
		}
	}

	say("each app unit serves a page whose counter lives in kv:")
	st, err := d.status(ctx)
	if err != nil {
		return err
	}
	var addrs []string
	for _, name := range sortedKeys(st.Services["app"].Units) {
		if a := st.Machines[st.Services["app"].Units[name].Machine].Address; a != "" {
			addrs = append(addrs, a)
		}
	}
	for round := 0; round < 2; round++ {
		for _, a := range addrs {
			url := "http://" + net.JoinHostPort(a, "8080") + "/"
			page, err := get(ctx, url)
			if err != nil {
				return fmt.Errorf("fetch %s: %w", url, err)
			}
			fmt.Printf("  GET %s  →  %s\n", url, strings.TrimSpace(page))
		}
	}

	if keep {
		say("the model keeps running. To look around and tear down:")
		fmt.Printf("  export LIFELINE_CONFIG=%s\n", d.config)
		fmt.Printf("  %s status\n  %s show-status-log app/0\n  %s kill-controller\n", d.ctl, d.ctl, d.ctl)
		say("done in %s", time.Since(start).Round(time.Second))
		return nil
	}

	for _, args := range [][]string{{"destroy-service", "app", "kv", "logger"}, {"wait", "--timeout", "2m"}} {
		if err := d.run(ctx, args...); err != nil {
			return err
		}
	}
	st, err = d.status(ctx)
	if err != nil {
		return err
	}
	if len(st.Machines) > 0 {
		if err := d.run(ctx, append([]string{"destroy-machine"}, sortedKeys(st.Machines)...)...); err != nil {
			return err
		}
	}
	say("waiting until the model is empty")
	deadline := time.Now().Add(2 * time.Minute)
	for {
		st, err := d.status(ctx)
		if err != nil {
			return err
		}
		if len(st.Machines)+len(st.Services)+len(st.Relations) == 0 {
			break
		}
		if time.Now().After(deadline) {
			return errors.New("the model did not empty within 2 minutes")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	if err := d.run(ctx, "status"); err != nil {
		return err
	}
	torn = true
	if err := d.run(ctx, "kill-controller"); err != nil {
		return err
	}
	os.RemoveAll(dir)
	say("done in %s", time.Since(start).Round(time.Second))
	return nil
}

func say(format string, args ...any) { fmt.Printf("\n== "+format+"\n", args...) }

// run runs ctl with args, showing the command and its output.
func (d *demo) run(ctx context.Context, args ...string) error {
	fmt.Printf("\n$ ctl %s\n", strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, d.ctl, args...)
	cmd.Env = d.env
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("ctl %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

type status struct {
	Machines map[string]struct {
		Address string `json:"address"`
	} `json:"machines"`
	Services map[string]struct {
		Units map[string]struct {
			Machine string `json:"machine"`
		} `json:"units"`
	} `json:"services"`
	Relations []any `json:"relations"`
}

func (d *demo) status(ctx context.Context) (*status, error) {
	cmd := exec.CommandContext(ctx, d.ctl, "status", "--format", "json")
	cmd.Env = d.env
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("ctl status: %w", err)
	}
	var st status
	if err := json.Unmarshal(out, &st); err != nil {
		return nil, fmt.Errorf("ctl status: %w", err)
	}
	return &st, nil
}

func get(ctx context.Context, url string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return string(body), nil
}

func freePort() (int, error) {
	for i := 0; i < 20; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		// The metrics listener takes the next port.
		if m, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port+1)); err == nil {
			m.Close()
			return port, nil
		}
	}
	return 0, errors.New("no free pair of ports")
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool {
		if len(out[i]) != len(out[j]) {
			return len(out[i]) < len(out[j])
		}
		return out[i] < out[j]
	})
	return out
}
