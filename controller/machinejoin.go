package controller

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/lifelinehq/lifeline/internal/names"
	"github.com/lifelinehq/lifeline/internal/pki"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

const (
	// defaultJoinTokenTTL is how long a join token stays good unless the
	// operator says otherwise.
	defaultJoinTokenTTL = time.Hour
	// maxJoinTokenTTL bounds how long a join token stays good.
	maxJoinTokenTTL = 7 * 24 * time.Hour
)

// joinTokenTTL is the ttl the operator asked for in milliseconds, or the
// default.
func joinTokenTTL(ms int64) (time.Duration, error) {
	switch ttl := time.Duration(ms) * time.Millisecond; {
	case ms == 0:
		return defaultJoinTokenTTL, nil
	case ms < 0 || ttl > maxJoinTokenTTL:
		return 0, invalid("a join token's time to live of %s: want more than 0 and at most %s", ttl, maxJoinTokenTTL)
	default:
		return ttl, nil
	}
}

// canMakeJoinTokens says why this controller cannot make join tokens, if
// it cannot.
func (s *Server) canMakeJoinTokens() error {
	if len(s.cfg.Addresses) == 0 || len(s.cfg.CACert) == 0 {
		return status.Error(codes.FailedPrecondition, "this controller does not know its own addresses and CA: it cannot make join tokens")
	}
	return nil
}

// joinTokens issues a join token for each of the manual machines ids, good
// for one join until ttl from now, and stores their hashes (replacing any
// the machines have not used), state.MaxJoinTokensAtOnce to a
// transaction. The tokens carry the controllers' addresses and CA.
func (s *Server) joinTokens(ctx context.Context, ids []string, ttl time.Duration) ([]string, error) {
	if err := s.canMakeJoinTokens(); err != nil {
		return nil, err
	}
	addrs := s.controllerAddresses(ctx)
	expires := time.Now().Add(ttl)
	out := make([]string, 0, len(ids))
	for len(ids) > 0 {
		batch := ids[:min(len(ids), state.MaxJoinTokensAtOnce)]
		ids = ids[len(batch):]
		hashes := make(map[string]*pb.MachineJoin, len(batch))
		for _, id := range batch {
			tok, hash, err := pki.NewJoinToken(addrs, s.cfg.CACert, id, expires)
			if err != nil {
				return nil, err
			}
			enc, err := pki.EncodeJoinToken(tok)
			if err != nil {
				return nil, err
			}
			hashes[id] = &pb.MachineJoin{Hash: hash, ExpiresUnixNano: expires.UnixNano()}
			out = append(out, enc)
		}
		if err := s.st.SetJoinTokens(ctx, hashes); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// IssueJoinToken issues a new join token for a manual machine, replacing
// one it has not used.
func (s *Server) IssueJoinToken(ctx context.Context, req *pb.IssueJoinTokenRequest) (*pb.IssueJoinTokenResponse, error) {
	if !names.ValidMachine(req.GetMachine()) {
		return nil, invalid("invalid machine id %q", req.GetMachine())
	}
	ttl, err := joinTokenTTL(req.GetTtlMs())
	if err != nil {
		return nil, err
	}
	tokens, err := s.joinTokens(ctx, []string{req.GetMachine()}, ttl)
	if err != nil {
		return nil, err
	}
	s.logger.Info("join token issued", "machine", req.GetMachine(), "ttl", ttl)
	return &pb.IssueJoinTokenResponse{JoinToken: tokens[0]}, nil
}

// machineJoinServer serves MachineJoinService, which a call without a
// credential reaches (auth.go): what it proves is the join token its
// request carries.
type machineJoinServer struct {
	pb.UnimplementedMachineJoinServiceServer
	s *Server
}

// JoinMachine uses a manual machine's join token, once, to store the
// credential its host made (state.JoinMachine).
func (j *machineJoinServer) JoinMachine(ctx context.Context, req *pb.JoinMachineRequest) (*pb.JoinMachineResponse, error) {
	id := req.GetMachine()
	if !names.ValidMachine(id) {
		return nil, invalid("invalid machine id %q", id)
	}
	if err := pki.ValidateHash(req.GetCredentialHash()); err != nil {
		return nil, invalid("the machine's credential: %v", err)
	}
	secret := req.GetTokenSecret()
	err := j.s.st.JoinMachine(ctx, id, func(hash string) bool { return pki.VerifySecret(secret, hash) }, time.Now(), req.GetCredentialHash())
	from := "unknown"
	if p, ok := peer.FromContext(ctx); ok {
		from = p.Addr.String()
	}
	if err != nil {
		j.s.logger.Warn("join refused", "machine", id, "from", from, "error", err)
		return nil, err
	}
	j.s.logger.Info("machine joined", "machine", id, "from", from)
	return &pb.JoinMachineResponse{}, nil
}

// machineJoinMethods is the prefix of MachineJoinService's methods, which
// a caller reaches without a credential: the token is the proof.
const machineJoinMethods = "/lifeline.v1.MachineJoinService/"
