package main

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// TestJSONLogLine: --format json prints a line as one object a line, its
// fields in an object, any text escaped.
func TestJSONLogLine(t *testing.T) {
	at := time.Date(2026, 12, 2, 21, 20, 1, 123000000, time.UTC)
	l := &pb.LogLine{Entity: "kv/0", Machine: "3", Level: "info", Time: at.UnixNano(), Module: "unit",
		Message: "hook ran\n\"quoted\"", Fields: []*pb.LogField{{Key: "hook", Value: "install"}, {Key: "duration", Value: "1.2s"}}}
	out := jsonLogLine(l)
	if strings.Count(out, "\n") != 1 || !strings.HasSuffix(out, "}\n") {
		t.Fatalf("jsonLogLine = %q, want one object on one line", out)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("jsonLogLine = %q: %v", out, err)
	}
	want := map[string]any{
		"entity": "kv/0", "machine": "3", "time": "2026-12-02T21:20:01.123Z", "level": "info", "module": "unit",
		"message": "hook ran\n\"quoted\"", "fields": map[string]any{"hook": "install", "duration": "1.2s"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("jsonLogLine = %v, want %v", got, want)
	}
	if out := jsonLogLine(&pb.LogLine{Entity: "controller-a", Level: "warn", Message: "m"}); strings.Contains(out, "fields") || strings.Contains(out, "machine") {
		t.Errorf("jsonLogLine without fields or machine = %q, want neither key", out)
	}
}
