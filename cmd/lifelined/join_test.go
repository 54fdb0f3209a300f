package main_test

import (
	"context"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// controllerExits runs a controller of the model that must stop at start,
// and returns what it printed.
func controllerExits(t *testing.T, ctx context.Context, dir, name, endpoint string, extra ...string) string {
	t.Helper()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, lifelined, append([]string{"controller", "--data-dir", filepath.Join(dir, name),
		"--api-addr", freeAddr(t), "--metrics-addr", "", "--client-config", filepath.Join(dir, name+".json"),
		"--etcd-endpoints", endpoint, "--namespace", "/ha/", "--provider", "manual"}, extra...)...)
	out, err := cmd.CombinedOutput()
	if cctx.Err() != nil || err == nil || cmd.ProcessState.ExitCode() != 1 {
		t.Fatalf("controller %s = %v (%v), want exit status 1; it printed:\n%s", name, err, cctx.Err(), out)
	}
	return string(out)
}

// lastLine is the last line of out.
func lastLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return lines[len(lines)-1]
}

// TestControllerJoinToken: a controller joins the model's controllers only
// with a join token from the operator, and a token works once; a joined
// controller starts again without it.
func TestControllerJoinToken(t *testing.T) {
	dir, etcd := testEtcd(t, "ll-join-")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a := startHAController(t, dir, "a", etcd.Endpoint())
	cfgA := a.clientConfig(t)

	out := controllerExits(t, ctx, dir, "nojoin", etcd.Endpoint())
	if line := lastLine(out); !strings.HasPrefix(line, "lifelined: this controller cannot read the model's CA key") || !strings.Contains(line, "ctl add-controller") {
		t.Errorf("a controller joining without a token ends with %q, want one line naming ctl add-controller; it printed:\n%s", line, out)
	}

	token := joinToken(t, ctx, cfgA, a.addr, dir)
	b := startHAController(t, dir, "b", etcd.Endpoint(), "--join-file", token)
	poll.UntilSays(t, "b to join", func() (bool, string) {
		return strings.Contains(b.logs.String(), "API serving"), ""
	})
	if _, err := dialOnly(t, cfgA, b.addr).Status(ctx, &pb.StatusRequest{}, waitForReady()...); err != nil {
		t.Errorf("Status through b with the operator's client config: %v", err)
	}

	out = controllerExits(t, ctx, dir, "again", etcd.Endpoint(), "--join-file", token)
	if line := lastLine(out); !strings.Contains(line, "the join token was refused") || !strings.Contains(line, "used already") {
		t.Errorf("a second controller with the same token ends with %q, want the token refused as used; it printed:\n%s", line, out)
	}

	// b restarts with the same flags: its data directory holds the key.
	b.cmd.Process.Signal(os.Interrupt)
	b.cmd.Wait()
	b2 := startHAController(t, dir, "b", etcd.Endpoint(), "--join-file", token)
	poll.UntilSays(t, "b to start again", func() (bool, string) {
		return strings.Contains(b2.logs.String(), "API serving"), b2.logs.String()
	})
	if !strings.Contains(b2.logs.String(), "--join-file is not used") {
		t.Errorf("b, started again, did not say it left the token alone:\n%s", b2.logs.String())
	}
}
