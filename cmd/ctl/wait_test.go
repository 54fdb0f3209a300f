package main

import (
	"strings"
	"testing"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

func TestSettle(t *testing.T) {
	unit := func(name, life, agent, state string) *pb.UnitStatus {
		return &pb.UnitStatus{Name: name, Life: life, Agent: agent, State: state}
	}
	svc := func(name, life string, units ...*pb.UnitStatus) *pb.ServiceStatus {
		return &pb.ServiceStatus{Name: name, Life: life, Units: units}
	}
	tests := []struct {
		name          string
		st            *pb.ModelStatus
		settled       bool
		unsettled     string
		errors        string
		wantUnitCount int
	}{
		{name: "empty model", st: &pb.ModelStatus{}, settled: true},
		{
			name:    "idle running units",
			st:      &pb.ModelStatus{Services: []*pb.ServiceStatus{svc("kv", "alive", unit("kv/0", "alive", "idle", "running"), unit("kv/1", "alive", "idle", "running"))}},
			settled: true, wantUnitCount: 2,
		},
		{
			name:      "allocating and executing units",
			st:        &pb.ModelStatus{Services: []*pb.ServiceStatus{svc("kv", "alive", unit("kv/0", "alive", "allocating", "new"), unit("kv/1", "alive", "executing", "ready"))}},
			unsettled: "kv/0 (allocating, new), kv/1 (executing, ready)", wantUnitCount: 2,
		},
		{
			name:    "a unit in error is settled, and reported",
			st:      &pb.ModelStatus{Services: []*pb.ServiceStatus{svc("kv", "alive", &pb.UnitStatus{Name: "kv/0", Life: "alive", Agent: "error", State: "install-error", Message: `hook failed: "install"`})}},
			settled: true, errors: `kv/0 (hook failed: "install")`, wantUnitCount: 1,
		},
		{
			name:      "an idle unit that is dying",
			st:        &pb.ModelStatus{Services: []*pb.ServiceStatus{svc("kv", "alive", unit("kv/0", "dying", "idle", "running"))}},
			unsettled: "kv/0 (dying)", wantUnitCount: 1,
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
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := settle(tt.st)
			if s.settled() != tt.settled {
				t.Errorf("settle().settled() = %v, want %v (unsettled: %v)", s.settled(), tt.settled, s.unsettled)
			}
			if got := strings.Join(s.unsettled, ", "); got != tt.unsettled {
				t.Errorf("unsettled = %q, want %q", got, tt.unsettled)
			}
			if got := strings.Join(s.errors, ", "); got != tt.errors {
				t.Errorf("errors = %q, want %q", got, tt.errors)
			}
			if s.units != tt.wantUnitCount {
				t.Errorf("units = %d, want %d", s.units, tt.wantUnitCount)
			}
		})
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
