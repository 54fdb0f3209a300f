package state_test

import (
	"errors"
	"testing"
	"time"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// TestJoinTokenJoinsOnce: a manual machine's join token stores the
// machine's credential once, deleting itself in the same transaction; used
// again, with the wrong secret, expired, for a machine not manual or dead,
// it is refused and nothing changes. A new token replaces an unused one,
// and the machine's removal takes its token with it.
func TestJoinTokenJoinsOnce(t *testing.T) {
	st, ctx := newState(t)
	manual, err := st.AddMachinesWith(ctx, 2, state.MachineOptions{Manual: true})
	must(t, "AddMachinesWith manual", err)
	provided, err := st.AddMachines(ctx, 1)
	must(t, "AddMachines", err)
	m, other, p := manual[0].Id, manual[1].Id, provided[0].Id
	now := time.Now()
	later := now.Add(time.Hour).UnixNano()
	accept := func(want string) func(string) bool { return func(h string) bool { return h == want } }

	wantErr(t, "SetJoinTokens of a provided machine", st.SetJoinTokens(ctx, map[string]*pb.MachineJoin{m: {Hash: "t1", ExpiresUnixNano: later}, p: {Hash: "t", ExpiresUnixNano: later}}),
		state.ErrRefused, "join", "machine "+p+" is not a manual machine")
	wantErr(t, "JoinMachine with no token issued", st.JoinMachine(ctx, m, accept("t1"), now, "c1"), state.ErrBadJoinToken, "", "not valid")
	must(t, "SetJoinTokens", st.SetJoinTokens(ctx, map[string]*pb.MachineJoin{m: {Hash: "t1", ExpiresUnixNano: later}, other: {Hash: "t2", ExpiresUnixNano: now.UnixNano()}}))

	wantErr(t, "JoinMachine with the wrong secret", st.JoinMachine(ctx, m, accept("nope"), now, "c1"), state.ErrBadJoinToken, "", "not valid")
	must(t, "JoinMachine", st.JoinMachine(ctx, m, accept("t1"), now, "c1"))
	if h, err := st.CredentialHash(ctx, "machine-"+m); err != nil || h != "c1" {
		t.Errorf("CredentialHash(machine-%s) = %q, %v; want c1", m, h, err)
	}
	wantErr(t, "JoinMachine again with the token used", st.JoinMachine(ctx, m, accept("t1"), now, "c2"), state.ErrBadJoinToken, "", "used already")
	if h, _ := st.CredentialHash(ctx, "machine-"+m); h != "c1" {
		t.Errorf("after a refused join, machine %s's credential is %q, want c1", m, h)
	}

	wantErr(t, "JoinMachine with an expired token", st.JoinMachine(ctx, other, accept("t2"), now, "c3"), state.ErrBadJoinToken, "", "expired at")
	if _, err := st.CredentialHash(ctx, "machine-"+other); !errors.Is(err, state.ErrNotFound) {
		t.Errorf("after an expired token's join, machine %s has a credential (%v)", other, err)
	}
	// A new token replaces the expired one.
	must(t, "SetJoinTokens again", st.SetJoinTokens(ctx, map[string]*pb.MachineJoin{other: {Hash: "t3", ExpiresUnixNano: later}}))
	wantErr(t, "JoinMachine with the token replaced", st.JoinMachine(ctx, other, accept("t2"), now, "c3"), state.ErrBadJoinToken, "", "not valid")

	// A dead machine joins nothing; its removal takes its unused token.
	// (A status reported, it is not one that never joined, which a
	// destroy removes at once, token and all: it becomes dying.)
	must(t, "SetStatus", st.SetStatus(ctx, state.StatusMachine, other, &pb.Status{Status: "started"}))
	must(t, "DestroyMachine", st.DestroyMachine(ctx, other, state.DestroyOptions{}))
	must(t, "EnsureMachineDead", st.EnsureMachineDead(ctx, other))
	wantErr(t, "JoinMachine of a dead machine", st.JoinMachine(ctx, other, accept("t3"), now, "c3"), state.ErrRefused, "join", "is dead")
	wantErr(t, "SetJoinTokens of a dead machine", st.SetJoinTokens(ctx, map[string]*pb.MachineJoin{other: {Hash: "t4", ExpiresUnixNano: later}}), state.ErrRefused, "join", "is dead")
	must(t, "RemoveMachine", st.RemoveMachine(ctx, other))
	snap, err := st.Snapshot(ctx)
	must(t, "Snapshot", err)
	if _, ok := snap.Values[state.MachineJoinKey(other)]; ok {
		t.Errorf("machine %s's join token outlived it", other)
	}
}

// TestPresenceIsFencedToOneInstance: a machine's presence is held by one
// agent instance: another is refused while it is present, and takes it
// once it has gone; the instance itself may claim it again (reconnecting);
// the instance that follows the holder with the same data directory
// (naming it as its previous) takes it over at once.
func TestPresenceIsFencedToOneInstance(t *testing.T) {
	st, ctx := newState(t)
	const ttl = 10 * time.Second
	claim := func(instance, previous string) (*state.Presence, error) {
		return st.PresentAs(ctx, "machine-0", state.PresenceClaim{Instance: instance, Previous: previous}, ttl)
	}
	a, err := claim("a", "")
	must(t, "PresentAs(a)", err)
	_, err = claim("b", "")
	wantErr(t, "PresentAs(b) while a is present", err, state.ErrRefused, "presence", `another agent of machine 0 is present (instance "a")`)
	_, err = claim("b", "x")
	wantErr(t, "PresentAs(b, after x) while a is present", err, state.ErrRefused, "presence", `instance "a"`)
	again, err := claim("a", "")
	must(t, "PresentAs(a) again, reconnecting", err)
	a.Close() // the first stream's end leaves the key the second put
	_, err = claim("b", "")
	wantErr(t, "PresentAs(b) while a is present again", err, state.ErrRefused, "presence", `instance "a"`)

	// a's next run takes over from it at once.
	a2, err := claim("a2", "a")
	must(t, "PresentAs(a2, after a)", err)
	again.Close()
	if p, err := st.Presences(ctx); err != nil || !p["machine-0"] {
		t.Errorf("after a's stream closed, a2's presence = %v, %v; want held", p, err)
	}
	_, err = claim("a", "")
	wantErr(t, "PresentAs(a) after a2 took over", err, state.ErrRefused, "presence", `instance "a2"`)
	a2.Close()
	b, err := claim("b", "")
	must(t, "PresentAs(b) once a2 has gone", err)
	b.Close()
	// An agent that names no instance is not fenced.
	u, err := st.Present(ctx, "machine-0", ttl)
	must(t, "Present", err)
	u.Close()
}

// TestCredentialsWhilePresent: an agent instance issues credentials only
// while it is its machine's present one.
func TestCredentialsWhilePresent(t *testing.T) {
	st, ctx := newState(t)
	addService(t, ctx, st, "app", appEndpoints)
	us := addUnits(t, ctx, st, "app", 1, state.Placement{})
	hashes := map[string]string{"unit-app/0": "h1"}
	machine := "machine-" + us[0].MachineId
	wantErr(t, "SetCredentialsWhilePresent with no agent present", st.SetCredentialsWhilePresent(ctx, hashes, machine, "a"), state.ErrRefused, "presence", "is not present")
	p, err := st.PresentAs(ctx, machine, state.PresenceClaim{Instance: "a"}, 10*time.Second)
	must(t, "PresentAs", err)
	defer p.Close()
	wantErr(t, "SetCredentialsWhilePresent of another instance", st.SetCredentialsWhilePresent(ctx, hashes, machine, "b"), state.ErrRefused, "presence", `another agent of machine `+us[0].MachineId+` is present (instance "a", not "b")`)
	if _, err := st.CredentialHash(ctx, "unit-app/0"); !errors.Is(err, state.ErrNotFound) {
		t.Errorf("a fenced instance's credential was stored (%v)", err)
	}
	must(t, "SetCredentialsWhilePresent", st.SetCredentialsWhilePresent(ctx, hashes, machine, "a"))
	if h, err := st.CredentialHash(ctx, "unit-app/0"); err != nil || h != "h1" {
		t.Errorf("CredentialHash(unit-app/0) = %q, %v; want h1", h, err)
	}
	wantErr(t, "SetCredentialsWhilePresent of a missing unit", st.SetCredentialsWhilePresent(ctx, map[string]string{"unit-app/9": "h"}, machine, "a"), state.ErrNotFound, "", "unit app/9 not found")
}
