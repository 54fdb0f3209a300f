package state

import (
	"context"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// The dashboard's one-time login links and its sessions are records of
// their user: dashboard-logins/<user>/<hash> and
// dashboard-sessions/<user>/<hash>, the hash (64 lowercase hex digits, a
// SHA-256) of the secret the link or the session's cookie carries, never
// the secret. Each is bound to a lease of its own, so that etcd removes
// those nobody ends; the expiry in the record is what counts (a lease's
// countdown starts again when etcd's leader changes). Using a link
// deletes it in the transaction that makes the session, so a link works
// once, on any controller. Removing a user deletes both prefixes in its
// transaction: its sessions end with it.
const (
	dashboardLoginsPrefix   = "dashboard-logins/"
	dashboardSessionsPrefix = "dashboard-sessions/"
)

// DashboardSessionKey is the key of a session, for watching it: the
// dashboard's live streams end when it goes.
func DashboardSessionKey(user, hash string) string {
	return dashboardSessionsPrefix + user + "/" + hash
}

func dashboardLoginKey(user, hash string) string { return dashboardLoginsPrefix + user + "/" + hash }

// MaxDashboardLoginsPerUser bounds the unused login links of a user, and
// MaxDashboardSessionsPerUser its sessions: a new session past it ends the
// oldest.
const (
	MaxDashboardLoginsPerUser   = 8
	MaxDashboardSessionsPerUser = 8
)

// MaxDashboardLoginTTL and MaxDashboardSessionTTL bound how long a link
// and a session may last.
const (
	MaxDashboardLoginTTL   = 10 * time.Minute
	MaxDashboardSessionTTL = 7 * 24 * time.Hour
)

// dashboardLinger is how long after its expiry a record may stay before
// its lease removes it.
const dashboardLinger = time.Minute

// validDashboardHash says whether h may name a link or a session.
func validDashboardHash(h string) bool {
	return len(h) == 64 && strings.Trim(h, "0123456789abcdef") == ""
}

func checkDashboardArgs(user, hash string) error {
	if err := checkUserName(user); err != nil {
		return err
	}
	if !validDashboardHash(hash) {
		return invalidf("invalid dashboard secret hash: want 64 lowercase hex digits")
	}
	return nil
}

// grantUntil grants a lease that ends dashboardLinger after expires.
func (s *State) grantUntil(ctx context.Context, expires time.Time) (int64, error) {
	ttl := time.Until(expires) + dashboardLinger
	g, err := s.lease.Grant(ctx, max(int64(ttl/time.Second), int64(dashboardLinger/time.Second)))
	if err != nil {
		return 0, fmt.Errorf("grant a lease: %w", err)
	}
	return int64(g.ID), nil
}

// AddDashboardLogin stores a one-time login link of the named user, a
// registered one, expiring at expires (at most MaxDashboardLoginTTL
// away); a user holds at most MaxDashboardLoginsPerUser unused links.
func (s *State) AddDashboardLogin(ctx context.Context, user, hash string, expires time.Time) error {
	if err := checkDashboardArgs(user, hash); err != nil {
		return err
	}
	if d := time.Until(expires); d <= 0 || d > MaxDashboardLoginTTL {
		return invalidf("dashboard login of %s: expiry %s away, want within %s", user, d.Round(time.Second), MaxDashboardLoginTTL)
	}
	lease, err := s.grantUntil(ctx, expires)
	if err != nil {
		return err
	}
	key := dashboardLoginKey(user, hash)
	err = s.apply(ctx, "store a dashboard login of user "+user, func(ctx context.Context) (*change, error) {
		r, err := s.read(ctx, get(UserKey(user)), getKeys(dashboardLoginsPrefix+user+"/", MaxDashboardLoginsPerUser+1))
		if err != nil {
			return nil, err
		}
		u, err := decode[pb.User](r.one(0))
		if err != nil {
			return nil, err
		}
		if u == nil || !u.v.Registered {
			return nil, notFoundf("user %s not found or not registered", user)
		}
		if n := len(r.all(1)); n >= MaxDashboardLoginsPerUser {
			return nil, refused("limit", "user %s has %d unused dashboard logins: at most %d, each valid for a minute", user, n, MaxDashboardLoginsPerUser)
		}
		c := &change{}
		c.ifMod(u.key, u.mod)
		c.ifAbsent(key)
		c.ifNoNewer(dashboardLoginsPrefix+user+"/", r.rev)
		c.putLeased(key, &pb.DashboardLogin{User: user, ExpiresUnixNano: expires.UnixNano()}, lease)
		return c, nil
	})
	if err != nil {
		_, _ = s.lease.Revoke(ctx, clientv3.LeaseID(lease))
	}
	return err
}

// UseDashboardLogin exchanges the named user's login link for a session,
// in one transaction: the link (unexpired at now) is deleted, the user is
// compared as read, and the session stored at sessionHash, expiring
// after ttl; past MaxDashboardSessionsPerUser, the oldest sessions end.
// A link missing, used already or expired is ErrNotFound, alike.
func (s *State) UseDashboardLogin(ctx context.Context, user, hash, sessionHash string, now time.Time, ttl time.Duration) (*pb.DashboardSession, error) {
	if err := checkDashboardArgs(user, hash); err != nil {
		return nil, err
	}
	if err := checkDashboardArgs(user, sessionHash); err != nil {
		return nil, err
	}
	if ttl <= 0 || ttl > MaxDashboardSessionTTL {
		return nil, invalidf("dashboard session of %s: lifetime %s, want up to %s", user, ttl, MaxDashboardSessionTTL)
	}
	sess := &pb.DashboardSession{User: user, CreatedUnixNano: now.UnixNano(), ExpiresUnixNano: now.Add(ttl).UnixNano()}
	lease, err := s.grantUntil(ctx, now.Add(ttl))
	if err != nil {
		return nil, err
	}
	sessions := dashboardSessionsPrefix + user + "/"
	err = s.apply(ctx, "log user "+user+" in to the dashboard", func(ctx context.Context) (*change, error) {
		r, err := s.read(ctx, get(dashboardLoginKey(user, hash)), get(UserKey(user)), getPrefix(sessions, MaxDashboardSessionsPerUser+1))
		if err != nil {
			return nil, err
		}
		l, err := decode[pb.DashboardLogin](r.one(0))
		if err != nil {
			return nil, err
		}
		if l == nil || !now.Before(time.Unix(0, l.v.ExpiresUnixNano)) {
			return nil, notFoundf("the dashboard login link is not valid: used already, expired, or never issued (ctl dashboard makes another)")
		}
		u, err := decode[pb.User](r.one(1))
		if err != nil {
			return nil, err
		}
		if u == nil || !u.v.Registered {
			return nil, notFoundf("user %s not found", user)
		}
		c := &change{}
		c.ifMod(l.key, l.mod)
		c.ifMod(u.key, u.mod)
		c.ifNoNewer(sessions, r.rev)
		c.del(l.key)
		// Oldest first: end the oldest until there is room for one more.
		type old struct {
			key     string
			created int64
		}
		var olds []old
		for _, kv := range r.all(2) {
			o, err := decode[pb.DashboardSession](kv)
			if err != nil {
				return nil, err
			}
			olds = append(olds, old{o.key, o.v.CreatedUnixNano})
		}
		for len(olds) >= MaxDashboardSessionsPerUser {
			i := 0
			for j := range olds {
				if olds[j].created < olds[i].created {
					i = j
				}
			}
			c.del(olds[i].key)
			olds = append(olds[:i], olds[i+1:]...)
		}
		c.putLeased(DashboardSessionKey(user, sessionHash), sess, lease)
		return c, nil
	})
	if err != nil {
		_, _ = s.lease.Revoke(ctx, clientv3.LeaseID(lease))
		return nil, err
	}
	return sess, nil
}

// DashboardSession reads the named user's session, unexpired at now;
// ErrNotFound when it is not there (ended, expired, its user removed).
func (s *State) DashboardSession(ctx context.Context, user, hash string, now time.Time) (*pb.DashboardSession, error) {
	if err := checkDashboardArgs(user, hash); err != nil {
		return nil, err
	}
	r, err := s.read(ctx, get(DashboardSessionKey(user, hash)))
	if err != nil {
		return nil, err
	}
	d, err := decode[pb.DashboardSession](r.one(0))
	if err != nil {
		return nil, err
	}
	if d == nil || !now.Before(time.Unix(0, d.v.ExpiresUnixNano)) {
		return nil, notFoundf("no dashboard session: logged out, expired, or its user removed")
	}
	return d.v, nil
}

// EndDashboardSession ends a session (logging out); ending one that is
// not there is no error.
func (s *State) EndDashboardSession(ctx context.Context, user, hash string) error {
	if err := checkDashboardArgs(user, hash); err != nil {
		return err
	}
	return s.apply(ctx, "end a dashboard session of user "+user, func(ctx context.Context) (*change, error) {
		c := &change{}
		c.del(DashboardSessionKey(user, hash))
		return c, nil
	})
}

// checkDashboard checks the login links and the sessions: each at the key
// of its user, who exists, with an expiry; at most the bound of each a
// user.
func checkDashboard(snap *Snapshot, bad func(string, ...any)) {
	count := map[string]int{}
	for k, v := range snap.Values {
		var prefix string
		var msg interface {
			proto.Message
			GetUser() string
		}
		switch {
		case strings.HasPrefix(k, dashboardLoginsPrefix):
			prefix, msg = dashboardLoginsPrefix, &pb.DashboardLogin{}
		case strings.HasPrefix(k, dashboardSessionsPrefix):
			prefix, msg = dashboardSessionsPrefix, &pb.DashboardSession{}
		default:
			continue
		}
		user, hash, ok := strings.Cut(strings.TrimPrefix(k, prefix), "/")
		if !ok || !validDashboardHash(hash) {
			bad("%s: not <user>/<hash>", k)
			continue
		}
		if err := proto.Unmarshal(v, msg); err != nil {
			bad("%s: undecodable value: %v", k, err)
			continue
		}
		if msg.GetUser() != user {
			bad("%s holds user %q", k, msg.GetUser())
		}
		if _, ok := snap.Values[UserKey(user)]; !ok {
			bad("%s: its user %s does not exist", k, user)
		}
		var exp int64
		switch m := msg.(type) {
		case *pb.DashboardLogin:
			exp = m.ExpiresUnixNano
		case *pb.DashboardSession:
			exp = m.ExpiresUnixNano
			if m.CreatedUnixNano == 0 || m.CreatedUnixNano >= exp {
				bad("%s: created %d, expires %d", k, m.CreatedUnixNano, exp)
			}
		}
		if exp == 0 {
			bad("%s has no expiry", k)
		}
		count[prefix+user]++
	}
	for k, n := range count {
		limit := MaxDashboardSessionsPerUser
		if strings.HasPrefix(k, dashboardLoginsPrefix) {
			limit = MaxDashboardLoginsPerUser
		}
		if n > limit {
			bad("%s: %d records, over the limit of %d", k, n, limit)
		}
	}
}
