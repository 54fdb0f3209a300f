package machineagent_test

import (
	"context"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"

	"github.com/lifelinehq/lifeline/internal/logship"
	"github.com/lifelinehq/lifeline/internal/testing/controllertest"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
	"github.com/lifelinehq/lifeline/machineagent"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/unitagent"
)

// runShipping runs a machine agent for m whose logger's lines go
// through a logship buffer to ship (given the agent's own client: a
// credential issued again would revoke its); it stops when the test
// ends.
func runShipping(t *testing.T, env *controllertest.Env, m string, ship func(pb.AgentServiceClient) logship.Client) *logship.Buffer {
	t.Helper()
	dir := t.TempDir()
	api := env.Agent("machine-" + m)
	logger := hclog.NewInterceptLogger(&hclog.LoggerOptions{Output: io.Discard, Level: hclog.Info})
	buf := logship.NewBuffer(m, hclog.Info, 0, 0)
	logger.RegisterSink(buf)
	a, err := machineagent.New(machineagent.Config{
		MachineID: m, DataDir: dir, Address: "127.0.0.1", API: api,
		DialUnit: func(cred *machineagent.UnitCredential) (unitagent.API, io.Closer, error) {
			return dialUnits(env)(cred)
		},
		Lifelined: lifelined, Logger: logger, Logs: logship.NewShipper(buf, ship(api)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		os.RemoveAll(dir)
	})
	return buf
}

// The machine agent ships its units' hook lines to the controller, whose
// DebugLog shows them.
func TestMachineAgentShipsLogs(t *testing.T) {
	env, op, m := twoUnitsOnAMachine(t)
	runShipping(t, env, m, func(api pb.AgentServiceClient) logship.Client { return api })
	poll.Until(t, "kv/0's install hook line in the debug log", func() bool {
		stream, err := op.DebugLog(env.Ctx, &pb.DebugLogRequest{Include: []string{"kv/0"}, Replay: true})
		if err != nil {
			t.Fatal(err)
		}
		for {
			resp, err := stream.Recv()
			if err == io.EOF {
				return false
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range resp.Lines {
				if l.Message == "hook ran" && l.Machine == m && l.Level == "info" && fieldOf(l, "hook") == "install" &&
					fieldOf(l, "status") == "exited 0" && fieldOf(l, "duration") != "" {
					return true
				}
			}
		}
	})
}

func fieldOf(l *pb.LogLine, key string) string {
	for _, f := range l.Fields {
		if f.Key == key {
			return f.Value
		}
	}
	return ""
}

// deaf is a controller that takes ShipLogs calls and never answers them.
type deaf struct{}

func (deaf) ShipLogs(ctx context.Context, _ *pb.ShipLogsRequest, _ ...grpc.CallOption) (*pb.ShipLogsResponse, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// A controller that does not take the agent's lines holds up neither the
// agent nor its hooks: the units reach running, and their lines are
// dropped, counted.
func TestMachineAgentShipsToADeafController(t *testing.T) {
	env, op, m := twoUnitsOnAMachine(t)
	runShipping(t, env, m, func(pb.AgentServiceClient) logship.Client { return deaf{} })
	poll.Until(t, "both units running", func() bool {
		st, err := op.Status(env.Ctx, &pb.StatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Status.Services) != 1 || len(st.Status.Services[0].Units) != 2 {
			return false
		}
		for _, u := range st.Status.Services[0].Units {
			if u.State != "running" {
				return false
			}
		}
		return true
	})
	stream, err := op.DebugLog(env.Ctx, &pb.DebugLogRequest{Include: []string{"machine-" + m}, Replay: true})
	if err != nil {
		t.Fatal(err)
	}
	for {
		resp, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, l := range resp.Lines {
			got = append(got, l.Message)
		}
		t.Errorf("the controller shows lines of machine %s it never took: %s", m, strings.Join(got, "; "))
	}
}
