package state

import (
	"slices"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
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

// A removal's or a departure's witness is one of its unit's siblings (the
// units numbered one off, on its machine, going at the same time) only
// when no other candidate is there.
func TestWitnessAvoidsSiblings(t *testing.T) {
	if got := siblingKeys("bench/40", UnitKey); !slices.Equal(got, []string{"units/bench/41", "units/bench/39"}) {
		t.Errorf("siblingKeys(bench/40) = %q", got)
	}
	if got := siblingKeys("bench/0", UnitKey); !slices.Equal(got, []string{"units/bench/1"}) {
		t.Errorf("siblingKeys(bench/0) = %q", got)
	}
	self, sibs := "units/bench/40", siblingKeys("bench/40", UnitKey)
	for range 50 {
		if w := witness(kvs(self, "units/bench/41", "units/bench/56", "units/bench/39"), self, sibs...); string(w.Key) != "units/bench/56" {
			t.Fatalf("witness = %s, want units/bench/56, the one not a sibling", w.Key)
		}
	}
	if w := witness(kvs(self, "units/bench/41"), self, sibs...); w == nil || string(w.Key) != "units/bench/41" {
		t.Errorf("witness = %v, want units/bench/41, a sibling but the only one", w)
	}
	if w := witness(kvs(self), self, sibs...); w != nil {
		t.Errorf("witness = %s, want none", w.Key)
	}
}

// A removal's or a departure's witness is among its unit's neighbours
// furthest by number that are there: units numbered close together go
// together, and a witness gone before the change commits costs another
// attempt.
func TestFarthestProbes(t *testing.T) {
	keys := func(kvs []*mvccpb.KeyValue) []string {
		var out []string
		for _, kv := range kvs {
			out = append(out, string(kv.Key))
		}
		return out
	}
	for _, tt := range []struct {
		unit  string
		found []string
		want  []string
	}{
		{"bench/300", []string{"units/bench/301", "units/bench/316", "units/bench/556", "units/bench/44"}, []string{"units/bench/556", "units/bench/44"}},
		{"bench/300", []string{"units/bench/301", "units/bench/316", "units/bench/556"}, []string{"units/bench/556"}},
		{"bench/3", []string{"scopes/0/bench/4", "scopes/0/bench/2"}, []string{"scopes/0/bench/4", "scopes/0/bench/2"}},
		{"bench/3", []string{"scopes/0/bench/4"}, []string{"scopes/0/bench/4"}},
		{"bench/3", nil, nil},
	} {
		if got := keys(farthestProbes(kvs(tt.found...), tt.unit)); !slices.Equal(got, tt.want) {
			t.Errorf("farthestProbes(%q, %s) = %q, want %q", tt.found, tt.unit, got, tt.want)
		}
	}
}

// A removal reads its unit's farthest neighbours first and the nearer
// ones only when none of those is there; for a unit numbered low, the
// first are all those that could be farther than its farthest below.
func TestProbeStages(t *testing.T) {
	for _, tt := range []struct {
		unit        string
		first, rest []int64
	}{
		{"bench/5000", []int64{1024, -1024}, []int64{1, -1, 16, -16, 64, -64, 256, -256}},
		{"bench/1024", []int64{1024, -1024}, []int64{1, -1, 16, -16, 64, -64, 256, -256}},
		{"bench/1023", []int64{256, -256, 1024, -1024}, []int64{1, -1, 16, -16, 64, -64}},
		{"bench/100", []int64{64, -64, 256, -256, 1024, -1024}, []int64{1, -1, 16, -16}},
		{"bench/0", witnessProbes, nil},
		{"bench/x", witnessProbes, nil},
	} {
		first, rest := probeStages(tt.unit)
		if !slices.Equal(first, tt.first) || !slices.Equal(rest, tt.rest) {
			t.Errorf("probeStages(%s) = %v, %v; want %v, %v", tt.unit, first, rest, tt.first, tt.rest)
		}
	}
}

// kvs returns key-values of the keys, as a read returns them.
func kvs(keys ...string) []*mvccpb.KeyValue {
	var out []*mvccpb.KeyValue
	for _, k := range keys {
		out = append(out, &mvccpb.KeyValue{Key: []byte(k)})
	}
	return out
}
