package controller

import (
	"context"
	"errors"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/lifelinehq/lifeline/names"
	"github.com/lifelinehq/lifeline/pki"
	"github.com/lifelinehq/lifeline/state"
)

// caller is who made a call, as its credential proved.
type caller struct {
	kind string // names.KindUser, KindMachine or KindUnit
	id   string // machine id or unit name; "" for admin
}

func (c caller) String() string {
	switch c.kind {
	case names.KindUser:
		return "the operator"
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
	if hash, ok := s.creds.lookup(cred.Tag); ok && pki.VerifySecret(cred.Secret, hash) {
		return caller{kind: kind, id: id}, nil
	}
	// Not in the mirror, or not the hash it holds (a credential issued
	// since, or a wrong secret): etcd says.
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
	return caller{kind: kind, id: id}, nil
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
		return nil, denied("%s may not call %s", c, method[strings.LastIndexByte(method, '/')+1:])
	}
	return context.WithValue(ctx, callerKey{}, c), nil
}

func (s *Server) unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	ctx, err := s.authorize(ctx, info.FullMethod)
	if err == nil {
		ahead := callerFrom(ctx).kind == names.KindUser
		if ahead {
			// The operator waits on the answer; the agents' writes
			// queued for etcd can wait a moment longer.
			ctx = state.Ahead(ctx)
		}
		var resp any
		if werr := s.workers.call(ctx, ahead, func() { resp, err = handler(ctx, req) }); werr != nil {
			err = werr
		}
		err = toStatus(err)
		s.metrics.observeUnary(info.FullMethod, err, start)
		return resp, err
	}
	s.metrics.observeUnary(info.FullMethod, err, start)
	return nil, err
}

func (s *Server) streamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx, err := s.authorize(ss.Context(), info.FullMethod)
	if err == nil {
		err = toStatus(handler(srv, &authedStream{ServerStream: ss, ctx: ctx}))
	}
	s.metrics.observe(info.FullMethod, err)
	return err
}

type authedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (a *authedStream) Context() context.Context { return a.ctx }
