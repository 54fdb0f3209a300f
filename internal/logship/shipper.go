package logship

import (
	"context"
	"time"

	"google.golang.org/grpc"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// Client is what a Shipper needs of the controller: the machine's
// credential's AgentService.
type Client interface {
	ShipLogs(ctx context.Context, in *pb.ShipLogsRequest, opts ...grpc.CallOption) (*pb.ShipLogsResponse, error)
}

// The shape of the shipper's calls: a line reaches the controller within
// about gather of being logged while the controller answers.
const (
	batchLines = 1000
	batchBytes = 1 << 20
	gather     = 100 * time.Millisecond
	// callTimeout bounds one call: the lines of a call that fails are
	// dropped (and counted), so a slow controller costs lines, never the
	// agent's memory or time.
	callTimeout = 5 * time.Second
	// pause is how long the shipper waits after a failed call (the
	// controller away): the buffer keeps the newest lines meanwhile.
	pause = time.Second
)

// Shipper sends a Buffer's lines to the controller, one call at a time.
type Shipper struct {
	buf *Buffer
	api Client
}

// NewShipper makes a Shipper of buf's lines through api.
func NewShipper(buf *Buffer, api Client) *Shipper { return &Shipper{buf: buf, api: api} }

// Run ships lines until ctx ends.
func (s *Shipper) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.buf.ready:
		}
		// Let a burst gather into one call.
		select {
		case <-ctx.Done():
			return
		case <-time.After(gather):
		}
		for {
			lines, dropped := s.buf.take(batchLines, batchBytes)
			if len(lines) == 0 && dropped == 0 {
				break
			}
			cctx, cancel := context.WithTimeout(ctx, callTimeout)
			_, err := s.api.ShipLogs(cctx, &pb.ShipLogsRequest{Lines: lines, Dropped: dropped})
			cancel()
			if err != nil {
				// Not logged: the line would be shipped, and fail, again.
				s.buf.lost(dropped + int64(len(lines)))
				select {
				case <-ctx.Done():
					return
				case <-time.After(pause):
				}
				break
			}
			s.buf.shipped(len(lines))
			if len(lines) < batchLines {
				break
			}
		}
	}
}
