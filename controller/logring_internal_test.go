package controller

import (
	"fmt"
	"io"
	"testing"

	"github.com/hashicorp/go-hclog"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

func ringLine(entity, machine, level string, i int) *pb.LogLine {
	return &pb.LogLine{Entity: entity, Machine: machine, Level: level, Message: fmt.Sprintf("line %d", i)}
}

func all(*pb.LogLine) bool { return true }

// The ring holds at most its lines and bytes, and one source at most an
// eighth of them, dropping the oldest; a reader behind is told how many
// it missed.
func TestLogRingBounds(t *testing.T) {
	r := newLogRing(LogRingLimits{Lines: 80, Bytes: 1 << 20})
	for i := range 5 {
		r.add("machine-1", ringLine("machine-1", "1", "info", i))
	}
	// machine-2 floods: it keeps only its share (10 lines), and
	// machine-1's lines stay.
	for i := range 1000 {
		r.add("machine-2", ringLine("kv/0", "2", "info", i))
	}
	live, _, by := r.counts()
	if by["machine-1"] != 5 || by["machine-2"] != 10 || live != 15 {
		t.Fatalf("counts = %d %v, want machine-1's 5 and machine-2's 10", live, by)
	}
	got, _ := r.last(100, all)
	if len(got) != 15 || got[0].Message != "line 0" || got[14].Message != "line 999" {
		t.Errorf("last(100) = %d lines from %q to %q, want 15 from line 0 to line 999", len(got), got[0].Message, got[len(got)-1].Message)
	}
	if n := len(r.all) - r.head; n > 2*live+1024 {
		t.Errorf("the ring holds %d entries for %d live lines", n, live)
	}

	// Many sources fill the whole ring: its oldest lines go.
	r = newLogRing(LogRingLimits{Lines: 80, Bytes: 1 << 20})
	for i := range 200 {
		m := fmt.Sprint(i % 20)
		r.add("machine-"+m, ringLine("machine-"+m, m, "info", i))
	}
	live, _, _ = r.counts()
	if live != 80 {
		t.Errorf("live lines = %d, want 80", live)
	}
	lines, next, skipped, _ := r.since(0, ^uint64(0), 1000, all)
	if skipped != 120 || len(lines) != 80 || next != 200 || lines[0].Message != "line 120" {
		t.Errorf("since(0) = %d lines from %q, next %d, skipped %d; want 80 from line 120, next 200, skipped 120", len(lines), lines[0].Message, next, skipped)
	}

	// Bytes bound too.
	r = newLogRing(LogRingLimits{Lines: 1000, Bytes: 8 * 1024})
	big := &pb.LogLine{Entity: "kv/0", Level: "info", Message: string(make([]byte, 900))}
	for range 100 {
		r.add(fmt.Sprint("src", len(r.bySrc)%16), big)
	}
	if _, bytes, _ := r.counts(); bytes > 8*1024 {
		t.Errorf("ring bytes = %d, want at most 8 KiB", bytes)
	}
}

// The filters: include and exclude by unit, service, machine and
// controller, and the least level.
func TestLogFilter(t *testing.T) {
	lines := []*pb.LogLine{
		ringLine("machine-1", "1", "info", 0),
		ringLine("kv/0", "1", "info", 1),
		ringLine("kv/1", "2", "debug", 2),
		ringLine("web/0", "2", "warn", 3),
		ringLine("controller-a", "", "error", 4),
	}
	for _, tc := range []struct {
		req  *pb.DebugLogRequest
		want string
	}{
		{&pb.DebugLogRequest{}, "0 1 3 4"},
		{&pb.DebugLogRequest{Level: "debug"}, "0 1 2 3 4"},
		{&pb.DebugLogRequest{Level: "warn"}, "3 4"},
		{&pb.DebugLogRequest{Include: []string{"kv/0"}}, "1"},
		{&pb.DebugLogRequest{Include: []string{"kv"}, Level: "trace"}, "1 2"},
		{&pb.DebugLogRequest{Include: []string{"machine-2"}, Level: "trace"}, "2 3"},
		{&pb.DebugLogRequest{Include: []string{"controller", "machine-1"}}, "0 1 4"},
		{&pb.DebugLogRequest{Exclude: []string{"kv"}}, "0 3 4"},
		{&pb.DebugLogRequest{Include: []string{"machine-1"}, Exclude: []string{"kv/0"}}, "0"},
	} {
		f, err := newLogFilter(tc.req)
		if err != nil {
			t.Fatalf("newLogFilter(%v) = %v", tc.req, err)
		}
		var got string
		for i, l := range lines {
			if f.keep(l) {
				got += fmt.Sprint(" ", i)
			}
		}
		if got != " "+tc.want {
			t.Errorf("filter %v keeps%s, want %s", tc.req, got, tc.want)
		}
	}
	for _, req := range []*pb.DebugLogRequest{
		{Include: []string{"kv/x"}},
		{Exclude: []string{"Bad Name"}},
		{Level: "loud"},
		{Level: "off"},
		{Include: make([]string, 101)},
	} {
		if _, err := newLogFilter(req); err == nil {
			t.Errorf("newLogFilter(%v) = nil error, want one", req)
		}
	}
}

// DebugLog's replay starts at the oldest line kept without counting the
// lines dropped before as missed; a follower behind is told.
func TestLogRingSinceSkips(t *testing.T) {
	r := newLogRing(LogRingLimits{Lines: 16, Bytes: 1 << 20})
	for i := range 100 {
		r.add(fmt.Sprint("src", i%8), ringLine("kv/0", "", "info", i))
	}
	lines, next, skipped, _ := r.since(90, r.newest(), 5, all)
	if len(lines) != 5 || lines[0].Message != "line 90" || next != 95 || skipped != 0 {
		t.Errorf("since(90, 5) = %d lines from %q, next %d, skipped %d; want 5 from line 90, next 95, none skipped", len(lines), lines[0].Message, next, skipped)
	}
	lines, _, skipped, _ = r.since(50, r.newest(), 100, all)
	if len(lines) != 16 || skipped != 34 {
		t.Errorf("since(50) = %d lines, skipped %d; want 16, 34", len(lines), skipped)
	}
	none := func(*pb.LogLine) bool { return false }
	if lines, next, _, _ := r.since(0, r.newest(), 100, none); len(lines) != 0 || next != 100 {
		t.Errorf("since(0) with nothing kept = %d lines, next %d; want 0, 100", len(lines), next)
	}
}

// The controller's own lines go into the ring through its sink, at its
// level and above, and the controller filter finds them.
func TestControllerLogSink(t *testing.T) {
	r := newLogRing(LogRingLimits{})
	l := hclog.NewInterceptLogger(&hclog.LoggerOptions{Output: io.Discard, Level: hclog.Info})
	l.RegisterSink(&controllerSink{ring: r, entity: "controller-c1", level: hclog.Info})
	l.Named("api").Info("deployed", "service", "kv")
	l.Debug("below the level")
	f, err := newLogFilter(&pb.DebugLogRequest{Include: []string{"controller"}, Level: "trace"})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := r.last(10, f.keep)
	if len(got) != 1 || got[0].Entity != "controller-c1" || got[0].Module != "api" || got[0].Message != "deployed" ||
		len(got[0].Fields) != 1 || got[0].Fields[0].Value != "kv" {
		t.Errorf("the controller's lines = %v, want its one info line", got)
	}
}
