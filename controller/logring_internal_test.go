package controller

import (
	"fmt"
	"testing"

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
