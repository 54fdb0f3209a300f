package state_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

func intValue(n int64) *pb.ConfigValue {
	return &pb.ConfigValue{Value: &pb.ConfigValue_IntValue{IntValue: n}}
}

// setConfig makes the next revision of service with key set to n.
func setConfig(ctx context.Context, st *state.State, service, key string, n int64) (*pb.Revision, error) {
	return st.ChangeSpec(ctx, service, state.SpecChange{By: "alice", Reason: "config", Next: func(head *pb.Revision) (*pb.ServiceSpec, []*pb.Endpoint, error) {
		next := &pb.ServiceSpec{Charm: head.Spec.Charm, Config: map[string]*pb.ConfigValue{}}
		for k, v := range head.Spec.Config {
			next.Config[k] = v
		}
		next.Config[key] = intValue(n)
		return next, nil, nil
	}})
}

// refusedUnchanged runs f, wants it refused as want with msg, and wants
// the model as it was before.
func refusedUnchanged(t *testing.T, ctx context.Context, st *state.State, what string, want error, msg string, f func() error) {
	t.Helper()
	before, err := st.Snapshot(ctx)
	must(t, "Snapshot", err)
	wantErr(t, what, f(), want, "", msg)
	after, err := st.Snapshot(ctx)
	must(t, "Snapshot", err)
	for k, v := range after.Values {
		if w, ok := before.Values[k]; !ok || !bytes.Equal(v, w) {
			t.Errorf("%s changed %s", what, k)
		}
	}
	for k := range before.Values {
		if _, ok := after.Values[k]; !ok {
			t.Errorf("%s removed %s", what, k)
		}
	}
}

func rollout(t *testing.T, ctx context.Context, st *state.State, service string) *pb.Rollout {
	t.Helper()
	ro, err := st.Rollout(ctx, service)
	must(t, "Rollout", err)
	return ro
}

func TestDeployWritesRevisionOne(t *testing.T) {
	st, ctx := newState(t)
	_, err := st.AddService(ctx, state.AddServiceArgs{Name: "kv", Charm: &pb.CharmRef{Name: "kv", Revision: 3, Sha256: "ab"},
		Endpoints: kvEndpoints, Config: map[string]*pb.ConfigValue{"port": intValue(80)}, By: "alice"})
	must(t, "AddService", err)
	revs, err := st.Revisions(ctx, "kv")
	must(t, "Revisions", err)
	if len(revs) != 1 || revs[0].Number != 1 || revs[0].Reason != "deploy" || revs[0].By != "alice" || revs[0].Id != state.SpecID(revs[0].Spec) {
		t.Fatalf("Revisions = %v, want revision 1 by alice for the deploy", revs)
	}
	ro := rollout(t, ctx, st, "kv")
	if ro.Head != 1 || ro.Target != 1 || ro.State != pb.RolloutState_ROLLOUT_STATE_DONE {
		t.Errorf("Rollout = %v, want done at 1", ro)
	}
	units := addUnits(t, ctx, st, "kv", 2, state.Placement{})
	ur, err := st.UnitRevision(ctx, units[0].Name)
	must(t, "UnitRevision", err)
	if ur.Current != 1 || ur.Target != 1 {
		t.Errorf("UnitRevision = %v, want current and target 1", ur)
	}
	p, err := st.RolloutPolicy(ctx, "kv")
	must(t, "RolloutPolicy", err)
	if p.MaxParallel != "100%" || !p.AutoRevert || p.DeadlineMs != 600_000 {
		t.Errorf("RolloutPolicy = %v, want the defaults", p)
	}
}

func TestCanonicalSpec(t *testing.T) {
	spec := &pb.ServiceSpec{Charm: &pb.CharmRef{Name: "kv", Revision: 2, Sha256: "ff"}, Config: map[string]*pb.ConfigValue{
		"b": {Value: &pb.ConfigValue_StringValue{StringValue: "x<y"}}, "a": intValue(5),
		"c": {Value: &pb.ConfigValue_FloatValue{FloatValue: 1.5}}, "d": {Value: &pb.ConfigValue_BoolValue{BoolValue: true}},
	}}
	want := `{"charm":{"name":"kv","revision":2,"sha256":"ff"},"config":{"a":{"int":5},"b":{"string":"x<y"},"c":{"float":"1.5"},"d":{"bool":true}}}`
	if got := string(state.CanonicalSpec(spec)); got != want {
		t.Errorf("CanonicalSpec = %s, want %s", got, want)
	}
	other := &pb.ServiceSpec{Charm: spec.Charm, Config: map[string]*pb.ConfigValue{"a": {Value: &pb.ConfigValue_StringValue{StringValue: "5"}}}}
	if state.SpecID(other) == state.SpecID(&pb.ServiceSpec{Charm: spec.Charm, Config: map[string]*pb.ConfigValue{"a": intValue(5)}}) {
		t.Errorf("SpecID does not tell the string \"5\" from the int 5")
	}
}

func TestMaxParallelUnits(t *testing.T) {
	for _, tc := range []struct {
		mp    string
		units int
		want  int
	}{{"3", 10, 3}, {"100%", 10, 10}, {"25%", 10, 3}, {"1%", 10, 1}, {"50%", 0, 1}, {"", 4, 4}} {
		if got := state.MaxParallelUnits(&pb.RolloutPolicy{MaxParallel: tc.mp}, tc.units); got != tc.want {
			t.Errorf("MaxParallelUnits(%q, %d) = %d, want %d", tc.mp, tc.units, got, tc.want)
		}
	}
}

func TestChangeSpec(t *testing.T) {
	st, ctx := newState(t)
	addService(t, ctx, st, "kv", kvEndpoints)
	addUnits(t, ctx, st, "kv", 2, state.Placement{})
	rev, err := setConfig(ctx, st, "kv", "port", 80)
	must(t, "ChangeSpec", err)
	if rev.Number != 2 || rev.By != "alice" || len(rev.Changes) != 1 || rev.Changes[0].Key != "port" || rev.Changes[0].OldValue != "" || rev.Changes[0].NewValue != "80" {
		t.Errorf("ChangeSpec = %v, want revision 2 setting port from absent to 80", rev)
	}
	ro := rollout(t, ctx, st, "kv")
	if ro.Head != 2 || ro.Target != 2 || ro.Previous != 1 || ro.State != pb.RolloutState_ROLLOUT_STATE_ROLLING {
		t.Errorf("Rollout = %v, want rolling from 1 to 2", ro)
	}
	cfg, err := st.ServiceConfig(ctx, "kv")
	must(t, "ServiceConfig", err)
	if cfg.Values["port"].GetIntValue() != 80 {
		t.Errorf("config mirror = %v, want port 80", cfg)
	}
	refusedUnchanged(t, ctx, st, "ChangeSpec(same)", state.ErrNoChange, "service kv is already at that spec (revision 2)", func() error {
		_, err := setConfig(ctx, st, "kv", "port", 80)
		return err
	})
	// A change during the rollout keeps its previous.
	_, err = setConfig(ctx, st, "kv", "port", 81)
	must(t, "ChangeSpec", err)
	if ro := rollout(t, ctx, st, "kv"); ro.Previous != 1 || ro.Target != 3 {
		t.Errorf("Rollout = %v, want previous 1 target 3", ro)
	}
	refusedUnchanged(t, ctx, st, "ChangeSpec(no charm)", state.ErrInvalid, "no charm", func() error {
		_, err := st.ChangeSpec(ctx, "kv", state.SpecChange{Next: func(*pb.Revision) (*pb.ServiceSpec, []*pb.Endpoint, error) {
			return &pb.ServiceSpec{}, nil, nil
		}})
		return err
	})
	refusedUnchanged(t, ctx, st, "ChangeSpec(ghost)", state.ErrNotFound, "service ghost not found", func() error {
		_, err := setConfig(ctx, st, "ghost", "port", 1)
		return err
	})
}

func TestChangeSpecPrunes(t *testing.T) {
	st, ctx := newState(t)
	addService(t, ctx, st, "kv", kvEndpoints)
	for i := range 5 {
		_, err := setConfig(ctx, st, "kv", "port", int64(i))
		must(t, "ChangeSpec", err)
		must(t, "CompleteRollout", st.CompleteRollout(ctx, "kv", int64(i+2)))
	}
	// Done each time: previous follows; 3 kept.
	_, err := st.ChangeSpec(ctx, "kv", state.SpecChange{History: 3, Next: func(head *pb.Revision) (*pb.ServiceSpec, []*pb.Endpoint, error) {
		return &pb.ServiceSpec{Charm: head.Spec.Charm}, nil, nil
	}})
	must(t, "ChangeSpec", err)
	revs, err := st.Revisions(ctx, "kv")
	must(t, "Revisions", err)
	var nums []int64
	for _, r := range revs {
		nums = append(nums, r.Number)
	}
	if !slices.Equal(nums, []int64{5, 6, 7}) {
		t.Errorf("revisions kept = %v, want 5, 6, 7", nums)
	}
	// A rollout not done keeps its previous, and any revision a unit is on.
	us := addUnits(t, ctx, st, "kv", 1, state.Placement{Unassigned: true}) // on 7
	for i := range 4 {
		_, err := st.ChangeSpec(ctx, "kv", state.SpecChange{History: 2, Next: func(head *pb.Revision) (*pb.ServiceSpec, []*pb.Endpoint, error) {
			return &pb.ServiceSpec{Charm: head.Spec.Charm, Config: map[string]*pb.ConfigValue{"x": intValue(int64(i))}}, nil, nil
		}})
		must(t, "ChangeSpec", err)
	}
	revs, err = st.Revisions(ctx, "kv")
	must(t, "Revisions", err)
	nums = nums[:0]
	for _, r := range revs {
		nums = append(nums, r.Number)
	}
	if !slices.Equal(nums, []int64{6, 7, 10, 11}) {
		t.Errorf("revisions kept = %v, want 6 (the rollout's previous), 7 (%s's) and the newest 10, 11", nums, us[0].Name)
	}
}

func TestChangeSpecEndpoints(t *testing.T) {
	st, ctx := newState(t)
	addService(t, ctx, st, "kv", kvEndpoints)
	addService(t, ctx, st, "app", appEndpoints)
	relate(t, ctx, st, "app:db", "kv:server")
	refresh := func(eps []*pb.Endpoint) func() error {
		return func() error {
			_, err := st.ChangeSpec(ctx, "kv", state.SpecChange{Reason: "refresh", Next: func(head *pb.Revision) (*pb.ServiceSpec, []*pb.Endpoint, error) {
				return &pb.ServiceSpec{Charm: &pb.CharmRef{Name: "kv", Revision: 2}}, eps, nil
			}})
			return err
		}
	}
	refusedUnchanged(t, ctx, st, "ChangeSpec(lacks server)", state.ErrRefused, "uses endpoint server (kv, provider), which the new charm lacks",
		refresh(kvEndpoints[1:]))
	changed := []*pb.Endpoint{{Name: "server", Interface: "other", Role: pb.Role_ROLE_PROVIDER, Scope: pb.Scope_SCOPE_GLOBAL}, kvEndpoints[1]}
	refusedUnchanged(t, ctx, st, "ChangeSpec(other interface)", state.ErrRefused, "which the new charm lacks", refresh(changed))
	more := append(slices.Clone(kvEndpoints), &pb.Endpoint{Name: "admin", Interface: "http", Role: pb.Role_ROLE_PROVIDER, Scope: pb.Scope_SCOPE_GLOBAL})
	must(t, "refresh", refresh(more)())
	svc, err := st.Service(ctx, "kv")
	must(t, "Service", err)
	if svc.Charm.Revision != 2 || len(svc.Endpoints) != 3 {
		t.Errorf("Service = %v, want charm revision 2 with 3 endpoints", svc)
	}
}

// TestChangeSpecKeepsInfoName: a service whose implicit endpoint is
// named lifeline-info, related through it, takes a charm whose record
// names it juju-info: the service keeps lifeline-info, and its relation.
func TestChangeSpecKeepsInfoName(t *testing.T) {
	st, ctx := newState(t)
	addService(t, ctx, st, "ubuntu", []*pb.Endpoint{{Name: "lifeline-info", Interface: "lifeline-info", Role: pb.Role_ROLE_PROVIDER, Scope: pb.Scope_SCOPE_GLOBAL}})
	addService(t, ctx, st, "logger", loggerEndpoints)
	relate(t, ctx, st, "ubuntu", "logger")
	web := &pb.Endpoint{Name: "website", Interface: "http", Role: pb.Role_ROLE_PROVIDER, Scope: pb.Scope_SCOPE_GLOBAL}
	_, err := st.ChangeSpec(ctx, "ubuntu", state.SpecChange{Reason: "refresh", Next: func(head *pb.Revision) (*pb.ServiceSpec, []*pb.Endpoint, error) {
		return &pb.ServiceSpec{Charm: &pb.CharmRef{Name: "ubuntu", Revision: 2}}, []*pb.Endpoint{
			{Name: "juju-info", Interface: "juju-info", Role: pb.Role_ROLE_PROVIDER, Scope: pb.Scope_SCOPE_GLOBAL, Limit: 5}, web,
		}, nil
	}})
	must(t, "ChangeSpec", err)
	svc, err := st.Service(ctx, "ubuntu")
	must(t, "Service", err)
	var got []string
	for _, ep := range svc.Endpoints {
		got = append(got, fmt.Sprintf("%s(%s %d)", ep.Name, ep.Interface, ep.Limit))
	}
	if want := []string{"lifeline-info(lifeline-info 5)", "website(http 0)"}; !slices.Equal(got, want) {
		t.Errorf("ubuntu's endpoints after the refresh = %v, want %v", got, want)
	}
	if _, err := st.RelationByKey(ctx, "logger:host ubuntu:lifeline-info"); err != nil {
		t.Errorf("the relation after the refresh: %v", err)
	}
}

func TestRolloutVerbs(t *testing.T) {
	st, ctx := newState(t)
	addService(t, ctx, st, "kv", kvEndpoints)
	refusedUnchanged(t, ctx, st, "PauseRollout(done)", state.ErrRefused, "rollout of kv is done: nothing to pause", func() error {
		return st.PauseRollout(ctx, "kv")
	})
	must(t, "SetRolloutPolicy", st.SetRolloutPolicy(ctx, "kv", &pb.RolloutPolicy{MaxParallel: "1", Canary: 1, DeadlineMs: 1000, AutoRevert: true}))
	refusedUnchanged(t, ctx, st, "SetRolloutPolicy(bad)", state.ErrInvalid, "max-parallel", func() error {
		return st.SetRolloutPolicy(ctx, "kv", &pb.RolloutPolicy{MaxParallel: "0%", DeadlineMs: 1})
	})
	refusedUnchanged(t, ctx, st, "SetRolloutPolicy(deadline)", state.ErrInvalid, "deadline", func() error {
		return st.SetRolloutPolicy(ctx, "kv", &pb.RolloutPolicy{MaxParallel: "1"})
	})
	refusedUnchanged(t, ctx, st, "SetRolloutPolicy(gate)", state.ErrInvalid, "gate name", func() error {
		return st.SetRolloutPolicy(ctx, "kv", &pb.RolloutPolicy{MaxParallel: "1", DeadlineMs: 1, Gate: "Bad Gate"})
	})
	_, err := setConfig(ctx, st, "kv", "port", 1)
	must(t, "ChangeSpec", err)
	if ro := rollout(t, ctx, st, "kv"); ro.State != pb.RolloutState_ROLLOUT_STATE_CANARY || ro.Canary != 1 {
		t.Fatalf("Rollout = %v, want a canary of 1", ro)
	}
	refusedUnchanged(t, ctx, st, "ResumeRollout(canary)", state.ErrRefused, "not paused", func() error { return st.ResumeRollout(ctx, "kv") })
	must(t, "PauseRollout", st.PauseRollout(ctx, "kv"))
	refusedUnchanged(t, ctx, st, "PauseRollout(paused)", state.ErrRefused, "already paused", func() error { return st.PauseRollout(ctx, "kv") })
	refusedUnchanged(t, ctx, st, "PromoteRollout(paused)", state.ErrRefused, "is paused: cannot promote", func() error { return st.PromoteRollout(ctx, "kv") })
	must(t, "ResumeRollout", st.ResumeRollout(ctx, "kv"))
	if ro := rollout(t, ctx, st, "kv"); ro.State != pb.RolloutState_ROLLOUT_STATE_CANARY {
		t.Errorf("resumed Rollout = %v, want back in its canary", ro)
	}
	must(t, "PromoteRollout", st.PromoteRollout(ctx, "kv"))
	refusedUnchanged(t, ctx, st, "PromoteRollout(rolling)", state.ErrRefused, "no canary waiting", func() error { return st.PromoteRollout(ctx, "kv") })
	// Abort: back to revision 1's spec, skipping the canary.
	rev, err := st.RevertRollout(ctx, "kv", "bob", "abort")
	must(t, "RevertRollout", err)
	one, err := st.ServiceRevision(ctx, "kv", 1)
	must(t, "ServiceRevision", err)
	ro := rollout(t, ctx, st, "kv")
	if rev.Number != 3 || rev.Id != one.Id || rev.Reason != "abort" || ro.Reverting != 2 || ro.State != pb.RolloutState_ROLLOUT_STATE_ROLLING || ro.Previous != 1 {
		t.Errorf("RevertRollout = %v with rollout %v, want revision 3 = revision 1's spec, reverting 2, rolling", rev, ro)
	}
	// A revert that fails does not revert again.
	got, err := st.FailRollout(ctx, "kv", 3, "unit kv/0 unhealthy")
	must(t, "FailRollout", err)
	if ro := rollout(t, ctx, st, "kv"); got != nil || ro.State != pb.RolloutState_ROLLOUT_STATE_FAILED || ro.Reason != "unit kv/0 unhealthy" {
		t.Errorf("FailRollout = %v with rollout %v, want failed", got, ro)
	}
	refusedUnchanged(t, ctx, st, "FailRollout(old)", state.ErrRefused, "moved on to revision 3", func() error {
		_, err := st.FailRollout(ctx, "kv", 2, "late")
		return err
	})
	refusedUnchanged(t, ctx, st, "GrantPermits(failed)", state.ErrRefused, "is failed: no permits", func() error {
		_, err := st.GrantPermits(ctx, "kv", 3, nil)
		return err
	})
	must(t, "CompleteRollout", st.CompleteRollout(ctx, "kv", 3))
	refusedUnchanged(t, ctx, st, "RevertRollout(done)", state.ErrRefused, "rollout of kv is done: nothing to abort", func() error {
		_, err := st.RevertRollout(ctx, "kv", "bob", "abort")
		return err
	})
}

func TestFailRolloutAutoReverts(t *testing.T) {
	st, ctx := newState(t)
	addService(t, ctx, st, "kv", kvEndpoints)
	_, err := setConfig(ctx, st, "kv", "port", 1)
	must(t, "ChangeSpec", err)
	rev, err := st.FailRollout(ctx, "kv", 2, "deadline passed")
	must(t, "FailRollout", err)
	if rev == nil || rev.Reason != "auto-revert: deadline passed" || rev.By != "" || rev.Number != 3 {
		t.Fatalf("FailRollout = %v, want revision 3, an auto-revert", rev)
	}
	if ro := rollout(t, ctx, st, "kv"); ro.Reverting != 2 || ro.Target != 3 {
		t.Errorf("Rollout = %v, want reverting 2 to 3", ro)
	}
}

func TestPermits(t *testing.T) {
	st, ctx := newState(t)
	addService(t, ctx, st, "kv", kvEndpoints)
	us := addUnits(t, ctx, st, "kv", 4, state.Placement{Unassigned: true})
	var names []string
	for _, u := range us {
		names = append(names, u.Name)
	}
	must(t, "SetRolloutPolicy", st.SetRolloutPolicy(ctx, "kv", &pb.RolloutPolicy{MaxParallel: "50%", Canary: 1, DeadlineMs: 1000}))
	refusedUnchanged(t, ctx, st, "GrantPermits(done)", state.ErrRefused, "is done: no permits", func() error {
		_, err := st.GrantPermits(ctx, "kv", 1, names)
		return err
	})
	_, err := setConfig(ctx, st, "kv", "port", 1)
	must(t, "ChangeSpec", err)
	refusedUnchanged(t, ctx, st, "GrantPermits(wrong target)", state.ErrRefused, "targets revision 2, not 1", func() error {
		_, err := st.GrantPermits(ctx, "kv", 1, names)
		return err
	})
	refusedUnchanged(t, ctx, st, "GrantPermits(too many)", state.ErrInvalid, "at most", func() error {
		_, err := st.GrantPermits(ctx, "kv", 2, make([]string, state.MaxGrantUnits+1))
		return err
	})
	granted, err := st.GrantPermits(ctx, "kv", 2, names)
	must(t, "GrantPermits", err)
	if !slices.Equal(granted, names[:1]) {
		t.Fatalf("GrantPermits in the canary = %v, want %v", granted, names[:1])
	}
	refusedUnchanged(t, ctx, st, "GrantPermits(canary granted)", state.ErrRefused, "promote it first", func() error {
		_, err := st.GrantPermits(ctx, "kv", 2, names)
		return err
	})
	refusedUnchanged(t, ctx, st, "SetUnitRevision(not target)", state.ErrRefused, "is to run revision 2, not 1", func() error {
		return st.SetUnitRevision(ctx, names[0], 1)
	})
	refusedUnchanged(t, ctx, st, "CompleteRollout(permits out)", state.ErrRefused, "1 permits out", func() error {
		return st.CompleteRollout(ctx, "kv", 2)
	})
	must(t, "PromoteRollout", st.PromoteRollout(ctx, "kv"))
	granted, err = st.GrantPermits(ctx, "kv", 2, names)
	must(t, "GrantPermits", err)
	if !slices.Equal(granted, names[:2]) {
		t.Fatalf("GrantPermits at 50%% of 4 = %v, want %v (kv/0 holding one already)", granted, names[:2])
	}
	ro := rollout(t, ctx, st, "kv")
	if ro.Permits != 2 || ro.PermitLimit != 2 {
		t.Errorf("Rollout = %v, want 2 permits out of 2", ro)
	}
	// A change now: the permits stay, retargeted without another.
	_, err = setConfig(ctx, st, "kv", "port", 2)
	must(t, "ChangeSpec", err)
	must(t, "PromoteRollout", st.PromoteRollout(ctx, "kv"))
	granted, err = st.GrantPermits(ctx, "kv", 3, names)
	must(t, "GrantPermits", err)
	if ro := rollout(t, ctx, st, "kv"); !slices.Equal(granted, names[:2]) || ro.Permits != 2 {
		t.Errorf("GrantPermits after a change = %v with %d permits, want %v retargeted, 2 out", granted, ro.Permits, names[:2])
	}
	// Units report, release, and the rest go.
	must(t, "SetUnitRevision", st.SetUnitRevision(ctx, names[0], 3))
	// A unit named twice is released once.
	must(t, "ReleasePermits", st.ReleasePermits(ctx, "kv", append(slices.Clone(names), names[0])))
	if ro := rollout(t, ctx, st, "kv"); ro.Permits != 1 {
		t.Errorf("after one release: %d permits out, want 1", ro.Permits)
	}
	// Removing a unit frees its permit.
	must(t, "DestroyUnit", st.DestroyUnit(ctx, names[1], state.DestroyOptions{}))
	if ro := rollout(t, ctx, st, "kv"); ro.Permits != 0 {
		t.Errorf("after removing %s: %d permits out, want 0", names[1], ro.Permits)
	}
	for _, u := range []string{names[2], names[3]} {
		_, err := st.GrantPermits(ctx, "kv", 3, []string{u})
		must(t, "GrantPermits", err)
		must(t, "SetUnitRevision", st.SetUnitRevision(ctx, u, 3))
	}
	refusedUnchanged(t, ctx, st, "CompleteRollout(permits)", state.ErrRefused, "2 permits out", func() error {
		return st.CompleteRollout(ctx, "kv", 3)
	})
	must(t, "ReleasePermits", st.ReleasePermits(ctx, "kv", names))
	must(t, "CompleteRollout", st.CompleteRollout(ctx, "kv", 3))
	if ro := rollout(t, ctx, st, "kv"); ro.State != pb.RolloutState_ROLLOUT_STATE_DONE || ro.Permits != 0 {
		t.Errorf("Rollout = %v, want done", ro)
	}
}

func TestCompleteRolloutWaitsForUnits(t *testing.T) {
	st, ctx := newState(t)
	addService(t, ctx, st, "kv", kvEndpoints)
	us := addUnits(t, ctx, st, "kv", 2, state.Placement{})
	_, err := setConfig(ctx, st, "kv", "port", 1)
	must(t, "ChangeSpec", err)
	refusedUnchanged(t, ctx, st, "CompleteRollout", state.ErrRefused, "2 units do not run it ("+us[0].Name+" runs revision 1)", func() error {
		return st.CompleteRollout(ctx, "kv", 2)
	})
	// New units start on the target.
	more := addUnits(t, ctx, st, "kv", 1, state.Placement{})
	ur, err := st.UnitRevision(ctx, more[0].Name)
	must(t, "UnitRevision", err)
	if ur.Current != 2 || ur.Target != 2 {
		t.Errorf("new unit's revisions = %v, want 2 and 2", ur)
	}
}

func TestGateDecisions(t *testing.T) {
	st, ctx := newState(t)
	addService(t, ctx, st, "kv", kvEndpoints)
	us := addUnits(t, ctx, st, "kv", 1, state.Placement{})
	u := us[0].Name
	refusedUnchanged(t, ctx, st, "RecordGateDecision(no verdict)", state.ErrInvalid, "no verdict", func() error {
		return st.RecordGateDecision(ctx, "kv", &pb.GateDecision{Unit: u, Gate: "orly"})
	})
	refusedUnchanged(t, ctx, st, "RecordGateDecision(ghost)", state.ErrNotFound, "unit kv/9 not found", func() error {
		return st.RecordGateDecision(ctx, "kv", &pb.GateDecision{Unit: "kv/9", Gate: "orly", Decision: pb.GateVerdict_GATE_VERDICT_ALLOW})
	})
	must(t, "RecordGateDecision", st.RecordGateDecision(ctx, "kv", &pb.GateDecision{Unit: u, Gate: "orly", Decision: pb.GateVerdict_GATE_VERDICT_DENY, Reason: "change freeze"}))
	ur, err := st.UnitRevision(ctx, u)
	must(t, "UnitRevision", err)
	if ur.Note != `gate "orly" denied: change freeze` {
		t.Errorf("note = %q, want the gate's denial", ur.Note)
	}
	for i := range state.MaxGateDecisions + 5 {
		must(t, "RecordGateDecision", st.RecordGateDecision(ctx, "kv", &pb.GateDecision{Unit: u, Gate: "orly", Decision: pb.GateVerdict_GATE_VERDICT_ALLOW, Reason: fmt.Sprint(i)}))
	}
	ds, err := st.GateDecisions(ctx, "kv")
	must(t, "GateDecisions", err)
	if len(ds) != state.MaxGateDecisions || ds[len(ds)-1].Reason != fmt.Sprint(state.MaxGateDecisions+4) {
		t.Errorf("GateDecisions kept %d, the last %q; want %d, the last the newest", len(ds), ds[len(ds)-1].Reason, state.MaxGateDecisions)
	}
	// Granted: the note is cleared.
	_, err = setConfig(ctx, st, "kv", "port", 1)
	must(t, "ChangeSpec", err)
	_, err = st.GrantPermits(ctx, "kv", 2, []string{u})
	must(t, "GrantPermits", err)
	if ur, _ := st.UnitRevision(ctx, u); ur.GetNote() != "" {
		t.Errorf("note after the grant = %q, want none", ur.GetNote())
	}
}

// TestRevisionsGoWithTheirService removes a service with units, permits
// and gate decisions, and wants nothing of it left.
func TestRevisionsGoWithTheirService(t *testing.T) {
	st, ctx := newState(t)
	addService(t, ctx, st, "kv", kvEndpoints)
	us := addUnits(t, ctx, st, "kv", 2, state.Placement{Unassigned: true})
	must(t, "SetRolloutPolicy", st.SetRolloutPolicy(ctx, "kv", &pb.RolloutPolicy{MaxParallel: "1", DeadlineMs: 1}))
	_, err := setConfig(ctx, st, "kv", "port", 1)
	must(t, "ChangeSpec", err)
	_, err = st.GrantPermits(ctx, "kv", 2, []string{us[0].Name})
	must(t, "GrantPermits", err)
	must(t, "RecordGateDecision", st.RecordGateDecision(ctx, "kv", &pb.GateDecision{Unit: us[1].Name, Gate: "orly", Decision: pb.GateVerdict_GATE_VERDICT_RETRY}))
	must(t, "DestroyService", st.DestroyService(ctx, "kv"))
	_, err = state.NewCleaner(st, 0).Pass(ctx)
	must(t, "Cleaner.Pass", err)
	for _, u := range us {
		if err := st.DestroyUnit(ctx, u.Name, state.DestroyOptions{}); err != nil && !isNotFound(err) {
			t.Fatalf("DestroyUnit: %v", err)
		}
	}
	snap, err := st.Snapshot(ctx)
	must(t, "Snapshot", err)
	if keys := snap.EntityKeys(); len(keys) > 0 {
		t.Errorf("left after the service went: %v", keys)
	}
}

func isNotFound(err error) bool { return errors.Is(err, state.ErrNotFound) }
