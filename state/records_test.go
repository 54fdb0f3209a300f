package state_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

func TestCharmsAreRevisionedAndContentAddressed(t *testing.T) {
	st, ctx := newState(t)
	big := bytes.Repeat([]byte("lifeline"), 400_000) // 3.2 MB: four chunks
	c1, err := st.AddCharm(ctx, &pb.Charm{Name: "kv", Summary: "a kv store"}, big)
	must(t, "AddCharm", err)
	if c1.Revision != 1 || c1.Chunks != 4 || c1.Size != int64(len(big)) {
		t.Errorf("AddCharm = revision %d, %d chunks, %d bytes; want 1, 4, %d", c1.Revision, c1.Chunks, c1.Size, len(big))
	}
	again, err := st.AddCharm(ctx, &pb.Charm{Name: "kv"}, big)
	must(t, "AddCharm again", err)
	if again.Revision != c1.Revision {
		t.Errorf("the same archive again got revision %d, want %d", again.Revision, c1.Revision)
	}
	c2, err := st.AddCharm(ctx, &pb.Charm{Name: "kv"}, []byte("other"))
	must(t, "AddCharm other", err)
	if c2.Revision != 2 {
		t.Errorf("a new archive got revision %d, want 2", c2.Revision)
	}
	if latest, err := st.Charm(ctx, "kv", 0); err != nil || latest.Revision != 2 {
		t.Errorf("Charm(kv, latest) = %v, %v; want revision 2", latest, err)
	}
	got, err := st.CharmArchive(ctx, c1)
	must(t, "CharmArchive", err)
	if !bytes.Equal(got, big) {
		t.Errorf("CharmArchive returned %d bytes, not the %d stored", len(got), len(big))
	}
	_, err = st.AddCharm(ctx, &pb.Charm{Name: "kv", Sha256: "00"}, []byte("x"))
	wantErr(t, "AddCharm with a wrong sha", err, state.ErrInvalid, "", "archive sha256 is")
	_, err = st.Charm(ctx, "kv", 7)
	wantErr(t, "Charm(kv, 7)", err, state.ErrNotFound, "", "charm kv revision 7 not found")
}

// TestCredentialsSetTogether: SetCredentials stores all its credentials
// in one transaction, or none when a holder is missing.
func TestCredentialsSetTogether(t *testing.T) {
	st, ctx := newState(t)
	addService(t, ctx, st, "app", appEndpoints)
	us := addUnits(t, ctx, st, "app", 3, state.Placement{})
	before := st.Stats().Txns
	must(t, "SetCredentials of three units", st.SetCredentials(ctx, map[string]string{"unit-app/0": "a", "unit-app/1": "b", "unit-app/2": "c"}))
	if n := st.Stats().Txns - before; n != 1 {
		t.Errorf("SetCredentials of three units took %d transactions, want 1", n)
	}
	for u, want := range map[string]string{"unit-app/0": "a", "unit-app/1": "b", "unit-app/2": "c"} {
		if h, err := st.CredentialHash(ctx, u); err != nil || h != want {
			t.Errorf("CredentialHash(%s) = %q, %v; want %q", u, h, err, want)
		}
	}
	err := st.SetCredentials(ctx, map[string]string{"unit-app/0": "x", "machine-" + us[0].MachineId: "y", "unit-app/7": "z", "unit-app/9": "z"})
	wantErr(t, "SetCredentials with missing units", err, state.ErrNotFound, "", "unit app/7 not found")
	if h, _ := st.CredentialHash(ctx, "unit-app/0"); h != "a" {
		t.Errorf("after a refused SetCredentials, unit-app/0's hash is %q, want a (unchanged)", h)
	}
	if _, err := st.CredentialHash(ctx, "machine-"+us[0].MachineId); !errors.Is(err, state.ErrNotFound) {
		t.Errorf("after a refused SetCredentials, the machine has a credential (%v)", err)
	}
	many := map[string]string{}
	for i := range state.MaxCredentialsAtOnce + 1 {
		many[fmt.Sprintf("unit-app/%d", i)] = "h"
	}
	wantErr(t, "SetCredentials of too many", st.SetCredentials(ctx, many), state.ErrInvalid, "", fmt.Sprintf("at most %d", state.MaxCredentialsAtOnce))
}

func TestCredentialsGoWithTheirEntity(t *testing.T) {
	st, ctx := newState(t)
	addService(t, ctx, st, "app", appEndpoints)
	us := addUnits(t, ctx, st, "app", 1, state.Placement{})
	m := us[0].MachineId
	must(t, "BootstrapAdmin", st.BootstrapAdmin(ctx, "h0"))
	wantErr(t, "SetCredential of a user", st.SetCredential(ctx, "admin", "h"), state.ErrInvalid, "", "its own to set")
	must(t, "SetCredential machine", st.SetCredential(ctx, "machine-"+m, "h1"))
	must(t, "SetCredential unit", st.SetCredential(ctx, "unit-app/0", "h2"))
	wantErr(t, "SetCredential of a missing unit", st.SetCredential(ctx, "unit-app/9", "h"), state.ErrNotFound, "", "unit app/9 not found")
	wantErr(t, "SetCredential of a bad tag", st.SetCredential(ctx, "unit-app-9", "h"), state.ErrInvalid, "", "invalid tag")
	if h, err := st.CredentialHash(ctx, "unit-app/0"); err != nil || h != "h2" {
		t.Errorf("CredentialHash(unit-app/0) = %q, %v; want h2", h, err)
	}
	must(t, "SetStatus", st.SetStatus(ctx, state.StatusUnitAgent, "app/0", &pb.Status{Status: "error"}))
	must(t, "SetResolved", st.SetResolved(ctx, "app/0", pb.ResolvedMode_RESOLVED_MODE_RETRY))
	if mode, err := st.Resolved(ctx, "app/0"); err != nil || mode != pb.ResolvedMode_RESOLVED_MODE_RETRY {
		t.Errorf("Resolved = %v, %v; want retry", mode, err)
	}
	must(t, "DestroyUnit", st.DestroyUnit(ctx, "app/0", state.DestroyOptions{}))
	must(t, "EnsureUnitDead", st.EnsureUnitDead(ctx, "app/0"))
	must(t, "RemoveUnit", st.RemoveUnit(ctx, "app/0"))
	if _, err := st.CredentialHash(ctx, "unit-app/0"); !errors.Is(err, state.ErrNotFound) {
		t.Errorf("CredentialHash of a removed unit = %v, want not found (revoked)", err)
	}
	if mode, _ := st.Resolved(ctx, "app/0"); mode != pb.ResolvedMode_RESOLVED_MODE_UNSPECIFIED {
		t.Errorf("Resolved of a removed unit = %v, want none", mode)
	}
	must(t, "DestroyMachine", st.DestroyMachine(ctx, m, state.DestroyOptions{}))
	must(t, "EnsureMachineDead", st.EnsureMachineDead(ctx, m))
	must(t, "RemoveMachine", st.RemoveMachine(ctx, m))
	if _, err := st.CredentialHash(ctx, "machine-"+m); !errors.Is(err, state.ErrNotFound) {
		t.Errorf("CredentialHash of a removed machine = %v, want not found", err)
	}
	if h, err := st.CredentialHash(ctx, "admin"); err != nil || h != "h0" {
		t.Errorf("CredentialHash(admin) = %q, %v; want h0", h, err)
	}
}

func TestModelReadsEverythingAtOneRevision(t *testing.T) {
	st, ctx := newState(t)
	addService(t, ctx, st, "app", appEndpoints)
	addService(t, ctx, st, "kv", kvEndpoints)
	addUnits(t, ctx, st, "app", 11, state.Placement{})
	addUnits(t, ctx, st, "kv", 1, state.Placement{})
	rel := relate(t, ctx, st, "app", "kv")
	must(t, "EnterScope", st.EnterScope(ctx, rel.Id, "app/10", nil))
	must(t, "EnterScope", st.EnterScope(ctx, rel.Id, "app/2", nil))
	must(t, "SetStatus", st.SetStatus(ctx, state.StatusUnit, "app/2", &pb.Status{Status: "active"}))
	m, err := st.Model(ctx)
	must(t, "Model", err)
	if len(m.Machines) != 12 || m.Machines[10].Id != "10" || len(m.Units) != 12 || m.Units[2].Name != "app/2" || m.Units[10].Name != "app/10" {
		t.Errorf("Model: %d machines (11th %s), %d units (3rd %s, 11th %s); want 12, 10, 12, app/2, app/10",
			len(m.Machines), m.Machines[10].Id, len(m.Units), m.Units[2].Name, m.Units[10].Name)
	}
	if got := m.Scopes[rel.Id]; len(got) != 2 || got[0] != "app/2" || got[1] != "app/10" {
		t.Errorf("Scopes[%d] = %v, want [app/2 app/10]", rel.Id, got)
	}
	if st := m.Status(state.StatusUnit, "app/2"); st.GetStatus() != "active" {
		t.Errorf("Status(unit, app/2) = %v, want active", st)
	}
	if len(m.Relations) != 2 { // app:db kv:server, and kv's peer relation
		t.Errorf("Relations = %d, want 2", len(m.Relations))
	}
}
