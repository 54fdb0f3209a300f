package hooks

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// TestLineWriter splits writes into lines, whatever their chunks, and cuts
// lines longer than maxLineBytes.
func TestLineWriter(t *testing.T) {
	long := strings.Repeat("x", maxLineBytes)
	tests := []struct {
		name   string
		writes []string
		want   []string
	}{
		{"one write", []string{"a\nb\n"}, []string{"a", "b"}},
		{"split lines", []string{"he", "llo\nwor", "ld\n"}, []string{"hello", "world"}},
		{"no final newline", []string{"a\nb"}, []string{"a", "b"}},
		{"empty lines and CRLF", []string{"\n\r\nc\r\n"}, []string{"", "", "c"}},
		{"exactly the limit", []string{long + "\n"}, []string{long}},
		{"over the limit", []string{long, "yz\n"}, []string{long, "yz"}},
		{"twice the limit", []string{long + long + "!"}, []string{long, long, "!"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := newOutput(hclog.NewNullLogger(), 10)
			w := out.stream("stdout")
			for _, s := range tt.writes {
				if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
					t.Fatalf("Write(%d bytes) = %d, %v", len(s), n, err)
				}
			}
			w.flush()
			if got := out.lines(); !slices.Equal(got, tt.want) {
				t.Errorf("lines after %d writes = %.80q, want %.80q", len(tt.writes), got, tt.want)
			}
		})
	}
}

func TestOutputKeepsTheLastLines(t *testing.T) {
	tests := []struct {
		keep, lines int
		want        []string
	}{
		{3, 2, []string{"0", "1"}},
		{3, 3, []string{"0", "1", "2"}},
		{3, 7, []string{"4", "5", "6"}},
		{1, 5, []string{"4"}},
	}
	for _, tt := range tests {
		out := newOutput(hclog.NewNullLogger(), tt.keep)
		for i := range tt.lines {
			out.line("stdout", strconv.Itoa(i))
		}
		if got := out.lines(); !slices.Equal(got, tt.want) {
			t.Errorf("lines() keeping %d of %d = %q, want %q", tt.keep, tt.lines, got, tt.want)
		}
	}
}
