package machineagent_test

import (
	"context"
	"errors"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/lifelinehq/lifeline/machineagent"
)

// TestOneAgentAMachine: a machine is run by one agent instance at a time.
// A copy of a running agent's data directory elsewhere (a host cloned with
// it) takes the machine over as the agent's next run would, and the agent
// it was copied from stops (ErrFenced) rather than run the units beside
// it; an agent with the machine's credential alone is refused while
// another runs, having run nothing; a second agent on the same data
// directory is refused at once.
func TestOneAgentAMachine(t *testing.T) {
	env, _, m := twoUnitsOnAMachine(t)
	api := env.Agent("machine-" + m)
	run := func(dir string) <-chan error {
		a, err := machineagent.New(machineagent.Config{
			MachineID: m, DataDir: dir, Address: "127.0.0.1", API: api, DialUnit: dialUnits(env),
			Lifelined: lifelined, Logger: hclog.NewNullLogger(),
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done, finished := make(chan error, 1), make(chan struct{})
		go func() {
			defer close(finished)
			done <- a.Run(ctx)
		}()
		t.Cleanup(func() {
			cancel()
			<-finished
		})
		return done
	}
	stopped := func(what string, done <-chan error) error {
		t.Helper()
		select {
		case err := <-done:
			return err
		case <-time.After(60 * time.Second):
			t.Fatalf("%s did not stop", what)
			return nil
		}
	}
	installed := func(dir string) func() bool {
		return func() bool {
			_, err0 := os.Stat(filepath.Join(dir, "units", "kv-0", "installed"))
			_, err1 := os.Stat(filepath.Join(dir, "units", "kv-1", "installed"))
			return err0 == nil && err1 == nil
		}
	}
	first, copied, alone := tempDir(t), tempDir(t), tempDir(t)
	firstDone := run(first)
	poll.Until(t, "the units installed by the first agent", installed(first))

	if err := stopped("an agent on the first's data directory", run(first)); err == nil || !strings.Contains(err.Error(), "another machine agent runs with data directory") {
		t.Errorf("Run on a data directory in use = %v, want a refusal", err)
	}
	if err := stopped("an agent with the credential alone", run(alone)); !errors.Is(err, machineagent.ErrFenced) || !strings.Contains(err.Error(), "another agent of machine "+m+" is present") {
		t.Errorf("Run of a second agent = %v, want ErrFenced saying another is present", err)
	}
	if _, err := os.Stat(filepath.Join(alone, "units", "kv-0")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused agent ran kv/0 (%v)", err)
	}

	// The copy takes over; the first stops.
	b, err := os.ReadFile(filepath.Join(first, "instance"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(copied, "instance"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	copyDone := run(copied)
	if err := stopped("the agent whose copy took over", firstDone); !errors.Is(err, machineagent.ErrFenced) {
		t.Errorf("Run of the agent copied = %v, want ErrFenced", err)
	}
	poll.Until(t, "the units installed by the copy", installed(copied))
	select {
	case err := <-copyDone:
		t.Errorf("the copy stopped: %v", err)
	default:
	}
}

func tempDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "ll-m-") // short: the hook tool socket is in it
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
