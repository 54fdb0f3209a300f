package main_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lifelinehq/lifeline/internal/apiclient"
	"github.com/lifelinehq/lifeline/internal/pki"
	"github.com/lifelinehq/lifeline/internal/testing/e2etest"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
	"github.com/lifelinehq/lifeline/internal/testing/syncbuf"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// haController is a controller process of a test.
type haController struct {
	name, addr, config string
	cmd                *exec.Cmd
	logs               *syncbuf.Buffer
}

func startHAController(t *testing.T, dir, name, endpoint string, extra ...string) *haController {
	t.Helper()
	c := &haController{name: name, addr: freeAddr(t), config: filepath.Join(dir, name+".json"), logs: &syncbuf.Buffer{}}
	c.cmd = exec.Command(lifelined, append([]string{"controller", "--data-dir", filepath.Join(dir, name), "--api-addr", c.addr,
		"--metrics-addr", "", "--client-config", c.config, "--etcd-endpoints", endpoint, "--namespace", "/ha/",
		"--provider", "manual", "--presence-timeout", "3s"}, extra...)...)
	c.cmd.Stdout, c.cmd.Stderr = c.logs, c.logs
	e2etest.StartChild(t, c.cmd)
	t.Cleanup(func() {
		c.cmd.Process.Signal(os.Interrupt)
		c.cmd.Wait()
		if t.Failed() {
			t.Logf("controller %s log:\n%s", name, c.logs.String())
		}
	})
	return c
}

func (c *haController) clientConfig(t *testing.T) pki.ClientConfig {
	t.Helper()
	var cfg pki.ClientConfig
	poll.UntilSays(t, "controller "+c.name+"'s client config", func() (bool, string) {
		var err error
		cfg, err = pki.ReadClientConfig(c.config)
		return err == nil, fmt.Sprint(err)
	})
	return cfg
}

// dialOnly dials the one controller at addr with cfg's CA and credential.
func dialOnly(t *testing.T, cfg pki.ClientConfig, addr string) pb.OperatorServiceClient {
	t.Helper()
	cfg.Controllers = []string{addr}
	return operator(t, cfg)
}

// operator dials cfg's controllers as cfg's user; the connection closes
// when the test ends.
func operator(t *testing.T, cfg pki.ClientConfig) pb.OperatorServiceClient {
	t.Helper()
	conn, err := apiclient.Dial(apiclient.FromClientConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewOperatorServiceClient(conn)
}

// joinToken asks the controller at addr, as the operator of cfg, for a
// controller join token, and writes it to a file (mode 0600) in dir.
func joinToken(t *testing.T, ctx context.Context, cfg pki.ClientConfig, addr, dir string) string {
	t.Helper()
	resp, err := dialOnly(t, cfg, addr).AddController(ctx, &pb.AddControllerRequest{}, waitForReady()...)
	if err != nil {
		t.Fatalf("AddController: %v", err)
	}
	f, err := os.CreateTemp(dir, "join-*.token")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(resp.Token + "\n"); err != nil {
		t.Fatal(err)
	}
	return f.Name()
}

// controllersOf returns the status's controllers as "id[*]" (the leader
// starred), sorted by id.
func controllersOf(st *pb.ModelStatus) (ids []string, leader string) {
	for _, c := range st.GetControllers() {
		ids = append(ids, c.Id)
		if c.Leader {
			leader = c.Id
		}
	}
	return ids, leader
}

// TestTwoControllersShareOneModel runs two controllers on one etcd: they
// serve with one CA (a client of the first may call the second), both are
// listed with exactly one leader, and when the leader is killed the other
// takes over, the machine agent present through it.
func TestTwoControllersShareOneModel(t *testing.T) {
	dir, etcd := testEtcd(t, "ll-ha-")

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	a := startHAController(t, dir, "a", etcd.Endpoint())
	cfgA := a.clientConfig(t)
	b := startHAController(t, dir, "b", etcd.Endpoint(), "--join-file", joinToken(t, ctx, cfgA, a.addr, dir))
	poll.UntilSays(t, "b to join", func() (bool, string) {
		return strings.Contains(b.logs.String(), "API serving"), ""
	})
	if _, err := os.Stat(b.config); err == nil {
		t.Error("the second controller wrote a client config (with a new admin credential, revoking the first's)")
	}

	// A's admin calls B: same CA, same credentials store.
	viaB := dialOnly(t, cfgA, b.addr)
	added, err := viaB.AddMachines(ctx, &pb.AddMachinesRequest{NumMachines: 1, Manual: true}, waitForReady()...)
	if err != nil {
		t.Fatalf("AddMachines through b with a's client config: %v", err)
	}
	var st *pb.ModelStatus
	poll.UntilSays(t, "both controllers listed with one leader", func() (bool, string) {
		resp, err := viaB.Status(ctx, &pb.StatusRequest{})
		if err != nil {
			return false, err.Error()
		}
		st = resp.Status
		ids, leader := controllersOf(st)
		return len(ids) == 2 && leader != "", fmt.Sprintf("controllers %v, leader %q", ids, leader)
	})
	if len(st.Machines) != 1 {
		t.Errorf("status through b shows %d machines, want 1", len(st.Machines))
	}
	_, leaderID := controllersOf(st)
	leaderProc, survivor := a, b
	if !strings.Contains(a.logs.String(), leaderID) {
		leaderProc, survivor = b, a
	}
	if !strings.Contains(leaderProc.logs.String(), "elected to run the singleton workers") {
		t.Fatalf("controller %s leads (%s) but never logged its election", leaderProc.name, leaderID)
	}

	// A manual machine's agent, on the leader first.
	agent := exec.Command(lifelined, "machine-agent", "--join-file", "-", "--controller", leaderProc.addr,
		"--data-dir", filepath.Join(dir, "machine-0"))
	agent.Stdin = strings.NewReader(added.JoinTokens[0] + "\n")
	agentLogs := &syncbuf.Buffer{}
	agent.Stdout, agent.Stderr = agentLogs, agentLogs
	e2etest.StartChild(t, agent)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("machine agent log:\n%s", agentLogs.String())
		}
	})
	machineAgent := func(op pb.OperatorServiceClient) (string, error) {
		resp, err := op.Status(ctx, &pb.StatusRequest{})
		if err != nil {
			return "", err
		}
		for _, m := range resp.Status.Machines {
			return m.Agent, nil
		}
		return "", fmt.Errorf("no machine")
	}
	poll.UntilSays(t, "the machine agent started", func() (bool, string) {
		a, err := machineAgent(viaB)
		return a == "started", fmt.Sprint(a, err)
	})

	// The agent's presence key, under the lease of the controller its
	// Presence stream reached.
	cli, err := etcd.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	presenceLease := func() (int64, string) {
		resp, err := cli.Get(ctx, "/ha/presence/", clientv3.WithPrefix())
		if err != nil {
			return 0, err.Error()
		}
		if len(resp.Kvs) != 1 {
			return 0, fmt.Sprintf("%d presence keys, want the agent's", len(resp.Kvs))
		}
		return resp.Kvs[0].Lease, fmt.Sprintf("%s under lease %x", resp.Kvs[0].Key, resp.Kvs[0].Lease)
	}
	before, says := presenceLease()
	if before == 0 {
		t.Fatalf("the started agent's presence: %s", says)
	}

	// Kill the leader outright: the survivor leads once the lease lapses.
	killed := time.Now()
	leaderProc.cmd.Process.Signal(syscall.SIGKILL)
	viaSurvivor := dialOnly(t, cfgA, survivor.addr)
	poll.UntilSays(t, "the survivor alone, leading", func() (bool, string) {
		resp, err := viaSurvivor.Status(ctx, &pb.StatusRequest{})
		if err != nil {
			return false, err.Error()
		}
		ids, leader := controllersOf(resp.Status)
		return len(ids) == 1 && leader == ids[0] && leader != leaderID, fmt.Sprintf("controllers %v, leader %q", ids, leader)
	})
	t.Logf("controller %s took over %s after %s was killed", survivor.name, time.Since(killed).Round(100*time.Millisecond), leaderProc.name)
	// The agent present again under another lease than the one it had:
	// the key held through the dead controller went with its lease (if
	// the agent was on it), and the survivor holds the agent's now.
	poll.UntilSays(t, "the agent's presence under another lease", func() (bool, string) {
		lease, says := presenceLease()
		return lease != 0 && lease != before, says
	})
	poll.UntilSays(t, "the machine agent back, on the survivor", func() (bool, string) {
		a, err := machineAgent(viaSurvivor)
		return a == "started", fmt.Sprint(a, err)
	})
	t.Logf("the machine agent shows started through the survivor %s after the kill", time.Since(killed).Round(100*time.Millisecond))
}
