package state

import (
	"slices"
	"testing"
)

func TestWitnessWindows(t *testing.T) {
	for _, tt := range []struct {
		unit string
		want []string
	}{
		{"bench/1234", []string{"units/bench/123", "units/bench/12", "units/bench/1"}},
		{"bench/40", []string{"units/bench/4"}},
		{"bench/7", nil},
		{"", nil},
	} {
		if got := witnessWindows(tt.unit, UnitKey); !slices.Equal(got, tt.want) {
			t.Errorf("witnessWindows(%q) = %q, want %q", tt.unit, got, tt.want)
		}
	}
}
