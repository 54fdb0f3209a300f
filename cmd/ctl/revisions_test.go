package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

func TestRenderRevisions(t *testing.T) {
	now := time.Unix(10_000, 0)
	kv := &pb.CharmRef{Name: "kv", Revision: 1, Sha256: "ab"}
	resp := &pb.ListRevisionsResponse{Service: "kv", Head: 3, Revisions: []*pb.RevisionBrief{
		{Number: 3, Charm: kv, Reason: "rollback to 1", By: "alice", CreatedUnixNano: now.Add(-90 * time.Second).UnixNano(),
			Changes: []*pb.RevisionChange{{Key: "port", OldValue: "9090", NewValue: "8080"}}},
		{Number: 2, Charm: kv, Reason: "config", By: "bob", CreatedUnixNano: now.Add(-3 * time.Hour).UnixNano(),
			Changes: []*pb.RevisionChange{{Key: "port", OldValue: "8080", NewValue: "9090"}, {Key: "name", NewValue: strings.Repeat("x", 80)}}},
		{Number: 1, Charm: kv, Reason: "deploy", CreatedUnixNano: now.Add(-72 * time.Hour).UnixNano(), Units: 2},
	}}
	var b bytes.Buffer
	if err := renderRevisions(&b, resp, formatTabular, now); err != nil {
		t.Fatal(err)
	}
	want := "Rev  Charm  Reason         By          When    Units  Changes\n" +
		"3    kv-1   rollback to 1  alice       1m ago  0      port 9090→8080\n" +
		"2    kv-1   config         bob         3h ago  0      port 8080→9090, name -→" + strings.Repeat("x", 36) + "…\n" +
		"1    kv-1   deploy         controller  3d ago  2      -\n"
	if b.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", b.String(), want)
	}
	b.Reset()
	if err := renderRevisions(&b, resp, formatJSON, now); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Head      int64 `json:"head"`
		Revisions []struct {
			Number  int64 `json:"number"`
			Units   int32 `json:"units"`
			Changes []struct {
				Key, Old, New string
			} `json:"changes"`
		} `json:"revisions"`
	}
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatalf("%v in %s", err, b.String())
	}
	if doc.Head != 3 || len(doc.Revisions) != 3 || len(doc.Revisions[1].Changes) != 2 || doc.Revisions[1].Changes[1].New != strings.Repeat("x", 80) {
		t.Errorf("json = %s", b.String())
	}
}

func TestRenderRevision(t *testing.T) {
	resp := &pb.ShowRevisionResponse{Head: 4, PreviousKept: true,
		Revision: &pb.RevisionBrief{Number: 2, Charm: &pb.CharmRef{Name: "kv", Revision: 1, Sha256: "ab"}, Reason: "config", By: "bob",
			Changes: []*pb.RevisionChange{{Key: "port", OldValue: "8080", NewValue: "9090"}}},
		Spec: &pb.ServiceSpec{Config: map[string]*pb.ConfigValue{
			"port": {Value: &pb.ConfigValue_IntValue{IntValue: 9090}}, "name": {Value: &pb.ConfigValue_StringValue{StringValue: "a b"}},
		}},
	}
	var b bytes.Buffer
	if err := renderRevision(&b, "kv", resp, formatTabular); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Revision 2 of kv (the newest is 4): config, by bob", "Charm: kv-1 (sha256 ab)", "  name  \"a b\"\n  port  9090\n",
		"Changes from revision 1:\n  port 8080→9090\n"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("ctl revisions --show:\n%s\nwant it to say %q", b.String(), want)
		}
	}
}
