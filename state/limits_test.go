package state_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/lifelinehq/lifeline/hooks"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// TestSizeLimits writes records past each of the State's size limits:
// each is refused as ErrInvalid, naming its limit, and nothing is written.
func TestSizeLimits(t *testing.T) {
	st, ctx := newState(t)
	big := func(n int) string { return strings.Repeat("x", n) }
	ref := &pb.CharmRef{Name: "kv", Revision: 1}
	tests := []struct {
		name string
		call func() error
		want string
	}{
		{"a charm record", func() error {
			_, err := st.AddCharm(ctx, &pb.Charm{Name: "kv", Summary: big(state.MaxCharmRecordBytes)}, []byte("archive"))
			return err
		}, "the record of charm kv (its metadata and config options) would be 1.0 MiB: at most 1 MiB"},
		{"a service's configuration", func() error {
			_, err := st.AddService(ctx, state.AddServiceArgs{Name: "kv", Charm: ref, Config: map[string]*pb.ConfigValue{
				"v": {Value: &pb.ConfigValue_StringValue{StringValue: big(state.MaxConfigBytes)}},
			}})
			return err
		}, "the configuration of service kv would be 512.0 KiB: at most 512 KiB"},
		{"a unit's settings as it enters", func() error {
			return st.EnterScope(ctx, 1, "kv/0", map[string]string{"v": big(state.MaxSettingsBytes)})
		}, "the settings of unit kv/0 in relation 1 would be 64.0 KiB: at most 64 KiB"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if !errors.Is(err, state.ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("%s = %.200v, want ErrInvalid saying %q", tt.name, err, tt.want)
			}
		})
	}
	snap, err := st.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Values) != 0 {
		t.Errorf("refused writes left %d keys: %v", len(snap.Values), snap.EntityKeys())
	}
}

// TestHookToolsKnowTheSettingsLimit: relation-set refuses what the State
// would, at the same size.
func TestHookToolsKnowTheSettingsLimit(t *testing.T) {
	if hooks.MaxSettingsBytes != state.MaxSettingsBytes {
		t.Errorf("hooks.MaxSettingsBytes = %d, want state.MaxSettingsBytes, %d", hooks.MaxSettingsBytes, state.MaxSettingsBytes)
	}
}
