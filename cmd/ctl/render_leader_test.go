package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// TestRenderLeader: the service's leader is marked "kv/0*" in the units
// table, as Juju marks it, and "leader": true in JSON; the others are
// not.
func TestRenderLeader(t *testing.T) {
	st := sampleStatus()
	for _, s := range st.Services {
		for _, u := range s.Units {
			u.Leader = u.Name == "kv/0"
		}
	}
	var buf bytes.Buffer
	if err := renderStatus(&buf, st, formatTabular); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if !strings.Contains(out, "kv/0*") {
		t.Errorf("tabular status does not mark kv/0 leader:\n%s", out)
	}
	if strings.Count(out, "*") != 1 {
		t.Errorf("tabular status marks more than the leader:\n%s", out)
	}
	buf.Reset()
	if err := renderStatus(&buf, st, formatJSON); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Services map[string]struct {
			Units map[string]struct {
				Leader *bool `json:"leader"`
			} `json:"units"`
		} `json:"services"`
	}
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	for svc, s := range doc.Services {
		for name, u := range s.Units {
			if want := name == "kv/0"; (u.Leader != nil && *u.Leader) != want || (!want && u.Leader != nil) {
				t.Errorf("JSON %s unit %s: leader %v, want %v (omitted when false)", svc, name, u.Leader, want)
			}
		}
	}
}
