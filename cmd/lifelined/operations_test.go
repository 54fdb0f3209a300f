package main

import (
	"testing"
	"time"
)

func TestParseAge(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want time.Duration
	}{
		{"14d", 14 * 24 * time.Hour},
		{"1d", 24 * time.Hour},
		{"336h", 336 * time.Hour},
		{" 90m ", 90 * time.Minute},
	} {
		if got, err := parseAge("--operation-retention", tt.in); err != nil || got != tt.want {
			t.Errorf("parseAge(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
	for _, in := range []string{"", "0", "0d", "-1d", "14 days", "d", "1000"} {
		if got, err := parseAge("--operation-retention", in); err == nil {
			t.Errorf("parseAge(%q) = %v, want an error", in, got)
		}
	}
}

// The operations' flags: defaults valid, nonsense refused.
func TestOperationFlagsValidate(t *testing.T) {
	ok := operationFlags{taskLostAfter: time.Minute, retention: "14d", approvalTTL: 24 * time.Hour}
	if err := ok.validate(); err != nil {
		t.Errorf("validate(%+v) = %v, want nil", ok, err)
	}
	for _, f := range []operationFlags{
		{taskLostAfter: 0, retention: "14d", approvalTTL: time.Hour},
		{taskLostAfter: time.Minute, retention: "0d", approvalTTL: time.Hour},
		{taskLostAfter: time.Minute, retention: "14d", approvalTTL: -time.Hour},
	} {
		if err := f.validate(); err == nil {
			t.Errorf("validate(%+v) = nil, want an error", f)
		}
	}
}
