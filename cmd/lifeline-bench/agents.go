package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"

	"github.com/lifelinehq/lifeline/apiclient"
	"github.com/lifelinehq/lifeline/machineagent"
	"github.com/lifelinehq/lifeline/pki"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/unitagent"
)

// fleet is the simulated machines: real machine agents, in this process.
type fleet struct {
	ids    []string
	cancel context.CancelFunc
	wg     sync.WaitGroup
	conns  []*grpc.ClientConn

	mu   sync.Mutex
	errs []error
}

// startFleet adds n manual machines and runs their agents, each with one
// connection of its own shared by its units.
func startFleet(ctx context.Context, c *controllerProc, dir, lifelined string, n int, logger hclog.Logger) (*fleet, error) {
	f := &fleet{}
	var creds []pki.ClientConfig
	for len(creds) < n {
		resp, err := c.op.AddMachines(ctx, &pb.AddMachinesRequest{NumMachines: int32(min(n-len(creds), 1000)), Manual: true})
		if err != nil {
			return nil, fmt.Errorf("add machines: %w", err)
		}
		for i, token := range resp.JoinTokens {
			cfg, err := pki.DecodeJoinToken(token)
			if err != nil {
				return nil, err
			}
			creds = append(creds, cfg)
			f.ids = append(f.ids, resp.Machines[i].Id)
		}
	}
	actx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	for i, cfg := range creds {
		id := f.ids[i]
		dial := apiclient.FromClientConfig(cfg)
		dial.Credential = pki.Credential{}
		conn, err := apiclient.Dial(dial)
		if err != nil {
			f.stop()
			return nil, err
		}
		f.conns = append(f.conns, conn)
		mdir := filepath.Join(dir, "m", id)
		a, err := machineagent.New(machineagent.Config{
			MachineID: id, DataDir: mdir, Address: "127.0.0.1",
			API: pb.NewAgentServiceClient(apiclient.As(conn, cfg.Credential())),
			DialUnit: func(cred pki.Credential) (unitagent.API, io.Closer, error) {
				return pb.NewAgentServiceClient(apiclient.As(conn, cred)), io.NopCloser(nil), nil
			},
			Lifelined: lifelined, Logger: logger.With("machine", id),
			UnitRetry: unitagent.RetryPolicy{Initial: time.Second, Attempts: 3},
		})
		if err != nil {
			f.stop()
			return nil, err
		}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			if err := a.Run(actx); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, machineagent.ErrMachineDead) {
				f.mu.Lock()
				f.errs = append(f.errs, fmt.Errorf("machine %s: %w", id, err))
				f.mu.Unlock()
			}
		}()
	}
	return f, nil
}

func (f *fleet) stop() {
	if f.cancel != nil {
		f.cancel()
	}
	f.wg.Wait()
	for _, c := range f.conns {
		c.Close()
	}
}

func (f *fleet) err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return errors.Join(f.errs...)
}

// writeCharm writes a charm with the given metadata; with hooks, every hook
// the charm can have is a no-op executable.
func writeCharm(dir, name, metadata string, endpoints []string, hooks bool) (string, error) {
	cdir := filepath.Join(dir, "charms", name)
	if err := os.MkdirAll(filepath.Join(cdir, "hooks"), 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(cdir, "metadata.yaml"), []byte(metadata), 0o644); err != nil {
		return "", err
	}
	if !hooks {
		return cdir, nil
	}
	names := []string{"install", "config-changed", "start", "stop", "remove"}
	for _, ep := range endpoints {
		for _, k := range []string{"created", "joined", "changed", "departed", "broken"} {
			names = append(names, ep+"-relation-"+k)
		}
	}
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(cdir, "hooks", n), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
			return "", err
		}
	}
	return cdir, nil
}
