package controller_test

import (
	"io"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

func shipLine(entity, level, msg string) *pb.LogLine {
	return &pb.LogLine{Entity: entity, Level: level, Time: time.Now().UnixNano(), Module: "machine-agent", Message: msg,
		Fields: []*pb.LogField{{Key: "hook", Value: "install"}}}
}

// readLog reads a DebugLog stream that ends, its lines' messages in order.
func readLog(t *testing.T, op pb.OperatorServiceClient, m *agentModel, req *pb.DebugLogRequest) []string {
	t.Helper()
	stream, err := op.DebugLog(m.ctx, req)
	m.ok("DebugLog", err)
	var got []string
	for {
		resp, err := stream.Recv()
		if err == io.EOF {
			return got
		}
		m.ok("DebugLog: Recv", err)
		for _, l := range resp.Lines {
			got = append(got, l.Entity+" "+l.Message)
		}
	}
}

// Machine agents ship their lines and their units'; DebugLog sends them
// back filtered, the last ones or all, and follows new ones.
func TestShipLogsAndDebugLog(t *testing.T) {
	m := newAgentModel(t)
	_, err := m.as("machine-2").ShipLogs(m.ctx, &pb.ShipLogsRequest{Lines: []*pb.LogLine{
		shipLine("machine-2", "info", "machine agent started"),
		shipLine("app/0", "info", "hook ran"),
		shipLine("logger/0", "debug", "hook output"),
	}})
	m.ok("ShipLogs(machine-2)", err)
	_, err = m.as("machine-0").ShipLogs(m.ctx, &pb.ShipLogsRequest{Lines: []*pb.LogLine{shipLine("kv/0", "warn", "hook failed")}, Dropped: 3})
	m.ok("ShipLogs(machine-0)", err)

	op := m.admin()
	for _, tc := range []struct {
		req  *pb.DebugLogRequest
		want []string
	}{
		{&pb.DebugLogRequest{Include: []string{"app/0"}}, []string{"app/0 hook ran"}},
		{&pb.DebugLogRequest{Include: []string{"machine-2"}, Level: "debug", Replay: true},
			[]string{"machine-2 machine agent started", "app/0 hook ran", "logger/0 hook output"}},
		{&pb.DebugLogRequest{Include: []string{"machine-0"}},
			[]string{"machine-0 log lines dropped by the machine agent before these", "kv/0 hook failed"}},
		{&pb.DebugLogRequest{Exclude: []string{"controller"}, Lines: 2}, []string{"machine-0 log lines dropped by the machine agent before these", "kv/0 hook failed"}},
		{&pb.DebugLogRequest{Include: []string{"kv"}, Level: "error"}, nil},
	} {
		if got := readLog(t, op, m, tc.req); !equalStrings(got, tc.want) {
			t.Errorf("DebugLog(%v) = %q, want %q", tc.req, got, tc.want)
		}
	}

	// Follow: a line shipped after the stream opened arrives.
	stream, err := op.DebugLog(m.ctx, &pb.DebugLogRequest{Include: []string{"kv/1"}, Follow: true})
	m.ok("DebugLog(follow)", err)
	_, err = m.as("machine-1").ShipLogs(m.ctx, &pb.ShipLogsRequest{Lines: []*pb.LogLine{shipLine("kv/1", "info", "hook ran")}})
	m.ok("ShipLogs(machine-1)", err)
	resp, err := stream.Recv()
	m.ok("DebugLog(follow): Recv", err)
	if len(resp.Lines) != 1 || resp.Lines[0].Message != "hook ran" || resp.Lines[0].Machine != "1" {
		t.Errorf("DebugLog(follow) = %v, want kv/1's line from machine 1", resp.Lines)
	}

	// Refusals change nothing.
	_, err = m.as("unit-kv/0").ShipLogs(m.ctx, &pb.ShipLogsRequest{Lines: []*pb.LogLine{shipLine("kv/0", "info", "x")}})
	wantCode(t, "ShipLogs(as a unit)", err, codes.PermissionDenied, "unit kv/0's agent may not ship log lines: only a machine's agent does")
	_, err = m.as("machine-0").ShipLogs(m.ctx, &pb.ShipLogsRequest{Lines: []*pb.LogLine{shipLine("machine-1", "info", "x")}})
	wantCode(t, "ShipLogs(another machine's lines)", err, codes.InvalidArgument, `log line 0: entity "machine-1": want machine-0 or a unit`)
	_, err = m.as("machine-0").ShipLogs(m.ctx, &pb.ShipLogsRequest{Lines: []*pb.LogLine{shipLine("kv/0", "LOUD", "x")}})
	wantCode(t, "ShipLogs(bad level)", err, codes.InvalidArgument, `log line 0: level "LOUD": want trace, debug, info, warn or error`)
	stream, err = op.DebugLog(m.ctx, &pb.DebugLogRequest{Include: []string{"Bad Name"}})
	m.ok("DebugLog", err)
	_, err = stream.Recv()
	wantCode(t, "DebugLog(bad include)", err, codes.InvalidArgument, `"Bad Name" is not a unit (kv/0), a service (kv), a machine (machine-3) or controller`)
	if got := readLog(t, op, m, &pb.DebugLogRequest{Include: []string{"machine-0"}, Replay: true}); len(got) != 2 {
		t.Errorf("machine-0's lines after the refusals = %q, want the 2 before", got)
	}

	// A machine speaks for its own units: another machine's unit's lines,
	// and a missing unit's, are dropped and said so.
	_, err = m.as("machine-3").ShipLogs(m.ctx, &pb.ShipLogsRequest{Lines: []*pb.LogLine{
		shipLine("kv/0", "info", "forged"), shipLine("app/1", "info", "hook ran"), shipLine("ghost/0", "info", "forged"),
	}})
	m.ok("ShipLogs(machine-3, with others' units)", err)
	if got, want := readLog(t, op, m, &pb.DebugLogRequest{Include: []string{"machine-3"}, Replay: true}),
		[]string{"machine-3 log lines of units not on this machine dropped", "app/1 hook ran"}; !equalStrings(got, want) {
		t.Errorf("machine-3's lines = %q, want %q", got, want)
	}
	if got := readLog(t, op, m, &pb.DebugLogRequest{Include: []string{"kv/0"}, Replay: true}); len(got) != 1 {
		t.Errorf("kv/0's lines = %q, want its own one", got)
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
