package agentwatch

import (
	"context"
	"fmt"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"

	"github.com/lifelinehq/lifeline/controller"
	"github.com/lifelinehq/lifeline/internal/testing/controllertest"
	"github.com/lifelinehq/lifeline/internal/testing/syncbuf"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// gatedAPI is a real AgentService client whose first WatchMany stream
// stops handing out responses, after the first, until open is closed: an
// agent too slow to read, as far as the controller can tell.
type gatedAPI struct {
	pb.AgentServiceClient
	open     chan struct{}
	streams  atomic.Int32
	received atomic.Int32
}

func (g *gatedAPI) WatchMany(ctx context.Context, opts ...grpc.CallOption) (grpc.BidiStreamingClient[pb.WatchManyRequest, pb.WatchManyResponse], error) {
	stream, err := g.AgentServiceClient.WatchMany(ctx, opts...)
	if err != nil || g.streams.Add(1) > 1 {
		return stream, err
	}
	return &gatedStream{BidiStreamingClient: stream, g: g}, nil
}

type gatedStream struct {
	grpc.BidiStreamingClient[pb.WatchManyRequest, pb.WatchManyResponse]
	g *gatedAPI
}

func (s *gatedStream) Recv() (*pb.WatchManyResponse, error) {
	if s.g.received.Add(1) > 1 {
		<-s.g.open
	}
	return s.BidiStreamingClient.Recv()
}

// TestMuxResumesAfterTheControllerCutsItsStream: an agent that stops
// reading its stream while its service's configuration changes, 20 KiB a
// change, has its stream cut by the controller once the changes held for
// it pass the stream's budget (256 KiB here). When it reads again it
// finds the cut, says so in its log, opens a new stream and resumes after
// the last revision it received: its Follow sees every configuration it
// was sent, in order, up to the last.
func TestMuxResumesAfterTheControllerCutsItsStream(t *testing.T) {
	m := newModelWith(t, controllertest.Options{Watch: controller.WatchLimits{StreamBytes: 256 << 10}})
	api := &gatedAPI{AgentServiceClient: m.Agent("machine-0"), open: make(chan struct{})}
	var logs syncbuf.Buffer
	mux := runMux(t, NewMux(api, hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Warn})))
	config, _ := record(t, mux.follower(hclog.NewNullLogger()), &pb.WatchSubject{Subject: &pb.WatchSubject_ServiceConfig{ServiceConfig: "kv"}})
	poll.Until(t, "the listing", func() bool { return len(config.changes()) > 0 })

	// 200 changes of 20 KiB: past what gRPC's flow control lets the
	// controller send, past the budget.
	big := strings.Repeat("x", 20<<10)
	const changes = 200
	for i := range changes {
		m.setConfig(fmt.Sprintf("%03d %s", i, big))
	}
	poll.Until(t, "the stream cut", func() bool { return m.Hub().Stats().CutsStream > 0 })
	close(api.open)
	last := fmt.Sprintf("%03d ", changes-1)
	poll.Until(t, "the last configuration", func() bool {
		config.mu.Lock()
		defer config.mu.Unlock()
		n := len(config.resps)
		return n > 0 && strings.HasPrefix(nameOf(config.resps[n-1]), last)
	})
	// Every configuration seen once at most, in order.
	config.mu.Lock()
	prev := ""
	for _, resp := range config.resps {
		name := nameOf(resp)
		if name == "" || resp.Relisted {
			continue
		}
		if name[:3] <= prev {
			t.Errorf("configuration %s after %s", name[:3], prev)
		}
		prev = name[:3]
	}
	config.mu.Unlock()
	if n := api.streams.Load(); n < 2 {
		t.Errorf("the Mux opened %d streams, want a new one after the cut", n)
	}
	if !strings.Contains(logs.String(), "watch stream cut by the controller") {
		t.Errorf("the agent's log does not say its stream was cut:\n%s", logs.String())
	}
}

// nameOf is the name in a configuration response's last change.
func nameOf(resp *pb.WatchResponse) string {
	if n := len(resp.Changes); n > 0 {
		return resp.Changes[n-1].GetConfig().GetValues()["name"].GetStringValue()
	}
	return ""
}
