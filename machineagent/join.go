package machineagent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lifelinehq/lifeline/internal/pki"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// ErrJoinRefused is the controller's refusal of a join: Join's error wraps
// it with the controller's sentence.
var ErrJoinRefused = errors.New("join refused")

// JoinAPI is what joining needs from the controller, called without a
// credential.
type JoinAPI interface {
	JoinMachine(ctx context.Context, in *pb.JoinMachineRequest, opts ...grpc.CallOption) (*pb.JoinMachineResponse, error)
}

// Join has the controller take tok, once, for cred, the machine's
// credential the host made: the hash of its secret goes to the
// controller, the secret stays here. It tries again while the controller
// cannot be reached or is over its joins' write budget (many hosts joining
// at once), until ctx ends; a refusal (a token used, expired, or not the
// one issued: Unauthenticated) is returned at once, with the controller's
// sentence.
func Join(ctx context.Context, api JoinAPI, tok pki.JoinToken, cred pki.Credential) error {
	req := &pb.JoinMachineRequest{Machine: tok.Machine, TokenSecret: tok.Secret, CredentialHash: pki.HashSecret(cred.Secret)}
	bo := backoff.NewExponentialBackOff(backoff.WithInitialInterval(200*time.Millisecond), backoff.WithMaxInterval(5*time.Second), backoff.WithMaxElapsedTime(0))
	return backoff.Retry(func() error {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		_, err := api.JoinMachine(cctx, req)
		switch status.Code(err) {
		case codes.OK:
			return nil
		case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted, codes.ResourceExhausted:
			return err
		}
		return backoff.Permanent(fmt.Errorf("%w: %s", ErrJoinRefused, statusMessage(err)))
	}, backoff.WithContext(bo, ctx))
}
