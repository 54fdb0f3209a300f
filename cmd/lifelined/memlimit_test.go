package main

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
)

func TestParseMemoryLimit(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want int64
	}{
		{"auto", 0}, {"none", math.MaxInt64}, {"512MiB", 512 << 20}, {"2GiB", 2 << 30},
		{"1TiB", 1 << 40}, {"64KiB", 64 << 10}, {"1000000B", 1000000},
	} {
		got, err := parseMemoryLimit(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("parseMemoryLimit(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{"", "2G", "2gib", "-1MiB", "0MiB", "MiB", "9999999999TiB", "lots"} {
		if _, err := parseMemoryLimit(bad); err == nil {
			t.Errorf("parseMemoryLimit(%q) succeeded", bad)
		}
	}
}

// TestMemoryBudget: the limit follows the most units the model has had,
// never falls under twice the live heap, and stays as it was when the
// count fails.
func TestMemoryBudget(t *testing.T) {
	var units, live, set int64
	var countErr error
	sets := 0
	b := &memoryBudget{floor: 100, perUnit: 10,
		units: func(context.Context) (int64, error) { return units, countErr },
		live:  func() int64 { return live },
		set:   func(l int64) int64 { set = l; sets++; return 0 },
	}
	ctx := context.Background()
	for _, step := range []struct {
		units, live int64
		fail        bool
		want        int64
		wantSets    int
	}{
		{0, 10, false, 100, 1},
		{50, 100, false, 600, 2},
		{50, 100, false, 600, 2}, // unchanged: not set again
		{50, 400, false, 800, 3}, // the live heap outgrew the budget
		{10, 10, true, 800, 3},   // no count: as it was
		{10, 10, false, 600, 4},  // units gone: the limit stays for the most there were
		{80, 10, false, 900, 5},  // more units than ever: it rises
	} {
		units, live = step.units, step.live
		countErr = nil
		if step.fail {
			countErr = errors.New("etcd away")
		}
		err := b.update(ctx)
		if (err != nil) != step.fail {
			t.Errorf("%+v: update = %v", step, err)
		}
		if set != step.want || sets != step.wantSets {
			t.Errorf("%+v: limit %d set %d times, want %d set %d times", step, set, sets, step.want, step.wantSets)
		}
	}
}

// TestParseSizeFlag: the size flags read bytes or a binary suffix, and
// "none" or 0 as no limit where the flag has one.
func TestParseSizeFlag(t *testing.T) {
	for _, tt := range []struct {
		in   string
		none bool
		want int64
	}{
		{"64MiB", false, 64 << 20}, {"2GiB", true, 2 << 30}, {"1048576", false, 1 << 20},
		{"512B", false, 512}, {"1TiB", false, 1 << 40}, {"none", true, -1}, {"0", true, -1},
	} {
		if got, err := parseSizeFlag("--x", tt.in, tt.none); err != nil || got != tt.want {
			t.Errorf("parseSizeFlag(%q, %v) = %d, %v; want %d", tt.in, tt.none, got, err, tt.want)
		}
	}
	for _, bad := range []struct {
		in   string
		none bool
	}{{"none", false}, {"0", false}, {"", true}, {"2G", true}, {"-1MiB", true}, {"0MiB", true}, {"9999999999TiB", true}, {"lots", true}} {
		if n, err := parseSizeFlag("--x", bad.in, bad.none); err == nil || !strings.HasPrefix(err.Error(), `--x "`+bad.in+`"`) {
			t.Errorf("parseSizeFlag(%q, %v) = %d, %v; want an error naming the flag and the value", bad.in, bad.none, n, err)
		}
	}
}
