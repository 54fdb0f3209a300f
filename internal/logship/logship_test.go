package logship

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"

	"github.com/lifelinehq/lifeline/internal/testing/poll"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// A Buffer keeps the newest lines within its bounds and counts those it
// dropped; a "unit" field makes the line the unit's.
func TestBufferBounds(t *testing.T) {
	b := NewBuffer("3", hclog.Info, 100, 1<<20)
	l := hclog.NewInterceptLogger(&hclog.LoggerOptions{Output: hclog.DefaultOutput, Level: hclog.Off})
	l.RegisterSink(b)
	ul := l.Named("unit").With("unit", "kv/0")
	for i := range 250 {
		ul.Info("hook ran", "i", i)
	}
	l.Debug("below the level")
	l.Info("machine line")
	lines, dropped := b.take(1000, 1<<20)
	if len(lines) != 100 || dropped != 151 {
		t.Fatalf("take = %d lines, %d dropped; want 100, 151", len(lines), dropped)
	}
	if first := lines[0]; first.Entity != "kv/0" || first.Level != "info" || first.Fields[1].Value != "151" {
		t.Errorf("first line = %v, want kv/0's line 151", first)
	}
	if last := lines[99]; last.Entity != "machine-3" || last.Message != "machine line" {
		t.Errorf("last line = %v, want machine-3's", last)
	}
	if lines, dropped := b.take(1000, 1<<20); len(lines) != 0 || dropped != 0 {
		t.Errorf("take again = %d lines, %d dropped; want none", len(lines), dropped)
	}

	b = NewBuffer("3", hclog.Info, 1000, 10<<10)
	l.RegisterSink(b)
	big := string(make([]byte, 2000))
	for range 100 {
		l.Info(big)
	}
	if b.bytes > 10<<10 || len(b.lines) > 5 {
		t.Errorf("buffer holds %d lines, %d bytes; want at most 10 KiB", len(b.lines), b.bytes)
	}
}

// stuck is a controller that never answers.
type stuck struct{ calls atomic.Int64 }

func (s *stuck) ShipLogs(ctx context.Context, _ *pb.ShipLogsRequest, _ ...grpc.CallOption) (*pb.ShipLogsResponse, error) {
	s.calls.Add(1)
	<-ctx.Done()
	return nil, ctx.Err()
}

// A controller that does not answer holds up neither the logger nor
// the shipper's stop: lines beyond the buffer are dropped and counted.
func TestShipperNeverBlocks(t *testing.T) {
	b := NewBuffer("1", hclog.Info, 100, 1<<20)
	l := hclog.NewInterceptLogger(&hclog.LoggerOptions{Output: hclog.DefaultOutput, Level: hclog.Off})
	l.RegisterSink(b)
	api := &stuck{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { NewShipper(b, api).Run(ctx); close(done) }()
	l.Info("first")
	poll.Until(t, "the shipper's first call", func() bool { return api.calls.Load() != 0 })
	// While the call hangs, the logger goes on at full speed.
	for i := range 100000 {
		l.Info("line", "i", i)
	}
	b.mu.Lock()
	n, d := len(b.lines), b.dropped
	b.mu.Unlock()
	if n != 100 || d != 100000-100 {
		t.Errorf("buffer = %d lines, %d dropped; want 100, %d", n, d, 100000-100)
	}
	if got := b.droppedTotal.Load(); got != 100000-100 {
		t.Errorf("lifeline_log_lines_dropped_total = %d, want %d", got, 100000-100)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the shipper did not stop")
	}
}

// recorder is a controller that takes every call.
type recorder struct{ got chan *pb.ShipLogsRequest }

func (r *recorder) ShipLogs(_ context.Context, in *pb.ShipLogsRequest, _ ...grpc.CallOption) (*pb.ShipLogsResponse, error) {
	r.got <- in
	return &pb.ShipLogsResponse{}, nil
}

func TestShipperShips(t *testing.T) {
	b := NewBuffer("1", hclog.Info, 0, 0)
	l := hclog.NewInterceptLogger(&hclog.LoggerOptions{Output: hclog.DefaultOutput, Level: hclog.Off})
	l.RegisterSink(b)
	api := &recorder{got: make(chan *pb.ShipLogsRequest, 10)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go NewShipper(b, api).Run(ctx)
	l.Info("hook ran", "unit", "kv/0", "hook", "install")
	select {
	case req := <-api.got:
		if len(req.Lines) != 1 || req.Lines[0].Entity != "kv/0" || req.Lines[0].Message != "hook ran" {
			t.Errorf("ShipLogs(%v), want kv/0's line", req)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no line shipped")
	}
	poll.UntilSays(t, "lifeline_log_lines_shipped_total 1", func() (bool, string) {
		n := b.shippedTotal.Load()
		return n == 1, fmt.Sprintf("it is %d", n)
	})
}
