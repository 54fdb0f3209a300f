package state_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/internal/names"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

func TestRuleM1_PrincipalsOnlyOnAliveMachines(t *testing.T) {
	tests := []struct {
		name    string
		machine string // "dying", "dead", "missing"
		assign  bool   // AssignUnit rather than AddUnits
		want    error
		msg     string
	}{
		{"add units to a dying machine", "dying", false, state.ErrRefused, "machine 0 is dying: units can be assigned only to an alive machine"},
		{"assign to a dying machine", "dying", true, state.ErrRefused, "machine 0 is dying"},
		{"assign to a dead machine", "dead", true, state.ErrRefused, "machine 0 is dead"},
		{"add units to a missing machine", "missing", false, state.ErrNotFound, "machine 7 not found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, ctx := newState(t)
			addService(t, ctx, st, "kv", kvEndpoints)
			id := "7"
			if tt.machine != "missing" {
				ms, err := st.AddMachines(ctx, 1)
				must(t, "AddMachines", err)
				id = ms[0].Id
				must(t, "DestroyMachine", st.DestroyMachine(ctx, id, state.DestroyOptions{}))
				if tt.machine == "dead" {
					must(t, "EnsureMachineDead", st.EnsureMachineDead(ctx, id))
				}
			}
			var err error
			if tt.assign {
				us := addUnits(t, ctx, st, "kv", 1, state.Placement{Unassigned: true})
				err = st.AssignUnit(ctx, us[0].Name, id)
			} else {
				_, err = st.AddUnits(ctx, "kv", 2, state.Placement{Machine: id})
			}
			rule := "M1"
			if tt.want != state.ErrRefused {
				rule = ""
			}
			wantErr(t, "assign", err, tt.want, rule, tt.msg)
			if tt.machine != "missing" {
				if units, _ := st.MachinePrincipals(ctx, id); len(units) != 0 {
					t.Errorf("MachinePrincipals(%s) = %v after a refusal, want none", id, units)
				}
			}
		})
	}
	t.Run("an alive machine takes units", func(t *testing.T) {
		st, ctx := newState(t)
		addService(t, ctx, st, "kv", kvEndpoints)
		ms, err := st.AddMachines(ctx, 1)
		must(t, "AddMachines", err)
		addUnits(t, ctx, st, "kv", 2, state.Placement{Machine: ms[0].Id})
		us := addUnits(t, ctx, st, "kv", 1, state.Placement{Unassigned: true})
		must(t, "AssignUnit", st.AssignUnit(ctx, us[0].Name, ms[0].Id))
		units, err := st.MachinePrincipals(ctx, ms[0].Id)
		must(t, "MachineUnits", err)
		if len(units) != 3 {
			t.Errorf("MachineUnits = %v, want 3 units", units)
		}
	})
}

func TestRuleM2_DestroyMachineRefusedWhileAUnitIsAlive(t *testing.T) {
	tests := []struct {
		name      string
		units     int
		destroyed int // how many units are destroyed first
		want      error
		msg       string
	}{
		{"one alive unit", 1, 0, state.ErrRefused, "machine 0 has unit kv/0 assigned"},
		{"two alive units", 2, 0, state.ErrRefused, "machine 0 has units kv/0 and kv/1 assigned"},
		{"one of two destroyed", 2, 1, state.ErrRefused, "machine 0 has unit kv/1 assigned"},
		{"all units dying", 2, 2, nil, ""},
		{"no units", 0, 0, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, ctx := newState(t)
			addService(t, ctx, st, "kv", kvEndpoints)
			ms, err := st.AddMachines(ctx, 1)
			must(t, "AddMachines", err)
			id := ms[0].Id
			if tt.units > 0 {
				addUnits(t, ctx, st, "kv", tt.units, state.Placement{Machine: id})
			}
			for i := 0; i < tt.destroyed; i++ {
				must(t, "DestroyUnit", st.DestroyUnit(ctx, "kv/"+string(rune('0'+i)), state.DestroyOptions{}))
			}
			err = st.DestroyMachine(ctx, id, state.DestroyOptions{})
			if tt.want == nil {
				must(t, "DestroyMachine", err)
				if got := life(t, ctx, st, "machine", id); got != "dying" {
					t.Errorf("machine %s is %s, want dying", id, got)
				}
				return
			}
			wantErr(t, "DestroyMachine", err, tt.want, "M2", tt.msg)
			if got := life(t, ctx, st, "machine", id); got != "alive" {
				t.Errorf("machine %s is %s after a refusal, want alive", id, got)
			}
		})
	}
}

func TestRuleM3_DyingMachineDeadOnlyWhenEmpty(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, ctx context.Context, st *state.State, id string)
		want  error
		msg   string
		life  string
	}{
		{"alive machine", func(*testing.T, context.Context, *state.State, string) {}, state.ErrRefused, "machine 0 is alive", "alive"},
		{"dying with a dying unit", func(t *testing.T, ctx context.Context, st *state.State, id string) {
			addUnits(t, ctx, st, "kv", 1, state.Placement{Machine: id})
			must(t, "DestroyUnit", st.DestroyUnit(ctx, "kv/0", state.DestroyOptions{}))
			must(t, "DestroyMachine", st.DestroyMachine(ctx, id, state.DestroyOptions{}))
		}, state.ErrRefused, "machine 0 still has unit kv/0 assigned", "dying"},
		{"dying with a dead unit", func(t *testing.T, ctx context.Context, st *state.State, id string) {
			addUnits(t, ctx, st, "kv", 1, state.Placement{Machine: id})
			must(t, "DestroyUnit", st.DestroyUnit(ctx, "kv/0", state.DestroyOptions{}))
			must(t, "EnsureUnitDead", st.EnsureUnitDead(ctx, "kv/0"))
			must(t, "DestroyMachine", st.DestroyMachine(ctx, id, state.DestroyOptions{}))
		}, state.ErrRefused, "machine 0 still has unit kv/0 assigned", "dying"},
		{"dying and empty", func(t *testing.T, ctx context.Context, st *state.State, id string) {
			addUnits(t, ctx, st, "kv", 1, state.Placement{Machine: id})
			must(t, "DestroyUnit", st.DestroyUnit(ctx, "kv/0", state.DestroyOptions{}))
			must(t, "DestroyMachine", st.DestroyMachine(ctx, id, state.DestroyOptions{}))
			must(t, "EnsureUnitDead", st.EnsureUnitDead(ctx, "kv/0"))
			must(t, "RemoveUnit", st.RemoveUnit(ctx, "kv/0"))
		}, nil, "", "dead"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, ctx := newState(t)
			addService(t, ctx, st, "kv", kvEndpoints)
			ms, err := st.AddMachines(ctx, 1)
			must(t, "AddMachines", err)
			tt.setup(t, ctx, st, ms[0].Id)
			err = st.EnsureMachineDead(ctx, ms[0].Id)
			if tt.want == nil {
				must(t, "EnsureMachineDead", err)
			} else {
				wantErr(t, "EnsureMachineDead", err, tt.want, "M3", tt.msg)
			}
			if got := life(t, ctx, st, "machine", ms[0].Id); got != tt.life {
				t.Errorf("machine is %s, want %s", got, tt.life)
			}
			// Setting a dead machine dead again changes nothing.
			if tt.life == "dead" {
				must(t, "EnsureMachineDead again", st.EnsureMachineDead(ctx, ms[0].Id))
			}
		})
	}
}

func TestRuleM4_OnlyDeadMachinesAreRemoved(t *testing.T) {
	for _, tt := range []struct {
		life string
		want error
		msg  string
	}{
		{"alive", state.ErrRefused, "machine 0 is alive: only a dead machine can be removed"},
		{"dying", state.ErrRefused, "machine 0 is dying: only a dead machine can be removed"},
		{"dead", nil, ""},
	} {
		t.Run(tt.life, func(t *testing.T) {
			st, ctx := newState(t)
			ms, err := st.AddMachines(ctx, 1)
			must(t, "AddMachines", err)
			id := ms[0].Id
			if tt.life != "alive" {
				must(t, "DestroyMachine", st.DestroyMachine(ctx, id, state.DestroyOptions{}))
			}
			if tt.life == "dead" {
				must(t, "EnsureMachineDead", st.EnsureMachineDead(ctx, id))
			}
			err = st.RemoveMachine(ctx, id)
			if tt.want == nil {
				must(t, "RemoveMachine", err)
				if got := life(t, ctx, st, "machine", id); got != "removed" {
					t.Errorf("machine is %s, want removed", got)
				}
				wantErr(t, "RemoveMachine again", st.RemoveMachine(ctx, id), state.ErrNotFound, "", "machine 0 not found")
				return
			}
			wantErr(t, "RemoveMachine", err, tt.want, "M4", tt.msg)
		})
	}
}

// DestroyMachines and RemoveMachines change many machines a transaction,
// and answer for each alone: one refused, missing or named twice is left
// out, and the others go on.
func TestMachinesTogether(t *testing.T) {
	st, ctx := newState(t)
	t.Cleanup(func() { checkInvariants(t, st) })
	addService(t, ctx, st, "kv", kvEndpoints)
	ms, err := st.AddMachines(ctx, 20)
	must(t, "AddMachines", err)
	addUnits(t, ctx, st, "kv", 1, state.Placement{Machine: ms[3].Id})
	must(t, "DestroyMachine", st.DestroyMachine(ctx, ms[5].Id, state.DestroyOptions{}))
	var ids []string
	for _, m := range ms {
		ids = append(ids, m.Id)
	}
	ids = append(ids, "77", ms[0].Id, "x/y")
	before := st.Stats().Txns
	errs := st.DestroyMachines(ctx, ids, state.DestroyOptions{})
	if txns := st.Stats().Txns - before; txns != 2 {
		t.Errorf("%d transactions for 20 machines, want 2 (15 a transaction)", txns)
	}
	for i, err := range errs {
		switch ids[i] {
		case ms[3].Id:
			wantErr(t, "destroy a machine with an alive unit", err, state.ErrRefused, "M2", "machine 3 has unit kv/0 assigned")
		case "77":
			wantErr(t, "destroy a missing machine", err, state.ErrNotFound, "", "machine 77 not found")
		case "x/y":
			wantErr(t, "destroy a bad id", err, state.ErrInvalid, "", "")
		default:
			if i == len(ms)+1 {
				wantErr(t, "name a machine twice", err, state.ErrInvalid, "", "machine 0 is named twice")
			} else if err != nil {
				t.Errorf("destroy machine %s: %v", ids[i], err)
			}
		}
	}
	var dead []string
	for _, m := range ms {
		got, err := st.Machine(ctx, m.Id)
		must(t, "Machine", err)
		want := "LIFE_DYING"
		if m.Id == ms[3].Id {
			want = "LIFE_ALIVE"
		} else {
			must(t, "EnsureMachineDead", st.EnsureMachineDead(ctx, m.Id))
			dead = append(dead, m.Id)
		}
		if got.Life.String() != want {
			t.Errorf("machine %s is %s, want %s", m.Id, got.Life, want)
		}
	}
	errs = st.RemoveMachines(ctx, append(dead, ms[3].Id))
	for i, err := range errs[:len(dead)] {
		if err != nil {
			t.Errorf("remove dead machine %s: %v", dead[i], err)
		}
	}
	wantErr(t, "remove an alive machine", errs[len(dead)], state.ErrRefused, "M4", "machine 3 is alive: only a dead machine can be removed")
	left, err := st.Machines(ctx)
	must(t, "Machines", err)
	if len(left) != 1 || left[0].Id != ms[3].Id {
		t.Errorf("machines left %v, want only machine 3", left)
	}
}

// TestDestroyManualMachineThatNeverJoined: a manual machine whose agent
// never joined (no instance, no unit, no status ever reported, no
// presence) is removed at once by a plain destroy, its credential and its
// join token with it; any other machine becomes dying, and waits for its
// agent.
func TestDestroyManualMachineThatNeverJoined(t *testing.T) {
	tests := []struct {
		name   string
		manual bool
		setup  func(t *testing.T, ctx context.Context, st *state.State, id string)
		force  bool
		want   string // the machine's life after the destroy: "removed", "dying"
		err    string // a refusal (M2) instead
	}{
		{name: "never joined", manual: true, want: "removed"},
		{name: "its agent reported a status", manual: true, want: "dying", setup: func(t *testing.T, ctx context.Context, st *state.State, id string) {
			must(t, "SetStatus", st.SetStatus(ctx, state.StatusMachine, id, &pb.Status{Status: "started"}))
		}},
		{name: "its agent is present", manual: true, want: "dying", setup: func(t *testing.T, ctx context.Context, st *state.State, id string) {
			p, err := st.Present(ctx, names.MachineTag(id), time.Minute)
			must(t, "Present", err)
			t.Cleanup(p.Close)
		}},
		{name: "a dying unit assigned", manual: true, want: "dying", setup: func(t *testing.T, ctx context.Context, st *state.State, id string) {
			addUnits(t, ctx, st, "kv", 1, state.Placement{Machine: id})
			must(t, "DestroyUnit", st.DestroyUnit(ctx, "kv/0", state.DestroyOptions{}))
		}},
		{name: "an alive unit assigned", manual: true, err: "machine 0 has unit kv/0 assigned", setup: func(t *testing.T, ctx context.Context, st *state.State, id string) {
			addUnits(t, ctx, st, "kv", 1, state.Placement{Machine: id})
		}},
		{name: "an instance recorded", manual: true, want: "dying", setup: func(t *testing.T, ctx context.Context, st *state.State, id string) {
			must(t, "SetMachineInstance", st.SetMachineInstance(ctx, id, "i-0", "10.0.0.1"))
		}},
		{name: "not manual", want: "dying"},
		{name: "forced", manual: true, force: true, want: "dying"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, ctx := newState(t)
			addService(t, ctx, st, "kv", kvEndpoints)
			ms, err := st.AddMachinesWith(ctx, 1, state.MachineOptions{Manual: tt.manual})
			must(t, "AddMachines", err)
			id := ms[0].Id
			tag := names.MachineTag(id)
			must(t, "SetCredential", st.SetCredential(ctx, tag, "hash"))
			if tt.manual {
				must(t, "SetJoinTokens", st.SetJoinTokens(ctx, map[string]*pb.MachineJoin{id: {Hash: "token", ExpiresUnixNano: time.Now().Add(time.Hour).UnixNano()}}))
			}
			if tt.setup != nil {
				tt.setup(t, ctx, st, id)
			}
			err = st.DestroyMachine(ctx, id, state.DestroyOptions{Force: tt.force, MaxWait: time.Hour})
			if tt.err != "" {
				wantErr(t, "DestroyMachine", err, state.ErrRefused, "M2", tt.err)
				if got := life(t, ctx, st, "machine", id); got != "alive" {
					t.Errorf("machine %s is %s after a refusal, want alive", id, got)
				}
				return
			}
			must(t, "DestroyMachine", err)
			if got := life(t, ctx, st, "machine", id); got != tt.want {
				t.Errorf("after DestroyMachine(%s), the machine is %s, want %s", id, got, tt.want)
			}
			_, err = st.CredentialHash(ctx, tag)
			if gone := errors.Is(err, state.ErrNotFound); gone != (tt.want == "removed") {
				t.Errorf("CredentialHash(%s) = %v after DestroyMachine: want it gone %v", tag, err, tt.want == "removed")
			}
			snap, err := st.Snapshot(ctx)
			must(t, "Snapshot", err)
			if _, kept := snap.Values[state.MachineJoinKey(id)]; tt.manual && kept == (tt.want == "removed") {
				t.Errorf("machine %s's join token kept %v after DestroyMachine, want kept %v", id, kept, tt.want != "removed")
			}
			err = st.DestroyMachine(ctx, id, state.DestroyOptions{})
			if tt.want == "removed" {
				wantErr(t, "DestroyMachine again", err, state.ErrNotFound, "", "machine 0 not found")
			} else {
				must(t, "DestroyMachine again", err)
			}
		})
	}
	t.Run("among others", func(t *testing.T) {
		st, ctx := newState(t)
		plain, err := st.AddMachines(ctx, 2)
		must(t, "AddMachines", err)
		manual, err := st.AddMachinesWith(ctx, 2, state.MachineOptions{Manual: true})
		must(t, "AddMachines", err)
		must(t, "SetStatus", st.SetStatus(ctx, state.StatusMachine, manual[1].Id, &pb.Status{Status: "started"}))
		ids := []string{plain[0].Id, manual[0].Id, manual[1].Id, plain[1].Id}
		for i, err := range st.DestroyMachines(ctx, ids, state.DestroyOptions{}) {
			must(t, "DestroyMachines of "+ids[i], err)
		}
		for i, want := range []string{"dying", "removed", "dying", "dying"} {
			if got := life(t, ctx, st, "machine", ids[i]); got != want {
				t.Errorf("after DestroyMachines(%v), machine %s is %s, want %s", ids, ids[i], got, want)
			}
		}
	})
}
