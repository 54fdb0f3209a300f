package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"

	"github.com/lifelinehq/lifeline/internal/apiclient"
	"github.com/lifelinehq/lifeline/internal/pki"
	"github.com/lifelinehq/lifeline/machineagent"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/unitagent"
)

// runWorker is a process of the fleet (-fleet-worker SPEC, with
// -fleet-procs): it runs the agents of the machines its spec names until
// its input ends. It says its /debug/pprof address on its first line of
// output, then each agent's failure on a line "error: ...".
func runWorker(specPath string) error {
	data, err := os.ReadFile(specPath)
	if err != nil {
		return err
	}
	var spec workerSpec
	if err := json.Unmarshal(data, &spec); err != nil {
		return fmt.Errorf("%s: %w", specPath, err)
	}
	logf, err := os.OpenFile(spec.Log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	logger := hclog.New(&hclog.LoggerOptions{Name: "bench", Level: hclog.Warn, Output: logf})

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	go http.Serve(ln, mux)

	var out sync.Mutex
	say := func(format string, args ...any) {
		out.Lock()
		defer out.Unlock()
		fmt.Printf(format+"\n", args...)
	}
	say("pprof %s", ln.Addr())

	stop, err := runAgents(spec, logger, func(err error) {
		say("error: %s", strings.ReplaceAll(err.Error(), "\n", " "))
	})
	if err != nil {
		return err
	}
	defer stop()
	// Until the harness closes its end, or dies.
	io.Copy(io.Discard, os.Stdin)
	return nil
}

// runAgents runs the agents of the machines spec names, each with one
// connection of its own shared by its units, and reports each one's
// failure. stop stops them and waits for them.
func runAgents(spec workerSpec, logger hclog.Logger, report func(error)) (stop func(), err error) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var conns []*grpc.ClientConn
	release := func() {}
	if spec.HeapFloor {
		release = heapFloor(len(spec.Tokens))
	}
	stop = func() {
		cancel()
		wg.Wait()
		for _, c := range conns {
			c.Close()
		}
		release()
	}
	for i, token := range spec.Tokens {
		id := spec.IDs[i]
		tok, err := pki.DecodeJoinToken(token)
		if err != nil {
			stop()
			return nil, err
		}
		conn, err := apiclient.Dial(apiclient.Config{Addresses: tok.Controllers, CACert: []byte(tok.CACert)})
		if err != nil {
			stop()
			return nil, err
		}
		conns = append(conns, conn)
		// Each machine joins as a host would: its credential made here.
		cred, _, err := pki.NewCredential("machine-" + id)
		if err != nil {
			stop()
			return nil, err
		}
		jctx, jcancel := context.WithTimeout(ctx, time.Minute)
		err = machineagent.Join(jctx, pb.NewMachineJoinServiceClient(conn), tok, cred)
		jcancel()
		if err != nil {
			stop()
			return nil, fmt.Errorf("machine %s: %w", id, err)
		}
		a, err := machineagent.New(machineagent.Config{
			MachineID: id, DataDir: filepath.Join(spec.Dir, "m", id), Address: "127.0.0.1",
			API: pb.NewAgentServiceClient(apiclient.As(conn, cred)),
			DialUnit: func(cred *machineagent.UnitCredential) (unitagent.API, io.Closer, error) {
				return pb.NewAgentServiceClient(apiclient.AsRenewable(conn, cred)), io.NopCloser(nil), nil
			},
			Lifelined: spec.Lifelined, Logger: logger.With("machine", id),
			UnitRetry: unitagent.RetryPolicy{Initial: time.Second, Attempts: 3},
		})
		if err != nil {
			stop()
			return nil, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := a.Run(ctx); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, machineagent.ErrMachineDead) {
				report(fmt.Errorf("machine %s: %w", id, err))
			}
		}()
	}
	return stop, nil
}
