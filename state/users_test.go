package state_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

const (
	viewer   = pb.UserRole_USER_ROLE_VIEWER
	operator = pb.UserRole_USER_ROLE_OPERATOR
	admin    = pb.UserRole_USER_ROLE_ADMIN
)

// addUser adds a user and registers it with credential hash "h-<name>",
// its one-time secret "s-<name>".
func addUser(t *testing.T, ctx context.Context, st *state.State, name string, role pb.UserRole, now time.Time) {
	t.Helper()
	_, err := st.AddUser(ctx, state.NewUser{Name: name, Role: role, CreatedBy: "admin", SecretHash: "s-" + name, Expires: now.Add(time.Hour)})
	must(t, "AddUser "+name, err)
	_, err = st.Register(ctx, name, secretIs("s-"+name), "h-"+name)
	must(t, "Register "+name, err)
}

func secretIs(s string) func(*pb.Registration) bool {
	return func(r *pb.Registration) bool { return r.SecretHash == s }
}

func TestBootstrapAdminMakesTheFirstUserAndKeepsItsCredential(t *testing.T) {
	st, ctx := newState(t)
	// A model from before users: the operator's credential alone.
	must(t, "BootstrapAdmin", st.BootstrapAdmin(ctx, "old"))
	must(t, "BootstrapAdmin again, without a hash", st.BootstrapAdmin(ctx, ""))
	u, err := st.User(ctx, "admin")
	must(t, "User admin", err)
	if u.Role != admin || !u.Registered || u.CreatedBy != "" {
		t.Errorf("User(admin) = %v, want a registered admin made by nobody", u)
	}
	if h, err := st.CredentialHash(ctx, "admin"); err != nil || h != "old" {
		t.Errorf("CredentialHash(admin) = %q, %v; want old (kept)", h, err)
	}
	// The recovery of a lost client config: admin again, a new credential.
	st2, ctx2 := newState(t)
	must(t, "BootstrapAdmin", st2.BootstrapAdmin(ctx2, ""))
	addUser(t, ctx2, st2, "alice", admin, time.Now())
	must(t, "SetUserRole", func() error { _, err := st2.SetUserRole(ctx2, "admin", viewer); return err }())
	must(t, "BootstrapAdmin with a new credential", st2.BootstrapAdmin(ctx2, "new"))
	if u, _ := st2.User(ctx2, "admin"); u.GetRole() != admin {
		t.Errorf("after the recovery, admin's role is %v, want admin", u.GetRole())
	}
	if h, _ := st2.CredentialHash(ctx2, "admin"); h != "new" {
		t.Errorf("after the recovery, admin's credential is %q, want new", h)
	}
}

func TestRegistrationWorksOnceAndNotAfterItExpires(t *testing.T) {
	st, ctx, clk := newClockedState(t)
	must(t, "BootstrapAdmin", st.BootstrapAdmin(ctx, ""))
	for _, name := range []string{"alice", "bob", "carol"} {
		_, err := st.AddUser(ctx, state.NewUser{Name: name, Role: operator, CreatedBy: "admin", SecretHash: "s-" + name, Expires: clk.Now().Add(time.Hour)})
		must(t, "AddUser "+name, err)
	}
	_, err := st.AddUser(ctx, state.NewUser{Name: "alice", Role: operator, SecretHash: "x", Expires: clk.Now().Add(time.Hour)})
	wantErr(t, "AddUser alice again", err, state.ErrAlreadyExists, "", "user alice already exists")
	if _, err := st.CredentialHash(ctx, "user-alice"); !errors.Is(err, state.ErrNotFound) {
		t.Errorf("a user yet to register has a credential (%v)", err)
	}
	_, err = st.Register(ctx, "alice", secretIs("wrong"), "h")
	wantErr(t, "Register with a wrong secret", err, state.ErrUnauthenticated, "", `registration of user "alice" is not valid`)
	u, err := st.Register(ctx, "alice", secretIs("s-alice"), "h-alice")
	must(t, "Register alice", err)
	if !u.Registered || u.Role != operator {
		t.Errorf("Register = %v, want alice registered, an operator", u)
	}
	if h, _ := st.CredentialHash(ctx, "user-alice"); h != "h-alice" {
		t.Errorf("alice's credential = %q, want h-alice", h)
	}
	_, err = st.Register(ctx, "alice", secretIs("s-alice"), "h-again")
	wantErr(t, "Register alice twice", err, state.ErrUnauthenticated, "", "not valid")
	if h, _ := st.CredentialHash(ctx, "user-alice"); h != "h-alice" {
		t.Errorf("after a second registration, alice's credential = %q, want h-alice (unchanged)", h)
	}
	_, err = st.Register(ctx, "dave", secretIs("s-dave"), "h")
	wantErr(t, "Register an unknown user", err, state.ErrUnauthenticated, "", "not valid")

	clk.Advance(time.Hour)
	_, err = st.Register(ctx, "bob", secretIs("s-bob"), "h-bob")
	wantErr(t, "Register bob after expiry", err, state.ErrUnauthenticated, "", "not valid")
	n, err := st.PruneRegistrations(ctx)
	must(t, "PruneRegistrations", err)
	if n != 2 {
		t.Errorf("PruneRegistrations removed %d, want 2 (bob and carol)", n)
	}
	users, err := st.Users(ctx)
	must(t, "Users", err)
	var got []string
	for _, u := range users {
		got = append(got, fmt.Sprintf("%s:%s:%v", u.User.Name, state.RoleName(u.User.Role), u.Registration != nil))
	}
	if fmt.Sprint(got) != "[admin:admin:false alice:operator:false]" {
		t.Errorf("Users = %v, want admin and alice, registered", got)
	}
}

func TestTheLastAdminStays(t *testing.T) {
	st, ctx := newState(t)
	must(t, "BootstrapAdmin", st.BootstrapAdmin(ctx, "h"))
	now := time.Now()
	addUser(t, ctx, st, "alice", operator, now)
	_, err := st.AddUser(ctx, state.NewUser{Name: "pending", Role: admin, SecretHash: "s", Expires: now.Add(time.Hour)})
	must(t, "AddUser pending", err)

	wantErr(t, "RemoveUser admin", st.RemoveUser(ctx, "admin"), state.ErrRefused, "O1", "user admin is the last admin")
	_, err = st.SetUserRole(ctx, "admin", operator)
	wantErr(t, "demote admin", err, state.ErrRefused, "O1", "cannot be made operator")
	_, err = st.SetUserRole(ctx, "alice", admin)
	must(t, "promote alice", err)
	_, err = st.SetUserRole(ctx, "admin", viewer)
	must(t, "demote admin with alice an admin", err)
	wantErr(t, "RemoveUser alice", st.RemoveUser(ctx, "alice"), state.ErrRefused, "O1", "user alice is the last admin")
	must(t, "RemoveUser pending (an admin yet to register)", st.RemoveUser(ctx, "pending"))
	must(t, "RemoveUser admin (a viewer now)", st.RemoveUser(ctx, "admin"))
	if _, err := st.CredentialHash(ctx, "admin"); !errors.Is(err, state.ErrNotFound) {
		t.Errorf("a removed user's credential is still there (%v)", err)
	}
	wantErr(t, "RemoveUser admin again", st.RemoveUser(ctx, "admin"), state.ErrNotFound, "", "user admin not found")
	_, err = st.SetUserRole(ctx, "nobody", viewer)
	wantErr(t, "SetUserRole of nobody", err, state.ErrNotFound, "", "user nobody not found")
	_, err = st.SetUserRole(ctx, "alice", pb.UserRole_USER_ROLE_UNSPECIFIED)
	wantErr(t, "SetUserRole to no role", err, state.ErrInvalid, "", "invalid role")
}

// Two admins removing each other at once: one goes, the other stays (the
// witness of the one that commits first is the other's target).
func TestTwoAdminsCannotRemoveEachOtherAtOnce(t *testing.T) {
	for i := range 10 {
		st, ctx := newState(t)
		must(t, "BootstrapAdmin", st.BootstrapAdmin(ctx, "h"))
		addUser(t, ctx, st, "alice", admin, time.Now())
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for j, name := range []string{"admin", "alice"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[j] = st.RemoveUser(ctx, name)
			}()
		}
		wg.Wait()
		refusedN := 0
		for _, err := range errs {
			switch {
			case errors.Is(err, state.ErrRefused):
				refusedN++
			case err != nil:
				t.Fatalf("round %d: RemoveUser = %v", i, err)
			}
		}
		if refusedN != 1 {
			t.Fatalf("round %d: RemoveUser of both admins at once = %v, want exactly one refused", i, errs)
		}
	}
}

func TestUsersAreBounded(t *testing.T) {
	st, ctx, clk := newClockedState(t)
	must(t, "BootstrapAdmin", st.BootstrapAdmin(ctx, ""))
	for _, tt := range []struct {
		name   string
		nu     state.NewUser
		errMsg string
	}{
		{"bad name", state.NewUser{Name: "Alice", Role: viewer, SecretHash: "s", Expires: clk.Now().Add(time.Hour)}, "invalid user name"},
		{"no role", state.NewUser{Name: "alice", SecretHash: "s", Expires: clk.Now().Add(time.Hour)}, "invalid role"},
		{"no secret", state.NewUser{Name: "alice", Role: viewer, Expires: clk.Now().Add(time.Hour)}, "no registration secret"},
		{"expired", state.NewUser{Name: "alice", Role: viewer, SecretHash: "s", Expires: clk.Now()}, "expire before it starts"},
		{"too long", state.NewUser{Name: "alice", Role: viewer, SecretHash: "s", Expires: clk.Now().Add(state.MaxRegistrationTime + time.Second)}, "works for"},
	} {
		_, err := st.AddUser(ctx, tt.nu)
		wantErr(t, "AddUser with "+tt.name, err, state.ErrInvalid, "", tt.errMsg)
	}
}
