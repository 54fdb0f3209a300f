package controller_test

import (
	"maps"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/lifelinehq/lifeline/internal/names"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// TestAppSettingsAgentCalls: only the leader's agent writes its service's
// settings in a relation (relation-set --app), refused for any other with
// nothing changed; a unit of either side reads either service's, and
// watches their versions.
func TestAppSettingsAgentCalls(t *testing.T) {
	m := newAgentModel(t)
	p, err := m.st.Present(m.ctx, names.MachineTag("0"), 10*time.Second)
	m.ok("Present", err)
	t.Cleanup(p.Close)
	m.ok("ElectLeader", m.st.ElectLeader(m.ctx, "kv/0"))

	upd := func(unit string, set map[string]string) error {
		_, err := m.as("unit-"+unit).UpdateSettings(m.ctx, &pb.UpdateSettingsRequest{Unit: unit,
			AppUpdates: []*pb.SettingsUpdate{{Relation: m.global, Set: set}}})
		return err
	}
	m.as("unit-kv/1") // its credential, before the snapshot
	before := m.snapshot()
	wantCode(t, "UpdateSettings(kv/1, app), follower", upd("kv/1", map[string]string{"url": "x"}), codes.FailedPrecondition, "cannot write relation settings")
	m.unchanged("a follower's app update", before)
	_, err = m.as("unit-kv/1").UpdateSettings(m.ctx, &pb.UpdateSettingsRequest{Unit: "kv/0",
		AppUpdates: []*pb.SettingsUpdate{{Relation: m.global, Set: map[string]string{"a": "1"}}}})
	wantCode(t, "UpdateSettings(kv/0) as kv/1", err, codes.PermissionDenied, "may not write the settings of")
	_, err = m.as("unit-kv/0").UpdateSettings(m.ctx, &pb.UpdateSettingsRequest{Unit: "kv/0", AppUpdates: []*pb.SettingsUpdate{
		{Relation: m.global, Set: map[string]string{"a": "1"}}, {Relation: m.global, Set: map[string]string{"b": "1"}}}})
	wantCode(t, "UpdateSettings twice", err, codes.InvalidArgument, "updated twice")

	m.ok("UpdateSettings(kv/0, app)", upd("kv/0", map[string]string{"url": "kv:7000"}))
	for _, reader := range []string{"app/1", "kv/1", "kv/0"} {
		resp, err := m.as("unit-"+reader).ReadSettings(m.ctx, &pb.ReadSettingsRequest{Relation: m.global, Service: "kv"})
		m.ok("ReadSettings(kv) as "+reader, err)
		if !maps.Equal(resp.Settings, map[string]string{"url": "kv:7000"}) || resp.Version == 0 {
			t.Errorf("ReadSettings(kv) as %s = %v, want url at a version", reader, resp)
		}
	}
	resp, err := m.as("unit-kv/1").ReadSettings(m.ctx, &pb.ReadSettingsRequest{Relation: m.global, Service: "app"})
	m.ok("ReadSettings(app)", err)
	if len(resp.Settings) != 0 || resp.Version != 0 {
		t.Errorf("ReadSettings(app) = %v, want none", resp)
	}
	_, err = m.as("unit-kv/1").ReadSettings(m.ctx, &pb.ReadSettingsRequest{Relation: m.global, Service: "logger"})
	wantCode(t, "ReadSettings(logger)", err, codes.NotFound, "not in relation")
	_, err = m.as("unit-logger/0").ReadSettings(m.ctx, &pb.ReadSettingsRequest{Relation: m.global, Service: "kv"})
	wantCode(t, "ReadSettings(kv) as logger/0", err, codes.PermissionDenied, "")

	w, err := firstWatchResponse(m.ctx, m.as("unit-app/0"), &pb.WatchRequest{Subject: &pb.WatchSubject{
		Subject: &pb.WatchSubject_RelationAppSettings{RelationAppSettings: m.global}}})
	m.ok("Watch(app settings)", err)
	if len(w.Changes) != 1 || w.Changes[0].Id != "kv" || w.Changes[0].Version == 0 {
		t.Errorf("Watch(app settings) = %v, want kv at its version", w.Changes)
	}
	_, err = firstWatchResponse(m.ctx, m.as("unit-logger/0"), &pb.WatchRequest{Subject: &pb.WatchSubject{
		Subject: &pb.WatchSubject_RelationAppSettings{RelationAppSettings: m.global}}})
	wantCode(t, "Watch(app settings) as logger/0", err, codes.PermissionDenied, "")
}
