package charm

import (
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
