package main

import (
	"strings"
	"testing"
)

// The rollout flags: gates made from their specs, a command with commas
// kept whole; nonsense refused naming the flag.
func TestRolloutFlagsParse(t *testing.T) {
	f := rolloutFlags{gates: []string{"orly=/usr/local/bin/orly --zones a,b", "web=https://gate.example/ask"}, revisionHistory: 10}
	gates, err := f.parse()
	if err != nil || len(gates) != 2 || gates[0].Name() != "orly" || gates[1].Name() != "web" {
		t.Fatalf("parse(%+v) = %v, %v; want the gates orly and web", f, gates, err)
	}
	for _, tt := range []struct {
		f    rolloutFlags
		want string
	}{
		{rolloutFlags{gates: []string{"orly"}, revisionHistory: 10}, "--rollout-gate: "},
		{rolloutFlags{gates: []string{"orly=http://x"}, revisionHistory: 10}, "must be https://"},
		{rolloutFlags{gates: []string{"a=/bin/true", "a=/bin/false"}, revisionHistory: 10}, `gate "a" given twice`},
		{rolloutFlags{revisionHistory: 0}, "--revision-history 0: want 1 to 100"},
		{rolloutFlags{revisionHistory: 101}, "--revision-history 101"},
	} {
		if _, err := tt.f.parse(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("parse(%+v) = %v, want an error saying %q", tt.f, err, tt.want)
		}
	}
}
