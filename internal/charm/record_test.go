package charm

import (
	"bytes"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"
)

func TestRecordRoundTripsConfig(t *testing.T) {
	c, err := ReadDir("testdata/kv")
	if err != nil {
		t.Fatal(err)
	}
	rec := c.Record()
	if rec.Name != c.Meta.Name || len(rec.Endpoints) != len(c.Meta.Endpoints()) {
		t.Errorf("Record() = %v, want the charm's name and endpoints", rec)
	}
	back := ConfigFromOptions(rec.Options)
	if len(back.Options) != len(c.Config.Options) {
		t.Fatalf("ConfigFromOptions(Record().Options) has %d options, want %d", len(back.Options), len(c.Config.Options))
	}
	for name, v := range c.Config.Defaults() {
		if got := back.Defaults()[name]; !proto.Equal(got, v) {
			t.Errorf("default of %s after a round trip = %v, want %v", name, got, v)
		}
	}
}

// A packed charm's record holds its actions.yaml, which parses to the
// actions the charm was read with; a charm without one has none.
func TestRecordKeepsActions(t *testing.T) {
	for _, tc := range []struct {
		dir  string
		want []string
	}{
		{"../../examples/charms/kv", []string{"backup", "keys", "reindex"}},
		{"testdata/logger", nil},
	} {
		var buf bytes.Buffer
		if _, err := Pack(tc.dir, &buf); err != nil {
			t.Fatal(err)
		}
		c, _, err := ReadArchive(&buf, 0)
		if err != nil {
			t.Fatal(err)
		}
		rec := c.Record()
		if len(tc.want) == 0 {
			if len(rec.ActionsYaml) != 0 {
				t.Errorf("Record() of %s has actions.yaml %q, want none", tc.dir, rec.ActionsYaml)
			}
			continue
		}
		a, err := ParseActions(rec.ActionsYaml)
		if err != nil {
			t.Fatalf("ParseActions(Record().ActionsYaml) of %s: %v", tc.dir, err)
		}
		if got := a.Names(); !slices.Equal(got, tc.want) {
			t.Errorf("ParseActions(Record().ActionsYaml) of %s = %v, want %v", tc.dir, got, tc.want)
		}
	}
}
