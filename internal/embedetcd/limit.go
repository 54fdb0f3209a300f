package embedetcd

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// maxCallsInFlight bounds the unary calls (reads, transactions, lease
// grants) an etcd client has in flight on its connection.
//
// Without a bound, a controller under load had 15,000 transactions in
// flight on its one connection to the embedded member, and the connection
// stopped for good: since grpc-go v1.82.1 (the HTTP/2 Rapid Reset fix,
// GHSA-hrxh-6v49-42gf) each stream opened or closed counts toward the
// control buffer's throttle, so that with hundreds of streams opening at
// once over a unix socket, whose send buffer is small and fixed, both
// sides' writers block on the socket while both readers wait for their
// writers (grpc-go issue 9330). 128 calls in flight is far below where
// that happens (about 512) and above what etcd needs to run at full speed
// (its throughput times its latency: some tens).
const maxCallsInFlight = 128

// limitCalls is a unary interceptor letting n calls through at once; the
// others wait for a turn, or for their context to end.
func limitCalls(n int) grpc.UnaryClientInterceptor {
	turns := make(chan struct{}, n)
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		select {
		case turns <- struct{}{}:
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		}
		defer func() { <-turns }()
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}
