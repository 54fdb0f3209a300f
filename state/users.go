package state

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/lifelinehq/lifeline/internal/names"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// The users of a model (its operators) are users/<name>, each with its
// role; one who has yet to register has a registrations/<name> too, the
// hash of its registration token's one-time secret. A registered user's
// credential is credentials/<tag> (names.UserTag), which goes with the
// user: removing the user revokes it in the same transaction.
const (
	usersPrefix         = "users/"
	registrationsPrefix = "registrations/"
)

// UserKey is the key of the named user.
func UserKey(name string) string { return usersPrefix + name }

// RegistrationKey is the key of the named user's pending registration.
func RegistrationKey(name string) string { return registrationsPrefix + name }

// UsersPrefix is where the users are, for watching them.
const UsersPrefix = usersPrefix

// MaxUsers bounds the users of a model, registered or not (so the
// registrations too): each costs a record read by every check of the last
// admin (O1) and by ListUsers.
const MaxUsers = 1000

// MaxRegistrationTime bounds how long a registration token may work.
const MaxRegistrationTime = 30 * 24 * time.Hour

// checkRole says whether role is one a user may have.
func checkRole(role pb.UserRole) error {
	switch role {
	case pb.UserRole_USER_ROLE_VIEWER, pb.UserRole_USER_ROLE_OPERATOR, pb.UserRole_USER_ROLE_ADMIN:
		return nil
	}
	return invalidf("invalid role %v: want viewer, operator or admin", role)
}

// RoleName is role as ctl names it: viewer, operator, admin.
func RoleName(role pb.UserRole) string {
	return strings.ToLower(strings.TrimPrefix(role.String(), "USER_ROLE_"))
}

// ParseRole is the role named viewer, operator or admin.
func ParseRole(name string) (pb.UserRole, error) {
	for _, r := range []pb.UserRole{pb.UserRole_USER_ROLE_VIEWER, pb.UserRole_USER_ROLE_OPERATOR, pb.UserRole_USER_ROLE_ADMIN} {
		if RoleName(r) == name {
			return r, nil
		}
	}
	return 0, invalidf("invalid role %q: want viewer, operator or admin", name)
}

func checkUserName(name string) error { return asInvalid(names.CheckUser(name)) }

// NewUser describes a user for AddUser.
type NewUser struct {
	Name string
	Role pb.UserRole
	// CreatedBy is the name of the user adding it.
	CreatedBy string
	// SecretHash is the hash of its registration token's one-time secret,
	// and Expires when the token stops working.
	SecretHash string
	Expires    time.Time
}

// AddUser adds a user who has yet to register, with its registration. The
// name must be free, and the model must hold fewer than MaxUsers users.
func (s *State) AddUser(ctx context.Context, nu NewUser) (*pb.User, error) {
	if err := checkUserName(nu.Name); err != nil {
		return nil, err
	}
	if err := checkRole(nu.Role); err != nil {
		return nil, err
	}
	now := s.now()
	switch {
	case nu.SecretHash == "":
		return nil, invalidf("user %s: no registration secret", nu.Name)
	case !nu.Expires.After(now):
		return nil, invalidf("user %s: the registration would expire before it starts", nu.Name)
	case nu.Expires.Sub(now) > MaxRegistrationTime:
		return nil, invalidf("user %s: a registration works for %s at most", nu.Name, MaxRegistrationTime)
	}
	u := &pb.User{Name: nu.Name, Role: nu.Role, CreatedBy: nu.CreatedBy, CreatedUnixNano: now.UnixNano()}
	err := s.apply(ctx, "add user "+nu.Name, func(ctx context.Context) (*change, error) {
		r, err := s.read(ctx, getExists(UserKey(nu.Name)), getCount(usersPrefix))
		if err != nil {
			return nil, err
		}
		if r.ranges[0].Count > 0 {
			return nil, existsf("user %s already exists", nu.Name)
		}
		if n := r.ranges[1].Count; n >= MaxUsers {
			return nil, fullf("the model has %d users, the most it may have: remove one first", n)
		}
		c := &change{}
		c.ifAbsent(UserKey(nu.Name))
		// No user added since the count: the bound holds.
		c.ifNoNewer(usersPrefix, r.rev)
		c.put(UserKey(nu.Name), u)
		c.put(RegistrationKey(nu.Name), &pb.Registration{SecretHash: nu.SecretHash, ExpiresUnixNano: nu.Expires.UnixNano()})
		return c, nil
	})
	if err != nil {
		return nil, err
	}
	return u, nil
}

// Register binds the named user's credential (the hash of a secret its
// holder made) and ends its registration, once: prove checks the
// registration's one-time secret. A user without a registration, one
// whose registration expired, and one prove refuses are all refused with
// the same ErrUnauthenticated, which tells an unauthenticated caller
// nothing about which users exist.
func (s *State) Register(ctx context.Context, name string, prove func(*pb.Registration) bool, credentialHash string) (*pb.User, error) {
	bad := &kindError{kind: ErrUnauthenticated, msg: fmt.Sprintf("registration of user %q is not valid (unknown, used or expired) or its secret is wrong", name)}
	if checkUserName(name) != nil {
		return nil, bad
	}
	if credentialHash == "" {
		return nil, invalidf("registration of user %s: no credential", name)
	}
	var out *pb.User
	err := s.apply(ctx, "register user "+name, func(ctx context.Context) (*change, error) {
		r, err := s.read(ctx, get(UserKey(name)), get(RegistrationKey(name)))
		if err != nil {
			return nil, err
		}
		u, err := decode[pb.User](r.one(0))
		if err != nil {
			return nil, err
		}
		reg, err := decode[pb.Registration](r.one(1))
		if err != nil {
			return nil, err
		}
		now := s.now()
		if u == nil || reg == nil || u.v.Registered || now.UnixNano() >= reg.v.ExpiresUnixNano || !prove(reg.v) {
			return nil, bad
		}
		next := protoClone(u.v)
		next.Registered, next.RegisteredUnixNano = true, now.UnixNano()
		c := &change{}
		c.ifMod(u.key, u.mod)
		c.ifMod(reg.key, reg.mod)
		c.del(reg.key)
		c.put(u.key, next)
		c.putRaw(credentialKey(names.UserTag(name)), credentialHash)
		out = next
		return c, nil
	})
	return out, err
}

// SetUserCredential stores the hash of the named user's new secret,
// replacing (and so revoking) its credential. The user must have
// registered.
func (s *State) SetUserCredential(ctx context.Context, name, hash string) error {
	if err := checkUserName(name); err != nil {
		return err
	}
	if hash == "" {
		return invalidf("user %s: no credential", name)
	}
	return s.apply(ctx, "set the credential of user "+name, func(ctx context.Context) (*change, error) {
		r, err := s.read(ctx, get(UserKey(name)))
		if err != nil {
			return nil, err
		}
		u, err := decode[pb.User](r.one(0))
		if err != nil {
			return nil, err
		}
		if u == nil {
			return nil, notFoundf("user %s not found", name)
		}
		if !u.v.Registered {
			return nil, refused("O2", "user %s has yet to register", name)
		}
		c := &change{}
		c.ifMod(u.key, u.mod)
		c.putRaw(credentialKey(names.UserTag(name)), hash)
		return c, nil
	})
}

// usersView is every user as read, for the rules that look at all of them.
type usersView struct {
	rev   int64
	users []*record[*pb.User]
}

func (s *State) readUsers(ctx context.Context, extra ...getOp) (*usersView, *reads, error) {
	r, err := s.read(ctx, append([]getOp{getPrefix(usersPrefix, MaxUsers+1)}, extra...)...)
	if err != nil {
		return nil, nil, err
	}
	v := &usersView{rev: r.rev}
	for _, kv := range r.all(0) {
		u, err := decode[pb.User](kv)
		if err != nil {
			return nil, nil, err
		}
		v.users = append(v.users, u)
	}
	return v, r.from(1), nil
}

func (v *usersView) find(name string) *record[*pb.User] {
	for _, u := range v.users {
		if u.v.Name == name {
			return u
		}
	}
	return nil
}

// keepAnAdmin is O1: a change that takes user u's admin role away (its
// removal, or another role) needs another registered admin, which it keeps
// as a witness: two admins removing each other at once cannot both go.
func (v *usersView) keepAnAdmin(c *change, u *record[*pb.User], what string) error {
	if u.v.Role != pb.UserRole_USER_ROLE_ADMIN || !u.v.Registered {
		return nil
	}
	for _, w := range v.users {
		if w != u && w.v.Role == pb.UserRole_USER_ROLE_ADMIN && w.v.Registered {
			c.ifMod(w.key, w.mod)
			return nil
		}
	}
	return refused("O1", "user %s is the last admin: it cannot be %s (make another user an admin first)", u.v.Name, what)
}

// RemoveUser removes the named user, its credential, any registration it
// has and its dashboard logins and sessions, in one transaction: the
// credential and the sessions stop working at once. The last registered
// admin is not removed (O1).
func (s *State) RemoveUser(ctx context.Context, name string) error {
	if err := checkUserName(name); err != nil {
		return err
	}
	return s.apply(ctx, "remove user "+name, func(ctx context.Context) (*change, error) {
		v, _, err := s.readUsers(ctx)
		if err != nil {
			return nil, err
		}
		u := v.find(name)
		if u == nil {
			return nil, notFoundf("user %s not found", name)
		}
		c := &change{}
		if err := v.keepAnAdmin(c, u, "removed"); err != nil {
			return nil, err
		}
		c.ifMod(u.key, u.mod)
		c.del(u.key)
		c.del(RegistrationKey(name))
		c.del(credentialKey(names.UserTag(name)))
		// Its dashboard links and sessions end with it.
		c.delPrefix(dashboardLoginsPrefix + name + "/")
		c.delPrefix(dashboardSessionsPrefix + name + "/")
		return c, nil
	})
}

// SetUserRole gives the named user a role. The last registered admin is
// not given another (O1).
func (s *State) SetUserRole(ctx context.Context, name string, role pb.UserRole) (*pb.User, error) {
	if err := checkUserName(name); err != nil {
		return nil, err
	}
	if err := checkRole(role); err != nil {
		return nil, err
	}
	var out *pb.User
	err := s.apply(ctx, "set the role of user "+name, func(ctx context.Context) (*change, error) {
		v, _, err := s.readUsers(ctx)
		if err != nil {
			return nil, err
		}
		u := v.find(name)
		if u == nil {
			return nil, notFoundf("user %s not found", name)
		}
		out = u.v
		if u.v.Role == role {
			return nil, errNothingToDo
		}
		c := &change{}
		if role != pb.UserRole_USER_ROLE_ADMIN {
			if err := v.keepAnAdmin(c, u, "made "+RoleName(role)); err != nil {
				return nil, err
			}
		}
		next := protoClone(u.v)
		next.Role = role
		c.ifMod(u.key, u.mod)
		c.put(u.key, next)
		out = next
		return c, nil
	})
	return out, err
}

// User returns the named user.
func (s *State) User(ctx context.Context, name string) (*pb.User, error) {
	if err := checkUserName(name); err != nil {
		return nil, err
	}
	r, err := s.read(ctx, get(UserKey(name)))
	if err != nil {
		return nil, err
	}
	u, err := decode[pb.User](r.one(0))
	if err != nil {
		return nil, err
	}
	if u == nil {
		return nil, notFoundf("user %s not found", name)
	}
	return u.v, nil
}

// UserInfo is a user with its pending registration, if any.
type UserInfo struct {
	User *pb.User
	// Registration is nil once the user has registered.
	Registration *pb.Registration
}

// Users returns every user, by name, with its pending registration.
func (s *State) Users(ctx context.Context) ([]UserInfo, error) {
	v, r, err := s.readUsers(ctx, getPrefix(registrationsPrefix, MaxUsers+1))
	if err != nil {
		return nil, err
	}
	regs := map[string]*pb.Registration{}
	for _, kv := range r.all(0) {
		reg, err := decode[pb.Registration](kv)
		if err != nil {
			return nil, err
		}
		regs[strings.TrimPrefix(reg.key, registrationsPrefix)] = reg.v
	}
	out := make([]UserInfo, 0, len(v.users))
	for _, u := range v.users {
		out = append(out, UserInfo{User: u.v, Registration: regs[u.v.Name]})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].User.Name < out[j].User.Name })
	return out, nil
}

// BootstrapAdmin makes sure the model has its first user, admin, with the
// admin role: a model without users gets it (a model made before there
// were users: its operator's credential, credentials/admin, is then the
// user admin's). With a hash, it also stores that as the user admin's
// credential, making the user again (an admin, registered) if it was
// removed or demoted: the controller does so when the client config it
// writes is missing at its start, the recovery of a lost admin credential.
func (s *State) BootstrapAdmin(ctx context.Context, hash string) error {
	return s.apply(ctx, "bootstrap the user admin", func(ctx context.Context) (*change, error) {
		v, _, err := s.readUsers(ctx)
		if err != nil {
			return nil, err
		}
		u := v.find(names.AdminUser)
		if hash == "" && len(v.users) > 0 {
			return nil, errNothingToDo
		}
		now := s.now().UnixNano()
		next := &pb.User{Name: names.AdminUser, CreatedUnixNano: now}
		c := &change{}
		if u != nil {
			next = protoClone(u.v)
			c.ifMod(u.key, u.mod)
		} else {
			c.ifAbsent(UserKey(names.AdminUser))
		}
		if len(v.users) == 0 {
			c.ifEmpty(usersPrefix)
		}
		if !next.Registered {
			next.Registered, next.RegisteredUnixNano = true, now
		}
		next.Role = pb.UserRole_USER_ROLE_ADMIN
		c.put(UserKey(names.AdminUser), next)
		c.del(RegistrationKey(names.AdminUser))
		if hash != "" {
			c.putRaw(credentialKey(names.AdminTag), hash)
		}
		return c, nil
	})
}
