package controller_test

import (
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lifelinehq/lifeline/controller"
	"github.com/lifelinehq/lifeline/internal/pki"
	"github.com/lifelinehq/lifeline/internal/testing/controllertest"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// settingsCall rewrites one key of unit's settings in rel with n bytes.
func settingsCall(m *agentModel, unit string, rel int64, n int) error {
	_, err := m.as("unit-"+unit).UpdateSettings(m.ctx, &pb.UpdateSettingsRequest{Unit: unit, Updates: []*pb.SettingsUpdate{{
		Relation: rel, Set: map[string]string{"blob": strings.Repeat(string(rune('a'+len(unit)%26)), n) + unit},
	}}})
	return err
}

// untilRefused makes call until it fails, at most max times, and returns
// how many succeeded and the error.
func untilRefused(max int, call func(i int) error) (int, error) {
	for i := range max {
		if err := call(i); err != nil {
			return i, err
		}
	}
	return max, nil
}

// TestAgentWriteBudgets has one unit's agent write as fast as it can: once
// over its credential's budget of writes, or of bytes, its calls are
// refused as ResourceExhausted with a sentence saying which, while
// another unit's agent and the operator still write. The budgets here
// refill slowly enough (a write in 100 s, a byte budget of 100 KiB a
// minute) that the counts do not depend on how fast the calls go.
func TestAgentWriteBudgets(t *testing.T) {
	tests := []struct {
		name    string
		budgets controller.Budgets
		size    int // bytes of each write
		wantOK  int // writes that succeed before the refusal
		want    string
	}{
		{"writes", controller.Budgets{Writes: 0.01, Burst: 3, Bytes: -1}, 10, 3, "unit app/0's agent is over its budget of 0.01 writes a second (3 at once)"},
		// 100 KiB: two writes of 40 KiB fit, the third overdraws and
		// the fourth waits for the debt to be paid.
		{"bytes", controller.Budgets{Writes: -1, Bytes: 100 << 10}, 40 << 10, 3, "unit app/0's agent is over its budget of 100.0 KiB written a minute: try again in"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newAgentModelWith(t, controllertest.Options{Anonymous: true, Budgets: tt.budgets})
			ok, err := untilRefused(20, func(i int) error { return settingsCall(m, "app/0", m.global, tt.size+i) })
			if s, _ := status.FromError(err); ok != tt.wantOK || s.Code() != codes.ResourceExhausted || !strings.Contains(s.Message(), tt.want) {
				t.Fatalf("after %d writes: %v; want ResourceExhausted saying %q after %d", ok, err, tt.want, tt.wantOK)
			}
			// Refused again: the budget does not come back at once.
			if err := settingsCall(m, "app/0", m.global, 1); status.Code(err) != codes.ResourceExhausted {
				t.Errorf("a write right after the refusal = %v, want ResourceExhausted", err)
			}
			// Reads are not budgeted.
			if _, err := m.as("unit-app/0").GetUnit(m.ctx, &pb.GetUnitRequest{Unit: "app/0"}); err != nil {
				t.Errorf("GetUnit of app/0 over its budget = %v, want it answered", err)
			}
			// Another agent's budget is its own.
			if err := settingsCall(m, "kv/0", m.global, 10); err != nil {
				t.Errorf("kv/0's write while app/0 is over its budget = %v, want it done", err)
			}
			// The operator has no budget.
			if _, err := m.admin().SetConfig(m.ctx, &pb.SetConfigRequest{Service: "kv", Set: map[string]string{"name": "x"}}); err != nil && status.Code(err) == codes.ResourceExhausted {
				t.Errorf("the operator's SetConfig = %v, want no budget", err)
			}
		})
	}
}

// TestStorageTight tells the controller etcd's database is near its
// quota: calls that would add to the model are refused, with the alarm's
// sentence, while reads and the calls that shrink it go through, and the
// status carries the alarm; once the space is back, everything goes.
func TestStorageTight(t *testing.T) {
	var tight atomic.Bool
	tight.Store(true)
	storage := func() controller.Storage {
		return controller.Storage{Size: 95 << 20, InUse: 90 << 20, Quota: 100 << 20, Tight: tight.Load()}
	}
	m := newAgentModelWith(t, controllertest.Options{Anonymous: true, Storage: storage})
	op := m.admin()
	const alarm = "etcd's database is nearly full (95.0 MiB of its 100.0 MiB quota, 90.0 MiB in use)"

	refused := []struct {
		name string
		call func() error
	}{
		{"an agent's settings", func() error { return settingsCall(m, "app/0", m.global, 10) }},
		{"an agent's status", func() error {
			_, err := m.as("unit-app/0").SetUnitStatus(m.ctx, &pb.SetUnitStatusRequest{Unit: "app/0", Kind: pb.UnitStatusKind_UNIT_STATUS_KIND_WORKLOAD, Status: &pb.Status{Status: "active"}})
			return err
		}},
		{"the operator's AddUnits", func() error {
			_, err := op.AddUnits(m.ctx, &pb.AddUnitsRequest{Service: "kv", NumUnits: 1})
			return err
		}},
	}
	for _, c := range refused {
		if s, _ := status.FromError(c.call()); s.Code() != codes.ResourceExhausted || !strings.Contains(s.Message(), alarm) {
			t.Errorf("%s while the storage is tight = %v, want ResourceExhausted saying %q", c.name, s.Err(), alarm)
		}
	}
	taken := []struct {
		name string
		call func() error
	}{
		{"an agent's read", func() error {
			_, err := m.as("unit-app/0").GetUnit(m.ctx, &pb.GetUnitRequest{Unit: "app/0"})
			return err
		}},
		{"an agent leaving a scope", func() error {
			_, err := m.as("unit-app/0").LeaveScope(m.ctx, &pb.LeaveScopeRequest{Unit: "app/0", Relation: m.global})
			return err
		}},
		{"the operator destroying a unit", func() error {
			_, err := op.DestroyUnit(m.ctx, &pb.DestroyUnitRequest{Unit: "kv/1"})
			return err
		}},
	}
	for _, c := range taken {
		if err := c.call(); err != nil {
			t.Errorf("%s while the storage is tight = %v, want it done", c.name, err)
		}
	}
	resp, err := op.Status(m.ctx, &pb.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if a := resp.GetStatus().GetAlarms(); len(a) != 1 || !strings.Contains(a[0], alarm) {
		t.Errorf("status alarms = %q, want the storage's", a)
	}

	tight.Store(false)
	if _, err := op.AddUnits(m.ctx, &pb.AddUnitsRequest{Service: "kv", NumUnits: 1}); err != nil {
		t.Errorf("AddUnits once the space is back = %v, want it done", err)
	}
	resp, err = op.Status(m.ctx, &pb.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if a := resp.GetStatus().GetAlarms(); len(a) != 0 {
		t.Errorf("status alarms once the space is back = %q, want none", a)
	}
}

// TestJoinsShareABudget: calls made without a credential (a host joining
// with a token) are budgeted together, whoever makes them, since anyone
// who reaches the port can: past the budget they are refused before the
// token is looked at, while the agents' calls go on.
func TestJoinsShareABudget(t *testing.T) {
	e := newEnvWith(t, controllertest.Options{Budgets: controller.Budgets{Writes: 0.01, Burst: 3, Bytes: -1}})
	added, err := e.admin().AddMachines(e.ctx, &pb.AddMachinesRequest{NumMachines: 1})
	must(t, "AddMachines", err)
	id := added.Machines[0].Id
	joins := []pb.MachineJoinServiceClient{
		pb.NewMachineJoinServiceClient(e.dial(pki.Credential{})),
		pb.NewMachineJoinServiceClient(e.dial(pki.Credential{})),
	}
	_, hash, err := pki.NewCredential("machine-" + id)
	must(t, "NewCredential", err)
	secret, err := pki.NewSecret()
	must(t, "NewSecret", err)
	ok, err := untilRefused(20, func(i int) error {
		_, err := joins[i%2].JoinMachine(e.ctx, &pb.JoinMachineRequest{Machine: id, TokenSecret: secret, CredentialHash: hash})
		if status.Code(err) == codes.Unauthenticated {
			return nil // looked at, and refused for its token
		}
		return err
	})
	wantCode(t, "JoinMachine past the budget", err, codes.ResourceExhausted, "the calls made without a credential (joins) are over their budget of 0.01 writes a second (3 at once)")
	if ok != 3 {
		t.Errorf("%d joins were looked at before the refusal, want 3", ok)
	}
	if _, err := e.agent("machine-"+id).SetMachineStatus(e.ctx, &pb.SetMachineStatusRequest{Machine: id, Status: &pb.Status{Status: "started"}}); err != nil {
		t.Errorf("an agent's call while the joins are over their budget = %v, want it answered", err)
	}
}
