package controller

import (
	"context"
	"errors"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lifelinehq/lifeline/internal/charm"
	"github.com/lifelinehq/lifeline/state"
)

// toStatus maps an error to a gRPC status, once, at the API boundary. The
// message is the error's own sentence.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	code := codes.Internal
	switch {
	case errors.Is(err, state.ErrNotFound):
		code = codes.NotFound
	case errors.Is(err, state.ErrAlreadyExists):
		code = codes.AlreadyExists
	case errors.Is(err, state.ErrRefused), errors.Is(err, state.ErrNotInError), errors.Is(err, state.ErrNoChange):
		code = codes.FailedPrecondition
	case errors.Is(err, state.ErrAlreadyResolved):
		code = codes.AlreadyExists
	case errors.Is(err, state.ErrInvalid), errors.Is(err, charm.ErrInvalid), errors.Is(err, charm.ErrTooLarge),
		// Every record's size is checked before etcd (state's limits);
		// should a request still reach it too large, it is the caller's.
		etcdRefused(err, rpctypes.ErrRequestTooLarge, rpctypes.ErrGRPCRequestTooLarge):
		code = codes.InvalidArgument
	case errors.Is(err, state.ErrUnauthenticated):
		code = codes.Unauthenticated
	case errors.Is(err, state.ErrFull),
		etcdRefused(err, rpctypes.ErrNoSpace, rpctypes.ErrGRPCNoSpace):
		// etcd's database is full (its NOSPACE alarm): the status
		// says so, and the controller frees it where it can.
		code = codes.ResourceExhausted
	case errors.Is(err, state.ErrAborted):
		code = codes.Aborted
	case errors.Is(err, state.ErrBadJoinToken):
		code = codes.Unauthenticated
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	case errors.Is(err, rpctypes.ErrNoLeader), errors.Is(err, rpctypes.ErrTimeout),
		errors.Is(err, rpctypes.ErrTimeoutDueToLeaderFail), errors.Is(err, rpctypes.ErrTimeoutDueToConnectionLost),
		// etcd still behind after the State's retries, until the call's
		// deadline: worth trying again later, as an agent does.
		errors.Is(err, rpctypes.ErrTooManyRequests):
		code = codes.Unavailable
	default:
		if s, ok := status.FromError(errors.Unwrap(err)); ok && s.Code() == codes.Unavailable {
			code = codes.Unavailable
		}
	}
	return status.Error(code, err.Error())
}

// etcdRefused says whether err is etcd's refusal, as clientv3 reports it
// (asClient) or as its gRPC status (asGRPC), which the State's own requests
// get.
func etcdRefused(err, asClient, asGRPC error) bool {
	if errors.Is(err, asClient) || errors.Is(err, asGRPC) {
		return true
	}
	var se interface{ GRPCStatus() *status.Status }
	return errors.As(err, &se) && se.GRPCStatus().Message() == rpctypes.ErrorDesc(asGRPC)
}

func invalid(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

func unavailable(format string, args ...any) error {
	return status.Errorf(codes.Unavailable, format, args...)
}

func denied(format string, args ...any) error {
	return status.Errorf(codes.PermissionDenied, format, args...)
}
