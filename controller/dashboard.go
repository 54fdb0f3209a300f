package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/url"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lifelinehq/lifeline/internal/names"
	"github.com/lifelinehq/lifeline/internal/pki"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// The controller's side of the dashboard (package dashboard): the login
// links ctl dashboard asks for, and CallAs, through which every page and
// action of a logged-in user is the same call, authorized by the same
// table (operatorAccess) and audited the same way, as over gRPC.

// DashboardLoginTTL is how long a login link works.
const DashboardLoginTTL = 60 * time.Second

// Login links are rate-limited per user, besides state's bound of unused
// links a user.
const (
	dashboardLoginRate  = 1 // a second
	dashboardLoginBurst = 5
)

// DashboardDigest is what state keeps of a dashboard secret (a link's or
// a session's): its SHA-256, in hex. The secrets are 256 random bits, so
// a plain digest is enough to keep a reader of etcd from using them.
func DashboardDigest(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// dashboardLogins rate-limits the login links each user asks for.
type dashboardLogins struct {
	mu     sync.Mutex
	byUser map[string]*rate.Limiter
}

func (d *dashboardLogins) allow(user string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.byUser == nil || len(d.byUser) > state.MaxUsers {
		// Users come and go; their budgets start again.
		d.byUser = map[string]*rate.Limiter{}
	}
	l := d.byUser[user]
	if l == nil {
		l = rate.NewLimiter(dashboardLoginRate, dashboardLoginBurst)
		d.byUser[user] = l
	}
	return l.Allow()
}

// DashboardLogin makes a one-time link that logs the caller in to this
// controller's dashboard, valid for DashboardLoginTTL.
func (s *Server) DashboardLogin(ctx context.Context, _ *pb.DashboardLoginRequest) (*pb.DashboardLoginResponse, error) {
	if s.cfg.DashboardURL == "" {
		return nil, status.Error(codes.FailedPrecondition, "this controller serves no dashboard (lifelined controller --dashboard-addr none)")
	}
	user := callerFrom(ctx).id
	if !s.dashLogins.allow(user) {
		return nil, status.Errorf(codes.ResourceExhausted, "user %s asks for dashboard logins too often: at most %d a second", user, dashboardLoginRate)
	}
	secret, err := pki.NewSecret()
	if err != nil {
		return nil, err
	}
	exp := time.Now().Add(DashboardLoginTTL)
	if err := s.st.AddDashboardLogin(ctx, user, DashboardDigest(secret), exp); err != nil {
		return nil, err
	}
	link := s.cfg.DashboardURL + "/login?" + url.Values{"user": {user}, "token": {secret}}.Encode()
	return &pb.DashboardLoginResponse{Url: s.cfg.DashboardURL, LoginUrl: link, ExpiresUnixNano: exp.UnixNano()}, nil
}

// CallAs makes the OperatorService call method ("Resolved") as the named
// user, as the gRPC interceptors would for a call with its credential:
// the user's role is read now and checked against operatorAccess, the call
// is audited under the user (a change in its first transaction, a refusal
// after), and handler runs with the user as the caller. A user who no
// longer exists is Unauthenticated. Errors are gRPC statuses.
func (s *Server) CallAs(ctx context.Context, user, method string, req any, handler func(ctx context.Context) (any, error)) (any, error) {
	if err := names.CheckUser(user); err != nil {
		return nil, status.Error(codes.Unauthenticated, err.Error())
	}
	c := caller{kind: names.KindUser, id: user}
	u, err := s.st.User(ctx, user)
	switch {
	case errors.Is(err, state.ErrNotFound):
		return nil, status.Errorf(codes.Unauthenticated, "user %s does not exist", user)
	case err != nil:
		return nil, toStatus(err)
	}
	c.role = u.Role
	ctx = context.WithValue(ctx, callerKey{}, c)
	ctx, a := s.startAudit(ctx, c, method, req)
	if acc, ok := operatorAccess(method); !ok || !acc.allows(c.role) {
		err = denied("%s (%s) may not call %s: it needs the %s role", c, roleName(c.role), method, roleName(acc.role))
	} else if err = s.admitStorage(c, kindOf("/lifeline.v1.OperatorService/"+method)); err == nil {
		var resp any
		resp, err = handler(state.WithPriority(state.WithAudit(ctx, a)))
		err = toStatus(err)
		s.finishAudit(ctx, c, a, err)
		return resp, err
	}
	s.finishAudit(ctx, c, a, err)
	return nil, err
}
