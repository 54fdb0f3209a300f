package main

import (
	"testing"
	"time"

	"github.com/lifelinehq/lifeline/state"
)

func TestParseRetention(t *testing.T) {
	const day = 24 * time.Hour
	for _, tt := range []struct {
		in   string
		want state.AuditRetention
	}{
		{"90d,1000000", state.AuditRetention{MaxAge: 90 * day, MaxEntries: 1_000_000}},
		{"7d", state.AuditRetention{MaxAge: 7 * day, MaxEntries: 1_000_000}},
		{"5000", state.AuditRetention{MaxAge: 90 * day, MaxEntries: 5000}},
		{"48h, 10", state.AuditRetention{MaxAge: 48 * time.Hour, MaxEntries: 10}},
	} {
		got, err := parseRetention(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("parseRetention(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
	for _, in := range []string{"", "0", "-1d", "90 days", "0s,10", "x,y"} {
		if got, err := parseRetention(in); err == nil {
			t.Errorf("parseRetention(%q) = %+v, want an error", in, got)
		}
	}
}
