package controller

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lifelinehq/lifeline/internal/names"
	"github.com/lifelinehq/lifeline/internal/pki"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// The users' calls. Who may make them is operatorAccess's; each checks
// the size of what it is sent before it reads anything.

// defaultRegistrationTime is how long a registration token works when
// AddUser names no time.
const defaultRegistrationTime = 24 * time.Hour

func checkUserName(name string) error { return asInvalid(names.CheckUser(name)) }

// ListUsers lists the users (state.MaxUsers at most).
func (s *Server) ListUsers(ctx context.Context, _ *pb.ListUsersRequest) (*pb.ListUsersResponse, error) {
	us, err := s.st.Users(ctx)
	if err != nil {
		return nil, err
	}
	resp := &pb.ListUsersResponse{}
	for _, u := range us {
		info := &pb.UserInfo{User: u.User}
		if u.Registration != nil {
			info.RegistrationExpiresUnixNano = u.Registration.ExpiresUnixNano
		}
		resp.Users = append(resp.Users, info)
	}
	return resp, nil
}

// AddUser adds a user who has yet to register and returns its
// registration's one-time secret, which only its hash is stored of.
func (s *Server) AddUser(ctx context.Context, req *pb.AddUserRequest) (*pb.AddUserResponse, error) {
	if err := checkUserName(req.Name); err != nil {
		return nil, err
	}
	role := req.Role
	if role == pb.UserRole_USER_ROLE_UNSPECIFIED {
		role = viewer
	}
	expires := defaultRegistrationTime
	if req.ExpiresMs != 0 {
		expires = time.Duration(req.ExpiresMs) * time.Millisecond
	}
	if req.ExpiresMs < 0 || expires > state.MaxRegistrationTime {
		return nil, invalid("a registration works for up to %s: not %s", state.MaxRegistrationTime, expires)
	}
	secret, err := pki.NewSecret()
	if err != nil {
		return nil, err
	}
	at := time.Now().Add(expires)
	u, err := s.st.AddUser(ctx, state.NewUser{Name: req.Name, Role: role, CreatedBy: callerFrom(ctx).id, SecretHash: pki.HashSecret(secret), Expires: at})
	if err != nil {
		return nil, err
	}
	s.logger.Info("user added", "user", u.Name, "role", roleName(u.Role), "by", u.CreatedBy)
	return &pb.AddUserResponse{User: u, Secret: secret, ExpiresUnixNano: at.UnixNano(), Controllers: s.controllerAddresses(ctx)}, nil
}

// RemoveUser removes a user and its credential: its calls are refused
// from now on, and its open streams end (revocable).
func (s *Server) RemoveUser(ctx context.Context, req *pb.RemoveUserRequest) (*pb.RemoveUserResponse, error) {
	if err := checkUserName(req.Name); err != nil {
		return nil, err
	}
	if err := s.st.RemoveUser(ctx, req.Name); err != nil {
		return nil, err
	}
	s.logger.Info("user removed", "user", req.Name, "by", callerFrom(ctx).id)
	return &pb.RemoveUserResponse{}, nil
}

// SetUserRole gives a user a role.
func (s *Server) SetUserRole(ctx context.Context, req *pb.SetUserRoleRequest) (*pb.SetUserRoleResponse, error) {
	if err := checkUserName(req.Name); err != nil {
		return nil, err
	}
	u, err := s.st.SetUserRole(ctx, req.Name, req.Role)
	if err != nil {
		return nil, err
	}
	return &pb.SetUserRoleResponse{User: u}, nil
}

// WhoAmI names the caller and this controller.
func (s *Server) WhoAmI(ctx context.Context, _ *pb.WhoAmIRequest) (*pb.WhoAmIResponse, error) {
	u, err := s.st.User(ctx, callerFrom(ctx).id)
	if err != nil {
		return nil, err
	}
	return &pb.WhoAmIResponse{User: u, Controller: s.cfg.ID}, nil
}

// RotateCredential replaces the caller's credential by the one whose hash
// it sends: the old one stops working at once, and the caller's open
// streams end.
func (s *Server) RotateCredential(ctx context.Context, req *pb.RotateCredentialRequest) (*pb.RotateCredentialResponse, error) {
	if err := pki.ValidateHash(req.CredentialHash); err != nil {
		return nil, invalid("%v", err)
	}
	if err := s.st.SetUserCredential(ctx, callerFrom(ctx).id, req.CredentialHash); err != nil {
		return nil, err
	}
	return &pb.RotateCredentialResponse{}, nil
}

// The bounds of an Audit call: the entries it sends first, the entries it
// looks at to find them, the entries a message carries, and the text of
// its filter.
const (
	defaultAuditLimit = 100
	maxAuditLimit     = 10_000
	auditScanBudget   = 20_000
	auditPerMessage   = 100
	maxAuditEntityLen = 200
	maxAuditRPCLen    = 64
	// maxAuditFollows bounds the Audit streams that follow the log on a
	// controller, and maxAuditFollowsPerUser those of one user (of its
	// credential: a user has one); more are ResourceExhausted.
	maxAuditFollows        = 32
	maxAuditFollowsPerUser = 4
	// auditPendingWait is how long a follower waits for a pending entry's
	// result before it sends it pending (its controller may have died).
	auditPendingWait = 30 * time.Second
)

// Audit sends the newest matching entries, oldest first, then, with
// follow, each new one as its call ends.
func (s *Server) Audit(req *pb.AuditRequest, stream pb.OperatorService_AuditServer) error {
	ctx := stream.Context()
	if req.User != "" {
		if err := checkUserName(req.User); err != nil {
			return err
		}
	}
	if len(req.Entity) > maxAuditEntityLen {
		return invalid("entity of %d bytes: at most %d", len(req.Entity), maxAuditEntityLen)
	}
	if err := checkAuditRPC(req.Rpc); err != nil {
		return err
	}
	limit := int(req.Limit)
	switch {
	case limit < 0 || limit > maxAuditLimit:
		return invalid("limit %d: want 1 to %d", limit, maxAuditLimit)
	case limit == 0:
		limit = defaultAuditLimit
	}
	if req.SinceUnixNano < 0 {
		return invalid("since %d: want a time", req.SinceUnixNano)
	}
	q := state.AuditQuery{User: req.User, Entity: req.Entity, RPC: req.Rpc}
	if req.SinceUnixNano > 0 {
		q.Since = time.Unix(0, req.SinceUnixNano)
	}
	if req.Follow {
		user := callerFrom(ctx).id
		if err := s.follows.take(user); err != nil {
			return err
		}
		defer s.follows.release(user)
	}
	last, err := s.st.AuditSeq(ctx)
	if err != nil {
		return err
	}
	entries, truncated, _, err := s.st.ScanAudit(ctx, q, limit, auditScanBudget)
	if err != nil {
		return err
	}
	for len(entries) > 0 || truncated {
		n := min(len(entries), auditPerMessage)
		if err := stream.Send(&pb.AuditResponse{Entries: entries[:n], Truncated: truncated}); err != nil {
			return err
		}
		if n > 0 {
			last = max(last, entries[n-1].Seq)
		}
		entries, truncated = entries[n:], false
	}
	if !req.Follow {
		return nil
	}
	return s.followAudit(ctx, q, last+1, stream)
}

// checkAuditRPC refuses an Audit filter by method that no method's name
// could match: a method's name is letters, at most maxAuditRPCLen.
func checkAuditRPC(rpc string) error {
	if len(rpc) > maxAuditRPCLen {
		return invalid("rpc of %d bytes: at most %d", len(rpc), maxAuditRPCLen)
	}
	for _, c := range rpc {
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') {
			return invalid("rpc %q: want a method's name, letters only (Deploy)", rpc)
		}
	}
	return nil
}

// auditFollows counts the Audit streams that follow the log on this
// controller, in all and by user: each holds a watch of the hub and reads
// the log as it grows, so one user (or a script gone wrong) must not take
// them all.
type auditFollows struct {
	mu     sync.Mutex
	total  int
	byUser map[string]int
}

// take counts one more stream of user's, or says why it cannot.
func (f *auditFollows) take(user string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.total >= maxAuditFollows:
		return status.Errorf(codes.ResourceExhausted, "%d audit streams follow the log on this controller, the most it serves: try again later", maxAuditFollows)
	case f.byUser[user] >= maxAuditFollowsPerUser:
		return status.Errorf(codes.ResourceExhausted, "user %s follows the audit log on %d streams of this controller, the most one user may: end one first", user, maxAuditFollowsPerUser)
	}
	if f.byUser == nil {
		f.byUser = map[string]int{}
	}
	f.total++
	f.byUser[user]++
	return nil
}

// release counts one of user's streams ended.
func (f *auditFollows) release(user string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.total--
	if f.byUser[user]--; f.byUser[user] <= 0 {
		delete(f.byUser, user)
	}
}

// followAudit sends the entries from seq next on that q matches, in
// order, each once its call has ended: it waits for a pending entry
// (auditPendingWait at most). It reads the log when its seq changes,
// which the watch hub tells, and every 100 ms while it waits on a
// pending entry. A read made right after the hub told of a change may not
// see it yet (etcd tells its watchers a moment before its reads show a
// write): it is read again until it is at or past the change.
func (s *Server) followAudit(ctx context.Context, q state.AuditQuery, next int64, stream pb.OperatorService_AuditServer) error {
	w, err := s.cfg.Watches.WatchKey(ctx, state.AuditSeqKey, 0)
	if err != nil {
		return err
	}
	defer w.Close()
	var need int64 // the revision the last change told of
	for {
		entries, rev, err := s.st.AuditAfter(ctx, next-1, auditPerMessage)
		if err != nil {
			return err
		}
		var out []*pb.AuditEntry
		waiting := rev < need
		for _, e := range entries {
			if e.Pending && time.Since(time.Unix(0, e.UnixNano)) < auditPendingWait {
				waiting = true
				break
			}
			next = e.Seq + 1
			if q.Matches(e) {
				out = append(out, e)
			}
		}
		if len(out) > 0 {
			if err := stream.Send(&pb.AuditResponse{Entries: out}); err != nil {
				return err
			}
		}
		switch {
		case waiting:
			wait := 100 * time.Millisecond
			if rev < need {
				wait = 10 * time.Millisecond
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(wait):
			}
		case len(entries) == auditPerMessage:
			// More to read at once.
		default:
			b, err := w.Next(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return unavailable("following the audit log: %v", err)
			}
			need = b.Revision
		}
	}
}
