package main

import (
	"strings"
	"testing"
	"time"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

func TestSettle(t *testing.T) {
	const barrier = 100
	unit := func(name, life, agent, state string) *pb.UnitStatus {
		return &pb.UnitStatus{Name: name, Life: life, Agent: agent, State: state, SyncedRevision: barrier}
	}
	synced := func(u *pb.UnitStatus, rev int64) *pb.UnitStatus { u.SyncedRevision = rev; return u }
	failed := func(u *pb.UnitStatus, msg string) *pb.UnitStatus { u.AgentMessage = msg; return u }
	svc := func(name, life string, units ...*pb.UnitStatus) *pb.ServiceStatus {
		return &pb.ServiceStatus{Name: name, Life: life, Units: units}
	}
	model := func(svcs ...*pb.ServiceStatus) *pb.ModelStatus { return &pb.ModelStatus{Services: svcs} }
	retrying := `hook failed: "config-changed" (retry 2 of 5 in 20s)`
	tests := []struct {
		name      string
		st        *pb.ModelStatus
		sel       []string
		settled   bool
		unsettled string
		errors    string
		blocking  string
		missing   string
		units     int
	}{
		{name: "empty model", st: &pb.ModelStatus{}, settled: true},
		{
			name: "a rollout moving units",
			st: model(&pb.ServiceStatus{Name: "kv", Life: "alive", Units: []*pb.UnitStatus{unit("kv/0", "alive", "idle", "running")},
				Rollout: &pb.ServiceRollout{State: "rolling", Target: 4, Updated: 0, Units: 1}}),
			unsettled: "service kv (rolling to revision 4: 0/1 updated)", units: 1,
		},
		{
			name: "a canary on its way",
			st: model(&pb.ServiceStatus{Name: "kv", Life: "alive", Units: []*pb.UnitStatus{unit("kv/0", "alive", "idle", "running")},
				Rollout: &pb.ServiceRollout{State: "canary", Target: 4, Updated: 0, Units: 1}}),
			unsettled: "service kv (canary to revision 4: 0/1 updated)", units: 1,
		},
		{
			name: "a canary awaiting promote, a paused rollout",
			st: model(&pb.ServiceStatus{Name: "kv", Life: "alive", Units: []*pb.UnitStatus{unit("kv/0", "alive", "idle", "running")},
				Rollout: &pb.ServiceRollout{State: "canary", Target: 4, Updated: 1, Units: 2, AwaitingPromote: true}},
				&pb.ServiceStatus{Name: "db", Life: "alive", Rollout: &pb.ServiceRollout{State: "paused", Target: 2}}),
			settled: true, units: 1,
		},
		{
			name:    "idle running units synced to the barrier",
			st:      model(svc("kv", "alive", unit("kv/0", "alive", "idle", "running"), synced(unit("kv/1", "alive", "idle", "running"), barrier+7))),
			settled: true, units: 2,
		},
		{
			// The unit has not reported seeing the change before the
			// barrier (a configuration set just before ctl wait).
			name:      "an idle unit not yet synced",
			st:        model(svc("kv", "alive", synced(unit("kv/0", "alive", "idle", "running"), barrier-1))),
			unsettled: "kv/0 (idle, catching up)", units: 1,
		},
		{
			name: "allocating and executing units",
			st: model(svc("kv", "alive", synced(unit("kv/0", "alive", "allocating", "new"), 0),
				failed(unit("kv/1", "alive", "executing", "ready"), "running config-changed hook"), unit("kv/2", "alive", "executing", "ready"))),
			unsettled: "kv/0 (allocating, new), kv/1 (running config-changed hook), kv/2 (executing, ready)", units: 3,
		},
		{
			// Its machine gets it a new credential, or cannot: either way
			// the operator learns why it does not settle.
			name:      "a unit whose agent the controller refuses",
			st:        model(svc("kv", "alive", failed(synced(unit("kv/0", "alive", "unauthenticated", "running"), barrier), "the controller refuses the unit's credential"))),
			unsettled: "kv/0 (agent unauthenticated: the controller refuses the unit's credential)", units: 1,
		},
		{
			name:    "a unit in an error state is settled, and reported",
			st:      model(svc("kv", "alive", failed(unit("kv/0", "alive", "error", "install-error"), `hook failed: "install"`))),
			settled: true, errors: `kv/0 (hook failed: "install")`, units: 1,
		},
		{
			// It shows in error at once, but its hook runs again.
			name:   "a unit whose failed hook will run again is waited for",
			st:     model(svc("kv", "alive", unit("kv/1", "alive", "idle", "running"), failed(unit("kv/0", "alive", "error", "running"), retrying))),
			errors: "kv/0 (" + retrying + ")", units: 2,
		},
		{
			// Its report is from before the barrier: ctl resolved may
			// have answered it since.
			name:   "an error state reported before the barrier is waited for",
			st:     model(svc("kv", "alive", synced(failed(unit("kv/0", "alive", "error", "hook-error"), `hook failed: "start"`), barrier-1))),
			errors: `kv/0 (hook failed: "start")`, units: 1,
		},
		{
			name:      "an idle unit that is dying",
			st:        model(svc("kv", "alive", unit("kv/0", "dying", "idle", "running"))),
			unsettled: "kv/0 (dying)", units: 1,
		},
		{
			name: "a unit in error holds up its own death, its service's and a relation's",
			st: &pb.ModelStatus{
				Services:  []*pb.ServiceStatus{svc("app", "dying", failed(unit("app/0", "dying", "error", "running"), `hook failed: "stop" (retry 2 of 5 in 5s)`))},
				Relations: []*pb.RelationStatus{{Id: 4, Key: "app:db kv:server", Life: "dying", Units: []string{"app/0"}}},
			},
			unsettled: `service app (dying), app/0 (dying), relation 4 "app:db kv:server" (dying)`,
			errors:    `app/0 (hook failed: "stop" (retry 2 of 5 in 5s))`,
			blocking:  `app/0 (hook failed: "stop" (retry 2 of 5 in 5s)) holds up unit app/0 (dying), service app (dying), relation 4 "app:db kv:server" (dying)`,
			units:     1,
		},
		{
			name: "an error reported before the barrier holds up nothing yet",
			st: model(svc("app", "alive",
				synced(failed(unit("app/0", "dying", "error", "stop-error"), `hook failed: "stop"`), barrier-1))),
			unsettled: "app/0 (dying)", errors: `app/0 (hook failed: "stop")`, units: 1,
		},
		{
			name: "dying machine, dead machine, dying service and relation",
			st: &pb.ModelStatus{
				Machines:  []*pb.MachineStatus{{Id: "3", Life: "dead"}, {Id: "1", Life: "dying"}, {Id: "0", Life: "alive"}},
				Services:  []*pb.ServiceStatus{svc("app", "dying")},
				Relations: []*pb.RelationStatus{{Id: 4, Key: "app:db kv:server", Life: "dying"}, {Id: 5, Key: "kv:cluster", Life: "alive"}},
			},
			unsettled: `machine 1 (dying), machine 3 (dead), service app (dying), relation 4 "app:db kv:server" (dying)`,
		},
		{
			name: "a service named: only its units, its relations and their machines",
			st: &pb.ModelStatus{
				Machines: []*pb.MachineStatus{{Id: "0", Life: "dying"}, {Id: "1", Life: "dying"}},
				Services: []*pb.ServiceStatus{
					svc("kv", "alive", &pb.UnitStatus{Name: "kv/0", Life: "alive", Agent: "idle", State: "running", SyncedRevision: barrier, Machine: "0"}),
					svc("app", "alive", failed(unit("app/0", "alive", "error", "running"), retrying)),
					svc("db", "dying"),
				},
				Relations: []*pb.RelationStatus{{Id: 4, Key: "app:db db:server", Life: "dying"}, {Id: 5, Key: "kv:cluster", Life: "dying"}},
			},
			sel:       []string{"kv"},
			unsettled: `machine 0 (dying), relation 5 "kv:cluster" (dying)`, units: 1,
		},
		{
			name: "a unit named, and its subordinate",
			st: model(
				svc("app", "alive", unit("app/0", "alive", "idle", "running"), unit("app/1", "alive", "executing", "running")),
				svc("logger", "alive", &pb.UnitStatus{Name: "logger/0", Principal: "app/0", Life: "alive", Agent: "executing", State: "ready"}),
			),
			sel:       []string{"app/0"},
			unsettled: "logger/0 (executing, ready)", units: 2,
		},
		{
			name:    "names the model does not hold",
			st:      model(svc("kv", "alive", unit("kv/0", "alive", "idle", "running"))),
			sel:     []string{"kv", "gone", "kv/9"},
			settled: true, missing: "gone, kv/9", units: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sel, err := newSelection(tt.sel)
			if err != nil {
				t.Fatal(err)
			}
			s := settle(tt.st, barrier, sel)
			if s.settled() != tt.settled {
				t.Errorf("settle().settled() = %v, want %v (unsettled: %v, errors %v)", s.settled(), tt.settled, s.unsettled, s.errors)
			}
			for _, c := range []struct{ what, got, want string }{
				{"unsettled", strings.Join(s.unsettled, ", "), tt.unsettled},
				{"errors", strings.Join(s.errors, ", "), tt.errors},
				{"blocking", strings.Join(s.blocking, "; "), tt.blocking},
				{"missing", strings.Join(s.missing, ", "), tt.missing},
			} {
				if c.got != c.want {
					t.Errorf("settle().%s = %q, want %q", c.what, c.got, c.want)
				}
			}
			if s.units != tt.units {
				t.Errorf("settle().units = %d, want %d", s.units, tt.units)
			}
		})
	}
}

func TestWaitingLine(t *testing.T) {
	tests := []struct {
		s    settlement
		want string
	}{
		{settlement{unsettled: []string{"kv/0 (running config-changed hook)"}}, "waiting (12s): 1 not settled: kv/0 (running config-changed hook)"},
		{
			settlement{unsettled: []string{"kv/0 (idle, catching up)"}, errors: []string{`app/1 (hook failed: "install" (retry 2 of 5 in 20s))`}},
			`waiting (12s): 1 not settled: kv/0 (idle, catching up); in error: app/1 (hook failed: "install" (retry 2 of 5 in 20s))`,
		},
		{settlement{errors: []string{`app/1 (hook failed: "install")`}, retrying: 1}, `waiting (12s): in error: app/1 (hook failed: "install")`},
	}
	for _, tt := range tests {
		if got := waitingLine(tt.s, 12*time.Second); got != tt.want {
			t.Errorf("waitingLine(%+v) = %q, want %q", tt.s, got, tt.want)
		}
	}
}

// Away from a terminal a progress line goes at most every interval, but
// one shown now goes at once.
func TestProgressNow(t *testing.T) {
	var out strings.Builder
	p := newProgress(&out, false)
	p.interval = time.Hour
	p.update("one")
	p.update("two")
	p.now("three")
	p.update("four")
	if got, want := out.String(), "one\nthree\n"; got != want {
		t.Errorf("progress printed %q, want %q", got, want)
	}
}

func TestNewSelection(t *testing.T) {
	sel, err := newSelection([]string{"kv", "app/3"})
	if err != nil || !sel.services["kv"] || !sel.units["app/3"] || sel.all() {
		t.Errorf("newSelection(kv app/3) = %+v, %v; want service kv and unit app/3", sel, err)
	}
	for _, bad := range []string{"Kv", "kv/x", "kv/0/1", ""} {
		if _, err := newSelection([]string{bad}); err == nil {
			t.Errorf("newSelection(%q) accepted, want an error", bad)
		}
	}
}

func TestListSome(t *testing.T) {
	if got, want := listSome([]string{"a", "b", "c"}, 2), "a, b and 1 more"; got != want {
		t.Errorf("listSome = %q, want %q", got, want)
	}
	if got, want := listSome([]string{"a", "b"}, 2), "a, b"; got != want {
		t.Errorf("listSome = %q, want %q", got, want)
	}
}

func TestCommandsHaveHelp(t *testing.T) {
	root := rootCommand(&env{})
	for _, cmd := range root.Commands() {
		if cmd.Name() == "help" {
			continue
		}
		if cmd.Short == "" || !strings.Contains(cmd.Long, "Example:") {
			t.Errorf("ctl %s: want a Short and a Long with an example", cmd.Name())
		}
		if cmd.RunE == nil || cmd.Args == nil {
			t.Errorf("ctl %s: want RunE and an argument check", cmd.Name())
		}
	}
}

// TestSettlementBusy: a round of ctl wait is busy when a unit is on its
// way, not when units only have the barrier to report.
func TestSettlementBusy(t *testing.T) {
	const barrier = 100
	kv := func(units ...*pb.UnitStatus) *pb.ModelStatus {
		return &pb.ModelStatus{Services: []*pb.ServiceStatus{{Name: "kv", Life: "alive", Units: units}}}
	}
	idle := func(name string, synced int64) *pb.UnitStatus {
		return &pb.UnitStatus{Name: name, Life: "alive", Agent: "idle", State: "running", SyncedRevision: synced}
	}
	executing := &pb.UnitStatus{Name: "kv/1", Life: "alive", Agent: "executing", State: "running", AgentMessage: "running db-relation-changed hook", SyncedRevision: barrier - 1}
	for _, tt := range []struct {
		name string
		st   *pb.ModelStatus
		want bool
	}{
		{"idle units catching up", kv(idle("kv/0", barrier-1), idle("kv/1", barrier-1)), false},
		{"settled", kv(idle("kv/0", barrier)), false},
		{"a unit running a hook", kv(idle("kv/0", barrier-1), executing), true},
	} {
		if got := settle(tt.st, barrier, selection{}).busy(); got != tt.want {
			t.Errorf("%s: busy() = %v, want %v", tt.name, got, tt.want)
		}
	}
}
