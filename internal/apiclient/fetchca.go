package apiclient

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/lifelinehq/lifeline/internal/pki"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// FetchCA asks the controller at addr for the model's CA and returns it
// only if its fingerprint (pki.CAFingerprint) is the one given: the first
// step of a registration, whose token pins the CA. The connection it asks
// over is not verified (the CA is what it lacks) and carries nothing
// else; everything after is sent over a connection verified with the CA
// it returns.
func FetchCA(ctx context.Context, addr, fingerprint string) ([]byte, error) {
	tlsCfg := &tls.Config{
		// Not verified here: the answer is, against the fingerprint.
		InsecureSkipVerify: true, //nolint:gosec
		MinVersion:         tls.VersionTLS13,
		NextProtos:         []string{"h2"},
	}
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)))
	if err != nil {
		return nil, fmt.Errorf("controller %s: %w", addr, err)
	}
	defer conn.Close()
	resp, err := pb.NewRegistrationServiceClient(conn).GetCA(ctx, &pb.GetCARequest{})
	if err != nil {
		return nil, err
	}
	got, err := pki.CAFingerprint([]byte(resp.CaCert))
	if err != nil {
		return nil, fmt.Errorf("controller %s: %w", addr, err)
	}
	if got != fingerprint {
		return nil, fmt.Errorf("controller %s: %w: its CA's fingerprint is %s, the token's %s", addr, ErrCAMismatch, got, fingerprint)
	}
	return []byte(resp.CaCert), nil
}

// ErrCAMismatch: a controller's CA is not the one a registration token
// pins; nothing more is sent to it.
var ErrCAMismatch = errors.New("not the CA the token names")
