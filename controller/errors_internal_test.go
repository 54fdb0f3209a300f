package controller

import (
	"context"
	"fmt"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lifelinehq/lifeline/state"
)

func TestToStatusCodes(t *testing.T) {
	for _, c := range []struct {
		err  error
		want codes.Code
	}{
		{fmt.Errorf("unit x: %w", state.ErrNotFound), codes.NotFound},
		{fmt.Errorf("take x out of relation 0: %w", rpctypes.ErrTooManyRequests), codes.Unavailable},
		{fmt.Errorf("set x dead: %w", rpctypes.ErrNoLeader), codes.Unavailable},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), codes.DeadlineExceeded},
		{fmt.Errorf("resolve x: %w", state.ErrNotInError), codes.FailedPrecondition},
		{fmt.Errorf("resolve x: %w", state.ErrAlreadyResolved), codes.AlreadyExists},
		{fmt.Errorf("configure x: %w", rpctypes.ErrGRPCRequestTooLarge), codes.InvalidArgument},
		{fmt.Errorf("configure x: %w", rpctypes.ErrRequestTooLarge), codes.InvalidArgument},
		{fmt.Errorf("configure x: %w", status.Error(codes.InvalidArgument, "etcdserver: request is too large")), codes.InvalidArgument},
		{fmt.Errorf("destroy unit x: %w", rpctypes.ErrGRPCNoSpace), codes.ResourceExhausted},
		{fmt.Errorf("destroy unit x: %w", rpctypes.ErrNoSpace), codes.ResourceExhausted},
		{fmt.Errorf("add charm x: %w", state.ErrFull), codes.ResourceExhausted},
		{fmt.Errorf("something unforeseen"), codes.Internal},
	} {
		got := status.Convert(toStatus(c.err))
		if got.Code() != c.want || got.Message() != c.err.Error() {
			t.Errorf("toStatus(%q) = %v %q, want %v and the error's own sentence", c.err, got.Code(), got.Message(), c.want)
		}
	}
}
