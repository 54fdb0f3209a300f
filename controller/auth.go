package controller

import (
	"context"
	"errors"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/lifelinehq/lifeline/internal/names"
	"github.com/lifelinehq/lifeline/internal/pki"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// caller is who made a call, as its credential proved.
type caller struct {
	kind string // names.KindUser, KindMachine or KindUnit
	id   string // user name, machine id or unit name
	// hash is the stored hash the credential was proved against: a
	// user's open streams end when it is no longer the stored one.
	hash string
	// role is a user's, as read when the call began.
	role pb.UserRole
}

func (c caller) String() string {
	switch c.kind {
	case names.KindUser:
		return "user " + c.id
	case names.KindMachine:
		return "machine " + c.id + "'s agent"
	case names.KindUnit:
		return "unit " + c.id + "'s agent"
	}
	return "a caller without a credential"
}

type callerKey struct{}

func callerFrom(ctx context.Context) caller {
	c, _ := ctx.Value(callerKey{}).(caller)
	return c
}

// dummyHash is verified against when a tag has no credential, so that an
// unknown tag costs as long as a wrong secret and tells nothing.
var dummyHash = pki.HashSecret("lifeline-no-such-credential-00000000000000000")

// authenticate proves the credential a call carries against the stored
// hash, and says who the caller is.
func (s *Server) authenticate(ctx context.Context) (caller, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	cred, err := pki.CredentialFromMetadata(md)
	if err != nil {
		return caller{}, status.Error(codes.Unauthenticated, "no valid credential: "+err.Error())
	}
	return s.verify(ctx, cred)
}

// verify proves cred against the stored hash, and says whose it is.
func (s *Server) verify(ctx context.Context, cred pki.Credential) (caller, error) {
	kind, id, err := names.ParseTag(cred.Tag)
	if err != nil {
		return caller{}, status.Error(codes.Unauthenticated, err.Error())
	}
	// A user's credential is read from etcd on every call: a user's calls
	// are few, and a removed user or a replaced credential is refused at
	// once, not once the mirror hears of it.
	if kind != names.KindUser {
		if hash, ok := s.creds.lookup(cred.Tag); ok && pki.VerifySecret(cred.Secret, hash) {
			return caller{kind: kind, id: id, hash: hash}, nil
		}
	}
	// Not in the mirror, or not the hash it holds (a credential issued
	// since, or a wrong secret), or a user's: etcd says.
	hash, err := s.st.CredentialHash(ctx, cred.Tag)
	switch {
	case errors.Is(err, state.ErrNotFound):
		pki.VerifySecret(cred.Secret, dummyHash)
		return caller{}, status.Errorf(codes.Unauthenticated, "credential of %s is not valid (unknown or revoked)", cred.Tag)
	case err != nil:
		return caller{}, toStatus(err)
	}
	if !pki.VerifySecret(cred.Secret, hash) {
		return caller{}, status.Errorf(codes.Unauthenticated, "credential of %s is not valid (unknown or revoked)", cred.Tag)
	}
	return caller{kind: kind, id: id, hash: hash}, nil
}

// admits says whether a caller of kind may call the given full method at
// all; finer checks are the method's own.
func admits(kind, method string) bool {
	switch {
	case strings.HasPrefix(method, "/lifeline.v1.OperatorService/"):
		return kind == names.KindUser
	case strings.HasPrefix(method, "/lifeline.v1.AgentService/"):
		return kind == names.KindMachine || kind == names.KindUnit
	}
	return false
}

// registrationPrefix starts the methods of RegistrationService, called
// without a credential.
const registrationPrefix = "/lifeline.v1.RegistrationService/"

// authorize authenticates the caller and checks that it may call method:
// an agent the AgentService, a user the OperatorService methods its role
// allows (operatorAccess; its role is read now, so a change of role holds
// from the next call). The returned context carries the caller, also when
// the role does not allow the call (PermissionDenied), for the audit.
func (s *Server) authorize(ctx context.Context, method string) (context.Context, error) {
	if strings.HasPrefix(method, controllerJoinMethods) || strings.HasPrefix(method, machineJoinMethods) {
		// A controller being added, or a manual machine's host, has no
		// credential yet: the join token in its request is the proof
		// (JoinController, JoinMachine).
		return ctx, nil
	}
	c, err := s.authenticate(ctx)
	if err != nil {
		return nil, err
	}
	if !admits(c.kind, method) {
		return nil, denied("%s may not call %s", c, methodName(method))
	}
	if c.kind == names.KindUser {
		u, err := s.st.User(ctx, c.id)
		if errors.Is(err, state.ErrNotFound) {
			// Removed since its credential was read.
			return nil, status.Errorf(codes.Unauthenticated, "user %s does not exist", c.id)
		}
		if err != nil {
			return nil, toStatus(err)
		}
		c.role = u.Role
		ctx = context.WithValue(ctx, callerKey{}, c)
		if acc, ok := operatorAccess(methodName(method)); !ok || !acc.allows(c.role) {
			return ctx, denied("%s (%s) may not call %s: it needs the %s role", c, roleName(c.role), methodName(method), roleName(acc.role))
		}
		return ctx, nil
	}
	return context.WithValue(ctx, callerKey{}, c), nil
}

func (s *Server) unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if isHealth(info.FullMethod) {
		return s.healthUnary(ctx, req, info, handler)
	}
	if strings.HasPrefix(info.FullMethod, registrationPrefix) {
		// No credential: the registration's one-time secret is the proof
		// (registration.go).
		resp, err := handler(ctx, req)
		return resp, toStatus(err)
	}
	actx, err := s.authorize(ctx, info.FullMethod)
	var c caller
	if actx != nil {
		c = callerFrom(actx)
	}
	var a *state.Audit
	if c.kind == names.KindUser {
		ctx, a = s.startAudit(actx, c, methodName(info.FullMethod), req)
	}
	var resp any
	if err == nil {
		ctx = actx
		if a != nil {
			ctx = state.WithAudit(ctx, a)
		}
		ahead := c.kind == names.KindUser
		if ahead {
			// The operator waits on the answer; the agents' writes
			// queued for etcd can wait a moment longer.
			ctx = state.WithPriority(ctx)
		}
		if werr := s.workers.call(ctx, ahead, func() { resp, err = handler(ctx, req) }); werr != nil {
			err = werr
		}
		err = toStatus(err)
	}
	if a != nil {
		s.finishAudit(ctx, c, a, err)
	}
	return resp, err
}

func (s *Server) streamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if isHealth(info.FullMethod) {
		return s.healthStream(srv, ss, info, handler)
	}
	ctx, err := s.authorize(ss.Context(), info.FullMethod)
	var c caller
	if ctx != nil {
		c = callerFrom(ctx)
	}
	var a *state.Audit
	if c.kind == names.KindUser {
		ctx, a = s.startAudit(ctx, c, methodName(info.FullMethod), nil)
	}
	if err == nil {
		if a != nil {
			ctx = state.WithAudit(ctx, a)
		}
		if c.kind == names.KindUser {
			// A user's stream lives as long as its credential: removing
			// the user or replacing the credential ends it.
			var revoked func() bool
			ctx, revoked = s.revocable(ctx, c)
			err = toStatus(handler(srv, &authedStream{ServerStream: ss, ctx: ctx}))
			if revoked() {
				err = status.Errorf(codes.Unauthenticated, "credential of %s revoked", c)
			}
		} else {
			err = toStatus(handler(srv, &authedStream{ServerStream: ss, ctx: ctx}))
		}
	}
	if a != nil {
		s.finishAudit(ctx, c, a, err)
	}
	return err
}

type authedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (a *authedStream) Context() context.Context { return a.ctx }
