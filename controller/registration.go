package controller

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lifelinehq/lifeline/internal/pki"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// RegistrationService is called without a credential, by ctl register:
// GetCA gives the model's CA, which the caller checks against the
// fingerprint its registration token carries before it trusts this
// controller; Register, over a connection verified with that CA, proves
// the token's one-time secret and binds the credential the caller made.
// Both are rate-limited per controller, so that guessing costs time, and
// Register is audited as the user it names.
type registrationServer struct {
	pb.UnimplementedRegistrationServiceServer
	s *Server
}

// The budget of RegistrationService's calls on a controller.
const (
	registrationRate  = 5 // a second
	registrationBurst = 20
	// maxSecretLen bounds the one-time secret sent (NewSecret's are 43
	// characters).
	maxSecretLen = 128
	// registrationUser is whom the refused registrations' budget of
	// recorded refusals is counted for.
	registrationUser = "(registration)"
)

func (r *registrationServer) allow() error {
	if !r.s.registrations.Allow() {
		return status.Error(codes.ResourceExhausted, "too many registration calls on this controller: try again in a second")
	}
	return nil
}

// GetCA returns the model's CA certificate.
func (r *registrationServer) GetCA(context.Context, *pb.GetCARequest) (*pb.GetCAResponse, error) {
	if err := r.allow(); err != nil {
		return nil, err
	}
	if len(r.s.cfg.CACert) == 0 {
		return nil, status.Error(codes.FailedPrecondition, "this controller does not know its CA: register with another")
	}
	return &pb.GetCAResponse{CaCert: string(r.s.cfg.CACert)}, nil
}

// Register binds the named user's credential once its registration's
// secret is proved.
func (r *registrationServer) Register(ctx context.Context, req *pb.RegisterRequest) (*pb.RegisterResponse, error) {
	if err := r.allow(); err != nil {
		return nil, err
	}
	if err := checkUserName(req.User); err != nil {
		return nil, err
	}
	switch {
	case len(req.Secret) > maxSecretLen:
		return nil, invalid("registration secret of %d bytes: at most %d", len(req.Secret), maxSecretLen)
	case pki.ValidateHash(req.CredentialHash) != nil:
		return nil, invalid("credential hash: %v", pki.ValidateHash(req.CredentialHash))
	}
	targets, summary := describe(req)
	a := state.NewAudit(&pb.AuditEntry{User: req.User, Rpc: "Register", Targets: targets, Summary: summary, Controller: r.s.cfg.ID})
	prove := func(reg *pb.Registration) bool { return pki.VerifySecret(req.Secret, reg.SecretHash) }
	u, err := r.s.st.Register(state.WithAudit(ctx, a), req.User, prove, req.CredentialHash)
	err = toStatus(err)
	// Refusals of registrations share one budget: their callers are
	// nobody yet.
	r.s.finishAudit(ctx, caller{id: registrationUser}, a, err)
	if err != nil {
		return nil, err
	}
	r.s.logger.Info("user registered", "user", u.Name)
	return &pb.RegisterResponse{User: u, Controllers: r.s.controllerAddresses(ctx)}, nil
}
