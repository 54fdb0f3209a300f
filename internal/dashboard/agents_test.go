package dashboard_test

import (
	"context"
	"io"
	"os"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/lifelinehq/lifeline/internal/apiclient"
	"github.com/lifelinehq/lifeline/internal/pki"
	"github.com/lifelinehq/lifeline/internal/testing/e2etest"
	"github.com/lifelinehq/lifeline/machineagent"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/unitagent"
)

// The browser tests run real hooks and actions: a machine agent in this
// process runs its units' agents, which run the test charms' scripts with
// lifelined as their hook tools.

var lifelinedOnce struct {
	sync.Once
	path string
	err  error
}

// lifelined builds the lifelined binary once for the test process.
func lifelined(t *testing.T) string {
	t.Helper()
	lifelinedOnce.Do(func() {
		dir, err := os.MkdirTemp("", "ll-dash-bin-")
		if err != nil {
			lifelinedOnce.err = err
			return
		}
		lifelinedOnce.path, lifelinedOnce.err = e2etest.BuildLifelined(dir)
	})
	if lifelinedOnce.err != nil {
		t.Fatalf("build lifelined: %v", lifelinedOnce.err)
	}
	return lifelinedOnce.path
}

// runMachine adds a machine and runs its agent in this process until the
// test ends; it returns the machine's id.
func (f *fixture) runMachine(t *testing.T) string {
	t.Helper()
	ms, err := f.State.AddMachines(f.Ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	m := ms[0].Id
	dir, err := os.MkdirTemp("", "ll-dm-") // short: the hook tool socket is in it
	if err != nil {
		t.Fatal(err)
	}
	conn := f.Dial(pki.Credential{})
	a, err := machineagent.New(machineagent.Config{
		MachineID: m, DataDir: dir, Address: "127.0.0.1", API: f.Agent("machine-" + m),
		DialUnit: func(cred *machineagent.UnitCredential) (unitagent.API, io.Closer, error) {
			return pb.NewAgentServiceClient(apiclient.AsRenewable(conn, cred)), io.NopCloser(nil), nil
		},
		Lifelined: lifelined(t), Logger: hclog.NewNullLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		os.RemoveAll(dir)
	})
	return m
}
