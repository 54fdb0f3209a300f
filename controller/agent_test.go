package controller_test

import (
	"bytes"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lifelinehq/lifeline/internal/pki"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// The agents' calls, one table per call; see agentModel for the model each
// case starts from. Watch is tested in agent_watch_test.go.

func getMachine(id string) agentCall {
	return func(t *testing.T, m *agentModel, c pb.AgentServiceClient) error {
		ctx := m.ctx
		_, err := c.GetMachine(ctx, &pb.GetMachineRequest{Machine: id})
		return err
	}
}

func TestAgentGetMachine(t *testing.T) {
	runAgentCases(t, []agentCase{
		{name: "own machine", as: "machine-0", call: func(t *testing.T, m *agentModel, c pb.AgentServiceClient) error {
			ctx := m.ctx
			resp, err := c.GetMachine(ctx, &pb.GetMachineRequest{Machine: "0"})
			if err == nil && (resp.Machine.Id != "0" || resp.Machine.Life != pb.Life_LIFE_ALIVE) {
				t.Errorf("GetMachine(0) = %v, want alive machine 0", resp.Machine)
			}
			return err
		}},
		{name: "another machine", as: "machine-0", call: getMachine("1"), code: codes.PermissionDenied, msg: "machine 0's agent may not read machine 1"},
		// Decided without reading the target: no existence is revealed.
		{name: "a machine that does not exist", as: "machine-0", call: getMachine("9"), code: codes.PermissionDenied, msg: "may not read machine 9"},
		{name: "by a unit agent", as: "unit-kv/0", call: getMachine("0"), code: codes.PermissionDenied, msg: "unit kv/0's agent may not read machine 0"},
		{name: "malformed id", as: "machine-0", call: getMachine("zero"), code: codes.InvalidArgument, msg: `invalid machine id "zero"`},
	})
}

func ensureMachineDead(id string) agentCall {
	return func(t *testing.T, m *agentModel, c pb.AgentServiceClient) error {
		ctx := m.ctx
		_, err := c.EnsureMachineDead(ctx, &pb.EnsureMachineDeadRequest{Machine: id})
		return err
	}
}

func TestAgentEnsureMachineDead(t *testing.T) {
	emptyAndDying := func(m *agentModel) {
		ms, err := m.st.AddMachines(m.ctx, 1)
		m.ok("AddMachines", err)
		m.ok("DestroyMachine", m.st.DestroyMachine(m.ctx, ms[0].Id, state.DestroyOptions{}))
	}
	runAgentCases(t, []agentCase{
		{name: "dying and empty", as: "machine-4", setup: emptyAndDying, call: ensureMachineDead("4"),
			check: func(t *testing.T, m *agentModel) {
				if got, err := m.st.Machine(m.ctx, "4"); err != nil || got.Life != pb.Life_LIFE_DEAD {
					t.Errorf("Machine(4) = %v, %v; want dead", got, err)
				}
			}},
		{name: "alive (M3)", as: "machine-0", call: ensureMachineDead("0"), code: codes.FailedPrecondition, msg: "machine 0 is alive"},
		{name: "dying with a unit (M3)", as: "machine-0",
			setup: func(m *agentModel) {
				m.ok("DestroyUnit", m.st.DestroyUnit(m.ctx, "kv/0", state.DestroyOptions{}))
				m.ok("DestroyMachine", m.st.DestroyMachine(m.ctx, "0", state.DestroyOptions{}))
			},
			call: ensureMachineDead("0"), code: codes.FailedPrecondition, msg: "machine 0 still has unit kv/0 assigned"},
		{name: "another machine", as: "machine-0", setup: emptyAndDying, call: ensureMachineDead("4"), code: codes.PermissionDenied, msg: "machine 0's agent may not set dead machine 4"},
		{name: "by a unit agent", as: "unit-kv/0", call: ensureMachineDead("0"), code: codes.PermissionDenied, msg: "unit kv/0's agent may not set dead machine 0"},
		{name: "malformed id", as: "machine-0", call: ensureMachineDead("-1"), code: codes.InvalidArgument, msg: "invalid machine id"},
	})
}

func setMachineStatus(id string, st *pb.Status) agentCall {
	return func(t *testing.T, m *agentModel, c pb.AgentServiceClient) error {
		ctx := m.ctx
		_, err := c.SetMachineStatus(ctx, &pb.SetMachineStatusRequest{Machine: id, Status: st})
		return err
	}
}

func TestAgentSetMachineStatus(t *testing.T) {
	started := &pb.Status{Status: "started", Message: "running 1 unit"}
	runAgentCases(t, []agentCase{
		{name: "own machine", as: "machine-0", call: setMachineStatus("0", started),
			check: func(t *testing.T, m *agentModel) {
				got, err := m.st.Status(m.ctx, state.StatusMachine, "0")
				if err != nil || got.GetStatus() != "started" || got.GetSinceUnixNano() == 0 {
					t.Errorf("Status(machine 0) = %v, %v; want started, stamped", got, err)
				}
			}},
		{name: "another machine", as: "machine-0", call: setMachineStatus("1", started), code: codes.PermissionDenied, msg: "machine 0's agent may not set the status of machine 1"},
		{name: "by a unit agent", as: "unit-kv/0", call: setMachineStatus("0", started), code: codes.PermissionDenied, msg: "unit kv/0's agent may not"},
		{name: "no status", as: "machine-0", call: setMachineStatus("0", nil), code: codes.InvalidArgument, msg: "needs a status value"},
		{name: "too big", as: "machine-0", call: setMachineStatus("0", &pb.Status{Status: "x", Message: string(make([]byte, 70<<10))}), code: codes.InvalidArgument, msg: "at most"},
		{name: "malformed id", as: "machine-0", call: setMachineStatus("", started), code: codes.InvalidArgument, msg: "invalid machine id"},
	})
}

func issueCredentials(units ...string) agentCall {
	return func(t *testing.T, m *agentModel, c pb.AgentServiceClient) error {
		ctx := m.ctx
		_, err := c.IssueUnitCredentials(ctx, &pb.IssueUnitCredentialsRequest{Units: units})
		return err
	}
}

func TestAgentIssueUnitCredentials(t *testing.T) {
	// works checks that each credential, given in the order asked for,
	// authenticates as its unit.
	works := func(t *testing.T, m *agentModel, c pb.AgentServiceClient, units ...string) error {
		ctx := m.ctx
		resp, err := c.IssueUnitCredentials(ctx, &pb.IssueUnitCredentialsRequest{Units: units})
		if err != nil {
			return err
		}
		if len(resp.Credentials) != len(units) {
			t.Fatalf("IssueUnitCredentials(%v) gave %d credentials, want %d", units, len(resp.Credentials), len(units))
		}
		for i, unit := range units {
			cred := resp.Credentials[i]
			if cred.Unit != unit || cred.Tag != "unit-"+unit {
				t.Errorf("IssueUnitCredentials(%v)[%d] is for %q, tag %q; want %s, unit-%s", units, i, cred.Unit, cred.Tag, unit, unit)
			}
			u := pb.NewAgentServiceClient(m.dial(pki.Credential{Tag: cred.Tag, Secret: cred.Secret}))
			if got, err := u.GetUnit(ctx, &pb.GetUnitRequest{Unit: unit}); err != nil || got.Unit.Name != unit {
				t.Errorf("GetUnit(%s) with the new credential = %v, %v; want the unit", unit, got, err)
			}
		}
		return nil
	}
	many := make([]string, state.MaxCredentialsAtOnce+1)
	for i := range many {
		many[i] = fmt.Sprintf("kv/%d", i)
	}
	runAgentCases(t, []agentCase{
		{name: "principal on the machine", as: "machine-0", call: func(t *testing.T, m *agentModel, c pb.AgentServiceClient) error {
			return works(t, m, c, "kv/0")
		}},
		{name: "subordinate on the machine", as: "machine-2", call: func(t *testing.T, m *agentModel, c pb.AgentServiceClient) error {
			return works(t, m, c, "logger/0")
		}},
		{name: "principal and subordinate at once", as: "machine-2", call: func(t *testing.T, m *agentModel, c pb.AgentServiceClient) error {
			before := m.st.Stats().Txns
			err := works(t, m, c, "logger/0", "app/0")
			if n := m.st.Stats().Txns - before; err == nil && n != 1 {
				t.Errorf("two credentials took %d transactions, want 1", n)
			}
			return err
		}},
		{name: "unit on another machine", as: "machine-0", call: issueCredentials("kv/1"), code: codes.PermissionDenied,
			msg: "machine 0's agent may not issue a credential for unit kv/1: it is not on machine 0"},
		{name: "one of them on another machine", as: "machine-2", call: issueCredentials("app/0", "kv/1", "logger/0"), code: codes.PermissionDenied,
			msg: "machine 2's agent may not issue a credential for unit kv/1: it is not on machine 2"},
		{name: "by a unit agent", as: "unit-kv/0", call: issueCredentials("kv/0"), code: codes.PermissionDenied, msg: "unit kv/0's agent may not issue a credential for unit kv/0"},
		{name: "no such unit", as: "machine-0", call: issueCredentials("kv/9"), code: codes.NotFound, msg: "unit kv/9 not found"},
		{name: "one of them missing", as: "machine-2", call: issueCredentials("app/0", "app/9"), code: codes.NotFound, msg: "unit app/9 not found"},
		{name: "malformed name", as: "machine-0", call: issueCredentials("kv"), code: codes.InvalidArgument, msg: `invalid unit name "kv"`},
		{name: "no units", as: "machine-0", call: issueCredentials(), code: codes.InvalidArgument, msg: "names no unit"},
		{name: "a unit twice", as: "machine-0", call: issueCredentials("kv/0", "kv/0"), code: codes.InvalidArgument, msg: "names unit kv/0 twice"},
		{name: "too many", as: "machine-0", call: issueCredentials(many...), code: codes.InvalidArgument,
			msg: fmt.Sprintf("names %d units: at most %d a call", len(many), state.MaxCredentialsAtOnce)},
	})
}

func removeUnit(unit string) agentCall {
	return func(t *testing.T, m *agentModel, c pb.AgentServiceClient) error {
		ctx := m.ctx
		_, err := c.RemoveUnit(ctx, &pb.RemoveUnitRequest{Unit: unit})
		return err
	}
}

func TestAgentRemoveUnit(t *testing.T) {
	gone := func(unit string) func(*testing.T, *agentModel) {
		return func(t *testing.T, m *agentModel) {
			if got := m.life(unit); got != "removed" {
				t.Errorf("unit %s is %s, want removed", unit, got)
			}
		}
	}
	runAgentCases(t, []agentCase{
		{name: "dead principal by its machine", as: "machine-0", setup: func(m *agentModel) { m.kill("kv/0") },
			call: removeUnit("kv/0"), check: gone("kv/0")},
		{name: "dead subordinate by its principal", as: "unit-app/0", setup: func(m *agentModel) { m.kill("logger/0") },
			call: removeUnit("logger/0"), check: gone("logger/0")},
		{name: "alive principal (U5)", as: "machine-0", call: removeUnit("kv/0"), code: codes.FailedPrecondition, msg: "unit kv/0 is alive: only a dead unit can be removed"},
		{name: "alive subordinate (U5)", as: "unit-app/0", call: removeUnit("logger/0"), code: codes.FailedPrecondition, msg: "only a dead unit"},
		{name: "principal on another machine", as: "machine-0", setup: func(m *agentModel) { m.kill("kv/1") },
			call: removeUnit("kv/1"), code: codes.PermissionDenied, msg: "machine 0's agent may not remove unit kv/1"},
		{name: "subordinate by its machine", as: "machine-2", setup: func(m *agentModel) { m.kill("logger/0") },
			call: removeUnit("logger/0"), code: codes.PermissionDenied, msg: "a subordinate is removed by its principal app/0's agent"},
		{name: "another principal's subordinate", as: "unit-app/0", setup: func(m *agentModel) { m.kill("logger/1") },
			call: removeUnit("logger/1"), code: codes.PermissionDenied, msg: "unit app/0's agent may not remove unit logger/1: it is not a subordinate of app/0"},
		{name: "itself", as: "unit-kv/0", setup: func(m *agentModel) { m.kill("kv/0") },
			call: removeUnit("kv/0"), code: codes.PermissionDenied, msg: "unit kv/0's agent may not remove unit kv/0"},
		{name: "by a subordinate, its principal", as: "unit-logger/0", call: removeUnit("app/0"), code: codes.PermissionDenied, msg: "may not remove unit app/0"},
		{name: "no such unit", as: "machine-0", call: removeUnit("kv/9"), code: codes.NotFound, msg: "unit kv/9 not found"},
		{name: "malformed name", as: "machine-0", call: removeUnit("kv/x"), code: codes.InvalidArgument, msg: "invalid unit name"},
	})
}

func removeUnits(units ...string) agentCall {
	return func(t *testing.T, m *agentModel, c pb.AgentServiceClient) error {
		_, err := c.RemoveUnits(m.ctx, &pb.RemoveUnitsRequest{Units: units})
		return err
	}
}

// A machine agent removes its dead principals together; each is answered
// on its own, as RemoveUnit would have, and one refused leaves the others
// removed.
func TestAgentRemoveUnits(t *testing.T) {
	t.Run("each answered", func(t *testing.T) {
		t.Parallel()
		m := newAgentModel(t)
		m.kill("kv/0")
		m.kill("kv/1")
		m.kill("logger/0")
		resp, err := m.as("machine-0").RemoveUnits(m.ctx, &pb.RemoveUnitsRequest{Units: []string{"kv/0", "kv/1", "kv/9", "logger/0"}})
		m.ok("RemoveUnits", err)
		wantResults(t, resp.GetResults(), []result{
			{codes.OK, ""},
			{codes.PermissionDenied, "machine 0's agent may not remove unit kv/1: it is not on machine 0"},
			{codes.NotFound, "unit kv/9 not found"},
			{codes.PermissionDenied, "may not remove unit logger/0"},
		})
		for unit, life := range map[string]string{"kv/0": "removed", "kv/1": "dead", "logger/0": "dead"} {
			if got := m.life(unit); got != life {
				t.Errorf("unit %s is %s, want %s", unit, got, life)
			}
		}
	})
	runAgentCases(t, []agentCase{
		{name: "alive (U5)", as: "machine-0", call: removeUnits("kv/0"), check: func(t *testing.T, m *agentModel) {
			if got := m.life("kv/0"); got != "alive" {
				t.Errorf("unit kv/0 is %s, want alive", got)
			}
		}},
		{name: "by a unit agent", as: "unit-app/0", setup: func(m *agentModel) { m.kill("logger/0") }, call: removeUnits("logger/0"),
			code: codes.PermissionDenied, msg: "unit app/0's agent may not remove units together: only a machine agent may"},
		{name: "a unit twice", as: "machine-0", call: removeUnits("kv/0", "kv/0"), code: codes.InvalidArgument, msg: "unit kv/0 is named twice"},
		{name: "no unit", as: "machine-0", call: removeUnits(), code: codes.InvalidArgument, msg: "RemoveUnits names no unit"},
		{name: "malformed name", as: "machine-0", call: removeUnits("kv/0", "kv/x"), code: codes.InvalidArgument, msg: "invalid unit name"},
	})
}

func getUnit(unit string) agentCall {
	return func(t *testing.T, m *agentModel, c pb.AgentServiceClient) error {
		ctx := m.ctx
		resp, err := c.GetUnit(ctx, &pb.GetUnitRequest{Unit: unit})
		if err == nil && resp.Unit.GetName() != unit {
			t.Errorf("GetUnit(%s) = %v, want the unit", unit, resp.Unit)
		}
		return err
	}
}

func TestAgentGetUnit(t *testing.T) {
	runAgentCases(t, []agentCase{
		{name: "machine: its principal", as: "machine-0", call: getUnit("kv/0")},
		{name: "machine: a subordinate on it", as: "machine-2", call: getUnit("logger/0")},
		{name: "unit: itself", as: "unit-kv/0", call: getUnit("kv/0")},
		{name: "unit: its subordinate", as: "unit-app/0", call: getUnit("logger/0")},
		{name: "unit: its principal", as: "unit-logger/0", call: getUnit("app/0")},
		{name: "machine: a unit on another machine", as: "machine-0", call: getUnit("kv/1"), code: codes.PermissionDenied, msg: "machine 0's agent may not read unit kv/1: it is not on machine 0"},
		{name: "unit: another service's unit", as: "unit-kv/0", call: getUnit("app/0"), code: codes.PermissionDenied, msg: "unit kv/0's agent may not read unit app/0"},
		{name: "unit: a unit of its own service", as: "unit-kv/0", call: getUnit("kv/1"), code: codes.PermissionDenied, msg: "unit kv/0's agent may not read unit kv/1"},
		{name: "unit: another principal", as: "unit-logger/0", call: getUnit("app/1"), code: codes.PermissionDenied, msg: "may not read unit app/1"},
		{name: "unit: another principal's subordinate", as: "unit-app/0", call: getUnit("logger/1"), code: codes.PermissionDenied, msg: "may not read unit logger/1"},
		{name: "no such unit", as: "unit-kv/0", call: getUnit("kv/9"), code: codes.NotFound, msg: "unit kv/9 not found"},
		{name: "machine: no such unit", as: "machine-0", call: getUnit("kv/9"), code: codes.NotFound, msg: "unit kv/9 not found"},
		{name: "malformed name", as: "unit-kv/0", call: getUnit("kv-0"), code: codes.InvalidArgument, msg: "invalid unit name"},
	})
}

func getService(name string) agentCall {
	return func(t *testing.T, m *agentModel, c pb.AgentServiceClient) error {
		ctx := m.ctx
		resp, err := c.GetService(ctx, &pb.GetServiceRequest{Service: name})
		if err != nil {
			return err
		}
		if resp.Service.GetName() != name || resp.Charm.GetName() != resp.Service.GetCharm().GetName() ||
			resp.Config.GetValues()["name"].GetStringValue() != name {
			t.Errorf("GetService(%s) = %v, want the service, its charm and its configuration", name, resp)
		}
		return nil
	}
}

func TestAgentGetService(t *testing.T) {
	ghost := func(m *agentModel) {
		// A service whose charm record is missing, with a unit on machine 0.
		_, err := m.st.AddService(m.ctx, state.AddServiceArgs{Name: "ghost", Charm: &pb.CharmRef{Name: "ghost", Revision: 7}})
		m.ok("AddService(ghost)", err)
		m.addUnits("ghost", 1, state.Placement{Machine: "0"})
	}
	runAgentCases(t, []agentCase{
		{name: "machine: its unit's", as: "machine-0", call: getService("kv")},
		{name: "machine: its subordinate's", as: "machine-2", call: getService("logger")},
		{name: "unit: its own", as: "unit-kv/0", call: getService("kv")},
		{name: "unit: its subordinate's", as: "unit-app/0", call: getService("logger")},
		{name: "unit: its principal's", as: "unit-logger/0", call: getService("app")},
		{name: "machine: another machine's", as: "machine-0", call: getService("app"), code: codes.PermissionDenied, msg: "machine 0's agent may not read service app: none of its units is on machine 0"},
		{name: "unit: a related service", as: "unit-kv/0", call: getService("app"), code: codes.PermissionDenied, msg: "unit kv/0's agent may not read service app"},
		{name: "subordinate: another service", as: "unit-logger/0", call: getService("kv"), code: codes.PermissionDenied, msg: "may not read service kv"},
		// Decided without reading the target: no existence is revealed.
		{name: "no such service", as: "unit-kv/0", call: getService("nosuch"), code: codes.PermissionDenied, msg: "may not read service nosuch"},
		{name: "charm missing", as: "machine-0", setup: ghost, call: getService("ghost"), code: codes.NotFound, msg: "charm ghost revision 7 not found"},
		{name: "malformed name", as: "unit-kv/0", call: getService("KV"), code: codes.InvalidArgument, msg: "invalid service name"},
	})
}

func TestAgentDownloadCharm(t *testing.T) {
	fetch := func(name string, rev int64) agentCall {
		return func(t *testing.T, m *agentModel, c pb.AgentServiceClient) error {
			ctx := m.ctx
			got, _, err := downloadCharm(ctx, c, name, rev)
			if err == nil && !bytes.Equal(got, m.charms[name]) {
				t.Errorf("DownloadCharm(%s, %d) = %q, want %q", name, rev, got, m.charms[name])
			}
			return err
		}
	}
	runAgentCases(t, []agentCase{
		{name: "machine: its unit's charm", as: "machine-0", call: fetch("kv", 1)},
		{name: "machine: its subordinate's charm", as: "machine-2", call: fetch("logger", 1)},
		{name: "unit: its own charm", as: "unit-kv/0", call: fetch("kv", 1)},
		{name: "unit: its subordinate's charm", as: "unit-app/0", call: fetch("logger", 1)},
		{name: "machine: another machine's charm", as: "machine-0", call: fetch("app", 1), code: codes.PermissionDenied, msg: "machine 0's agent may not download charm app revision 1: none of its units uses it"},
		{name: "unit: another service's charm", as: "unit-kv/0", call: fetch("app", 1), code: codes.PermissionDenied, msg: "unit kv/0's agent may not download charm app revision 1"},
		{name: "unit: a revision its service does not use", as: "unit-kv/0",
			setup: func(m *agentModel) {
				_, err := m.st.AddCharm(m.ctx, &pb.Charm{Name: "kv"}, []byte("kv revision 2"))
				m.ok("AddCharm", err)
			},
			call: fetch("kv", 2), code: codes.PermissionDenied, msg: "may not download charm kv revision 2"},
		{name: "charm missing", as: "machine-0",
			setup: func(m *agentModel) {
				_, err := m.st.AddService(m.ctx, state.AddServiceArgs{Name: "ghost", Charm: &pb.CharmRef{Name: "ghost", Revision: 7}})
				m.ok("AddService(ghost)", err)
				m.addUnits("ghost", 1, state.Placement{Machine: "0"})
			},
			call: fetch("ghost", 7), code: codes.NotFound, msg: "charm ghost revision 7 not found"},
		{name: "malformed name", as: "machine-0", call: fetch("Kv", 1), code: codes.InvalidArgument, msg: `invalid charm name "Kv"`},
		{name: "revision 0", as: "machine-0", call: fetch("kv", 0), code: codes.InvalidArgument, msg: "invalid charm revision 0"},
	})
}

func TestAgentDownloadCharmStreamsChunks(t *testing.T) {
	m := newAgentModel(t)
	big := bytes.Repeat([]byte("0123456789abcdef"), 160_000) // 2.4 MiB: three chunks
	m.addService("big", "kv", big)
	m.addUnits("big", 1, state.Placement{Machine: "0"})
	got, chunks, err := downloadCharm(m.ctx, m.as("machine-0"), "kv", 2)
	m.ok("DownloadCharm(kv, 2)", err)
	if !bytes.Equal(got, big) || chunks != 3 {
		t.Errorf("DownloadCharm(kv, 2) = %d bytes in %d chunks, want %d bytes in 3", len(got), chunks, len(big))
	}
}

// TestAgentCredentials: the credential decides who calls, and a new one
// revokes the old.
func TestAgentCredentials(t *testing.T) {
	m := newAgentModel(t)
	machine := m.as("machine-0")
	first, err := machine.IssueUnitCredentials(m.ctx, &pb.IssueUnitCredentialsRequest{Units: []string{"kv/0"}})
	m.ok("IssueUnitCredentials(kv/0)", err)
	old := pb.NewAgentServiceClient(m.dial(pki.Credential{Tag: first.Credentials[0].Tag, Secret: first.Credentials[0].Secret}))
	_, err = old.GetUnit(m.ctx, &pb.GetUnitRequest{Unit: "kv/0"})
	m.ok("GetUnit with the first credential", err)

	second, err := machine.IssueUnitCredentials(m.ctx, &pb.IssueUnitCredentialsRequest{Units: []string{"kv/0"}})
	m.ok("IssueUnitCredentials(kv/0) again", err)
	// The controller's mirror of the credentials drops the old one as soon
	// as its watch brings the new.
	err = eventually(t, func() error { _, err := old.GetUnit(m.ctx, &pb.GetUnitRequest{Unit: "kv/0"}); return err })
	wantCode(t, "GetUnit with the revoked credential", err, codes.Unauthenticated, "credential of unit-kv/0 is not valid")
	current := pb.NewAgentServiceClient(m.dial(pki.Credential{Tag: second.Credentials[0].Tag, Secret: second.Credentials[0].Secret}))
	_, err = current.GetUnit(m.ctx, &pb.GetUnitRequest{Unit: "kv/0"})
	m.ok("GetUnit with the new credential", err)

	forged := pb.NewAgentServiceClient(m.dial(pkiCredential(t, "unit-kv/0")))
	_, err = forged.GetUnit(m.ctx, &pb.GetUnitRequest{Unit: "kv/0"})
	wantCode(t, "GetUnit with a forged credential (right tag, wrong secret)", err, codes.Unauthenticated, "not valid")

	asAdmin := pb.NewAgentServiceClient(m.conn("admin"))
	_, err = asAdmin.GetUnit(m.ctx, &pb.GetUnitRequest{Unit: "kv/0"})
	wantCode(t, "GetUnit as the operator", err, codes.PermissionDenied, "user admin may not call GetUnit")
	_, _, err = downloadCharm(m.ctx, asAdmin, "kv", 1)
	wantCode(t, "DownloadCharm as the operator", err, codes.PermissionDenied, "user admin may not call DownloadCharm")

	// A removed unit's credential goes with it.
	m.kill("kv/0")
	_, err = machine.RemoveUnit(m.ctx, &pb.RemoveUnitRequest{Unit: "kv/0"})
	m.ok("RemoveUnit(kv/0)", err)
	// Until the mirror hears of the removal, the credential still
	// authenticates, and the unit is not found.
	err = eventually(t, func() error {
		_, err := current.GetUnit(m.ctx, &pb.GetUnitRequest{Unit: "kv/0"})
		if status.Code(err) == codes.NotFound {
			return nil
		}
		return err
	})
	wantCode(t, "GetUnit with a removed unit's credential", err, codes.Unauthenticated, "not valid")
}

// TestAgentCredentialsAreConfined: a unit agent's
// credential cannot read another service's units, write another unit's
// settings, or destroy anything; a machine agent's cannot touch another
// machine. None of the refused calls changes the model.
func TestAgentCredentialsAreConfined(t *testing.T) {
	m := newAgentModel(t)
	kv0, machine0 := m.as("unit-kv/0"), m.as("machine-0")
	before := m.snapshot()
	denied := []struct {
		what string
		err  error
	}{}
	try := func(what string, err error) {
		denied = append(denied, struct {
			what string
			err  error
		}{what, err})
	}
	ctx := m.ctx

	_, err := kv0.GetUnit(ctx, &pb.GetUnitRequest{Unit: "app/0"})
	try("unit kv/0 reads unit app/0", err)
	_, err = firstWatchResponse(ctx, kv0, &pb.WatchRequest{Subject: &pb.WatchSubject{Subject: &pb.WatchSubject_Unit{Unit: "app/0"}}})
	try("unit kv/0 watches unit app/0", err)
	_, err = kv0.UpdateSettings(ctx, &pb.UpdateSettingsRequest{Unit: "app/0", Updates: []*pb.SettingsUpdate{{Relation: m.global, Set: map[string]string{"evil": "1"}}}})
	try("unit kv/0 writes unit app/0's settings", err)
	_, err = kv0.EnterScope(ctx, &pb.EnterScopeRequest{Relation: m.global, Unit: "kv/1"})
	try("unit kv/0 enters kv/1 into a relation", err)
	_, err = kv0.LeaveScope(ctx, &pb.LeaveScopeRequest{Relation: m.global, Unit: "app/0"})
	try("unit kv/0 takes app/0 out of a relation", err)
	for _, u := range []string{"app/0", "kv/1", "logger/0"} {
		_, err = kv0.SetUnitDying(ctx, &pb.SetUnitDyingRequest{Unit: u})
		try("unit kv/0 destroys unit "+u, err)
		_, err = kv0.EnsureUnitDead(ctx, &pb.EnsureUnitDeadRequest{Unit: u})
		try("unit kv/0 sets unit "+u+" dead", err)
		_, err = kv0.RemoveUnit(ctx, &pb.RemoveUnitRequest{Unit: u})
		try("unit kv/0 removes unit "+u, err)
	}
	_, err = kv0.EnsureMachineDead(ctx, &pb.EnsureMachineDeadRequest{Machine: "0"})
	try("unit kv/0 sets its machine dead", err)

	_, err = machine0.GetMachine(ctx, &pb.GetMachineRequest{Machine: "1"})
	try("machine 0 reads machine 1", err)
	_, err = machine0.EnsureMachineDead(ctx, &pb.EnsureMachineDeadRequest{Machine: "1"})
	try("machine 0 sets machine 1 dead", err)
	_, err = machine0.SetMachineStatus(ctx, &pb.SetMachineStatusRequest{Machine: "1", Status: &pb.Status{Status: "down"}})
	try("machine 0 sets machine 1's status", err)
	_, err = machine0.GetUnit(ctx, &pb.GetUnitRequest{Unit: "kv/1"})
	try("machine 0 reads machine 1's unit", err)
	_, err = machine0.IssueUnitCredentials(ctx, &pb.IssueUnitCredentialsRequest{Units: []string{"kv/1"}})
	try("machine 0 issues a credential for machine 1's unit", err)
	_, err = machine0.RemoveUnit(ctx, &pb.RemoveUnitRequest{Unit: "kv/1"})
	try("machine 0 removes machine 1's unit", err)
	_, err = machine0.SetUnitStatus(ctx, &pb.SetUnitStatusRequest{Unit: "kv/1", Kind: pb.UnitStatusKind_UNIT_STATUS_KIND_AGENT, Status: &pb.Status{Status: "error"}})
	try("machine 0 sets the status of machine 1's unit", err)
	_, err = machine0.SetUnitDying(ctx, &pb.SetUnitDyingRequest{Unit: "kv/0"})
	try("machine 0 destroys its own unit", err)
	_, err = firstWatchResponse(ctx, machine0, &pb.WatchRequest{Subject: &pb.WatchSubject{Subject: &pb.WatchSubject_MachineUnits{MachineUnits: "1"}}})
	try("machine 0 watches machine 1's units", err)
	_, _, err = downloadCharm(ctx, machine0, "app", 1)
	try("machine 0 downloads machine 2's charm", err)

	for _, d := range denied {
		wantCode(t, d.what, d.err, codes.PermissionDenied, "may not")
	}
	m.unchanged("the refused calls", before)
}
