package machineagent_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/lifelinehq/lifeline/internal/testing/controllertest"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
	"github.com/lifelinehq/lifeline/machineagent"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// uploadMeta writes a charm of metadata.yaml meta (and config.yaml
// config, when set) and uploads it.
func uploadMeta(t *testing.T, env *controllertest.Env, op pb.OperatorServiceClient, meta, config string) *pb.Charm {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "charm")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "metadata.yaml"), []byte(meta), 0o644); err != nil {
		t.Fatal(err)
	}
	if config != "" {
		if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(config), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return env.Upload(op, dir)
}

// unitStatus returns the unit's status, nil when it has none.
func unitStatus(t *testing.T, env *controllertest.Env, op pb.OperatorServiceClient, unit string) *pb.UnitStatus {
	t.Helper()
	st, err := op.Status(env.Ctx, &pb.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st.Status.Services {
		for _, u := range s.Units {
			if u.Name == unit {
				return u
			}
		}
	}
	return nil
}

// waitOn waits until the unit runs revision n, idle.
func waitOn(t *testing.T, env *controllertest.Env, op pb.OperatorServiceClient, unit string, n int64) {
	t.Helper()
	poll.UntilSays(t, fmt.Sprintf("%s idle on revision %d", unit, n), func() (bool, string) {
		ur, err := env.State.UnitRevision(env.Ctx, unit)
		s := unitStatus(t, env, op, unit)
		if err != nil || s == nil {
			return false, fmt.Sprint(err)
		}
		return ur.Current == n && ur.Target == n && s.Agent == "idle" && s.State == "running",
			fmt.Sprintf("revision %d→%d, agent %s %q in %s", ur.Current, ur.Target, s.Agent, s.AgentMessage, s.State)
	})
}

// waitConflict waits until the unit's agent is in error with message want.
func waitConflict(t *testing.T, env *controllertest.Env, op pb.OperatorServiceClient, unit, want string) {
	t.Helper()
	poll.UntilSays(t, unit+" in error: "+want, func() (bool, string) {
		s := unitStatus(t, env, op, unit)
		if s == nil {
			return false, "no status"
		}
		return s.Agent == "error" && s.AgentMessage == want, fmt.Sprintf("agent %s %q", s.Agent, s.AgentMessage)
	})
}

// refresh moves the service to charm c, and grants its unit the permit.
func refresh(t *testing.T, env *controllertest.Env, service, unit string, c *pb.Charm) int64 {
	t.Helper()
	ref := &pb.CharmRef{Name: c.Name, Revision: c.Revision, Sha256: c.Sha256}
	rev, err := env.State.ChangeSpec(env.Ctx, service, state.SpecChange{Reason: "refresh",
		Next: func(head *pb.Revision) (*pb.ServiceSpec, []*pb.Endpoint, error) {
			return &pb.ServiceSpec{Charm: ref, Config: head.Spec.Config}, nil, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	grant(t, env, service, unit, rev.Number)
	return rev.Number
}

func grant(t *testing.T, env *controllertest.Env, service, unit string, target int64) {
	t.Helper()
	if got, err := env.State.GrantPermits(env.Ctx, service, target, []string{unit}); err != nil || len(got) != 1 {
		t.Fatalf("GrantPermits(%s, %d, %s) = %v, %v", service, target, unit, got, err)
	}
}

// TestConflictRollsBackTheChangedUnit: of two units on a machine, the one
// whose refresh claims the port the other holds is rolled back: it keeps
// its revision (not reported moved, so that its rollout fails) and
// reports the conflict, while the other runs on untouched; the revert
// takes it out of error without resolved (the machine agent restarted
// before the refresh). Refreshed again, it is refused again; once the other unit is gone, ctl resolved asks again and it
// moves.
func TestConflictRollsBackTheChangedUnit(t *testing.T) {
	env := controllertest.New(t, controllertest.Options{Cleaner: true})
	op := env.Operator()
	uploadMeta(t, env, op, "name: kv\nhost:\n  ports: [\"8080/tcp\"]\n", "")
	uploadMeta(t, env, op, "name: web\nhost:\n  ports: [\"9000/tcp\"]\n", "")
	ms, err := env.State.AddMachines(env.Ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	m := ms[0].Id
	for _, c := range []string{"kv", "web"} {
		if _, err := op.Deploy(env.Ctx, &pb.DeployRequest{Charm: c, NumUnits: 1, To: m}); err != nil {
			t.Fatal(err)
		}
	}
	dir, err := os.MkdirTemp("", "ll-m-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	run := startAgent(t, env, m, dir)
	waitOn(t, env, op, "kv/0", 1)
	waitOn(t, env, op, "web/0", 1)
	// What the machine's agent knows of its units' claims survives it.
	run.stop()
	startAgent(t, env, m, dir)

	web2 := uploadMeta(t, env, op, "name: web\nhost:\n  ports: [\"8080/tcp\"]\n", "")
	target := refresh(t, env, "web", "web/0", web2)
	waitConflict(t, env, op, "web/0", "conflict: port 8080/tcp is claimed by kv/0: kept revision 1")
	if ur, err := env.State.UnitRevision(env.Ctx, "web/0"); err != nil || ur.Current != 1 || ur.Target != target {
		t.Errorf("web/0 rolled back: %v (%v), want on 1, its target %d", ur, err, target)
	}
	if s := unitStatus(t, env, op, "kv/0"); s.Agent != "idle" || s.State != "running" {
		t.Errorf("kv/0 beside the conflict: agent %s %q in %s, want idle, running", s.Agent, s.AgentMessage, s.State)
	}

	// The rollout fails for it, and reverts: out of error, on the revert.
	back, err := env.State.FailRollout(env.Ctx, "web", target, "web/0 in error")
	if err != nil || back == nil {
		t.Fatalf("FailRollout = %v, %v; want a revert", back, err)
	}
	grant(t, env, "web", "web/0", back.Number)
	waitOn(t, env, op, "web/0", back.Number)

	// Refused again; kv goes, and resolved asks again: taken.
	target = refresh(t, env, "web", "web/0", web2)
	waitConflict(t, env, op, "web/0", fmt.Sprintf("conflict: port 8080/tcp is claimed by kv/0: kept revision %d", back.Number))
	if _, err := op.DestroyService(env.Ctx, &pb.DestroyServiceRequest{Service: "kv"}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "kv/0 to be removed", func() bool { return unitStatus(t, env, op, "kv/0") == nil })
	if _, err := op.Resolved(env.Ctx, &pb.ResolvedRequest{Unit: "web/0"}); err != nil {
		t.Fatal(err)
	}
	waitOn(t, env, op, "web/0", target)
}

// chainMeta claims two files in a shared directory (config dir): with
// three units of it, chain/1 writes one path chain/0 writes and one path
// chain/2 writes, each with its own content, and chain/0 and chain/2
// share none.
const chainMeta = `name: chain
host:
  files:
    - path: '{{ config.dir }}/{% if unit_name == "chain/0" %}a0{% else %}p1{% endif %}'
      template: "{{ unit_name }}\n"
    - path: '{{ config.dir }}/{% if unit_name == "chain/2" %}a2{% else %}q0{% endif %}'
      template: "{{ unit_name }}\n"
`

// TestConflictChainMostConflictedFirst: three new units in a chain of
// conflicts, asking in one pass: the middle one, with two conflicts, is
// not started (a new unit has no revision to keep); the two ends, with one
// each, run.
func TestConflictChainMostConflictedFirst(t *testing.T) {
	env := controllertest.New(t, controllertest.Options{Cleaner: true})
	op := env.Operator()
	uploadMeta(t, env, op, chainMeta, "options:\n  dir:\n    type: string\n    default: /nonexistent\n")
	ms, err := env.State.AddMachines(env.Ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	m := ms[0].Id
	shared := t.TempDir()
	if _, err := op.Deploy(env.Ctx, &pb.DeployRequest{Charm: "chain", NumUnits: 3, To: m, Config: map[string]string{"dir": shared}}); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "ll-m-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// A wide window: the three new units' asks, which come as their
	// agents get there, form one pass however loaded the test machine.
	a, err := machineagent.New(machineagent.Config{
		MachineID: m, DataDir: dir, Address: "127.0.0.1", API: env.Agent("machine-" + m),
		DialUnit: dialUnits(env), Lifelined: lifelined, Logger: hclog.NewNullLogger(), ClaimsWindow: 500 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	waitOn(t, env, op, "chain/0", 1)
	waitOn(t, env, op, "chain/2", 1)
	poll.UntilSays(t, "chain/1 not started", func() (bool, string) {
		s := unitStatus(t, env, op, "chain/1")
		if s == nil {
			return false, "no status"
		}
		return s.Agent == "error" && strings.HasPrefix(s.AgentMessage, "conflict: file "+shared) &&
			strings.HasSuffix(s.AgentMessage, "with other content (and 1 more): not started"), s.AgentMessage
	})
	for name, want := range map[string]string{"a0": "chain/0\n", "q0": "chain/0\n", "p1": "chain/2\n", "a2": "chain/2\n"} {
		if b, err := os.ReadFile(filepath.Join(shared, name)); err != nil || string(b) != want {
			t.Errorf("%s holds %q (%v), want %q", name, b, err, want)
		}
	}
}
