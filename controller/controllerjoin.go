package controller

import (
	"context"
	"errors"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/lifelinehq/lifeline/internal/pki"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// Adding a controller: the operator asks for a one-time join token
// (AddController); the new controller, which trusts only the CA the token
// carries, presents it to any controller of the model (JoinController),
// which checks it against its record in etcd, deletes the record, and
// answers the key-encryption key of the model's CA key. The new controller
// then opens the CA key stored in etcd and keeps the key-encryption key in
// its data directory.

const (
	// defaultControllerJoinValidity is how long a controller join token
	// may be used when the operator names no time.
	defaultControllerJoinValidity = time.Hour
	// maxControllerJoinValidity is the longest the operator may name.
	maxControllerJoinValidity = 24 * time.Hour
)

// controllerJoinMethods is the prefix of ControllerJoinService's methods,
// which a caller reaches without a credential: the token is the proof.
const controllerJoinMethods = "/lifeline.v1.ControllerJoinService/"

// EtcdAccess says how a controller reaches the model's etcd, for the
// command ctl add-controller prints: a new controller needs the same.
type EtcdAccess struct {
	Namespace string
	// Endpoints are the etcd cluster's client URLs (the embedded
	// member's socket when etcd is embedded).
	Endpoints []string
	// TLS says whether the cluster wants a client certificate.
	TLS bool
}

// AddController issues a controller join token.
func (s *Server) AddController(ctx context.Context, req *pb.AddControllerRequest) (*pb.AddControllerResponse, error) {
	validFor := time.Duration(req.ValidForMs) * time.Millisecond
	switch {
	case req.ValidForMs == 0:
		validFor = defaultControllerJoinValidity
	case validFor < time.Second || validFor > maxControllerJoinValidity:
		return nil, invalid("a controller join token is valid from 1s to %s, not %s", maxControllerJoinValidity, validFor)
	}
	if len(s.cfg.CACert) == 0 {
		return nil, failedPrecondition("this controller has no CA certificate to put in a join token")
	}
	// Read now, not from controllerAddresses' cache: a controller about
	// to be added should find every live one, and agents asking within
	// the cache's second should not be handed a list read before.
	addrs, err := s.st.ControllerAddresses(ctx)
	if err != nil {
		return nil, err
	}
	for _, a := range s.cfg.Addresses {
		if !slices.Contains(addrs, a) {
			addrs = append(addrs, a)
		}
	}
	expires := time.Now().Add(validFor)
	token, hash, err := pki.NewControllerJoin(addrs, s.cfg.CACert, expires)
	if err != nil {
		return nil, err
	}
	if err := s.st.AddControllerJoin(ctx, token.ID, &pb.ControllerJoin{
		SecretHash: hash, ExpiresUnixNano: expires.UnixNano(), IssuedBy: s.cfg.ID,
	}); err != nil {
		return nil, err
	}
	text, err := token.Encode()
	if err != nil {
		return nil, err
	}
	s.logger.Info("issued a controller join token", "token", token.ID, "expires", token.Expires.Format(time.RFC3339))
	return &pb.AddControllerResponse{
		Token: text, ExpiresUnixNano: expires.UnixNano(),
		Namespace: s.cfg.Etcd.Namespace, EtcdEndpoints: s.cfg.Etcd.Endpoints, EtcdTls: s.cfg.Etcd.TLS,
	}, nil
}

// joinServer serves ControllerJoinService.
type joinServer struct {
	pb.UnimplementedControllerJoinServiceServer
	s *Server
}

// JoinController uses a controller join token and answers the
// key-encryption key.
func (j *joinServer) JoinController(ctx context.Context, req *pb.JoinControllerRequest) (*pb.JoinControllerResponse, error) {
	s := j.s
	if s.cfg.KEK.IsZero() {
		// Checked first, so that the token stays for a controller that
		// has the key.
		return nil, failedPrecondition("controller %s holds no key-encryption key that opens the model's CA key: ask another controller of the model", s.cfg.ID)
	}
	if !pki.ValidControllerJoinID(req.TokenId) {
		return nil, status.Error(codes.Unauthenticated, "not a controller join token")
	}
	now := time.Now()
	err := s.st.UseControllerJoin(ctx, req.TokenId, func(rec *pb.ControllerJoin) error {
		if !pki.VerifySecret(req.Secret, rec.SecretHash) {
			return status.Errorf(codes.Unauthenticated, "controller join token %s: wrong secret", req.TokenId)
		}
		if expires := time.Unix(0, rec.ExpiresUnixNano); now.After(expires) {
			return status.Errorf(codes.Unauthenticated, "controller join token %s expired at %s: make another with ctl add-controller",
				req.TokenId, expires.UTC().Format(time.RFC3339))
		}
		return nil
	})
	if errors.Is(err, state.ErrNotFound) {
		pki.VerifySecret(req.Secret, dummyHash)
		return nil, status.Errorf(codes.Unauthenticated, "controller join token %s is not valid: never issued, used already, or expired: make another with ctl add-controller", req.TokenId)
	}
	if err != nil {
		return nil, err
	}
	from := ""
	if p, ok := peer.FromContext(ctx); ok {
		from = p.Addr.String()
	}
	s.logger.Info("a controller joined with a join token: handed it the key-encryption key of the model's CA key", "token", req.TokenId, "from", from)
	return &pb.JoinControllerResponse{Kek: s.cfg.KEK.Bytes()}, nil
}
