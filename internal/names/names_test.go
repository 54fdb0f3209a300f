package names

import (
	"fmt"
	"strings"
	"testing"
)

func TestParseTag(t *testing.T) {
	for _, tc := range []struct {
		tag      string
		wantKind string
		wantID   string
		wantErr  bool
	}{
		{tag: "admin", wantKind: KindUser, wantID: "admin"},
		{tag: "user-alice", wantKind: KindUser, wantID: "alice"},
		{tag: "user-ops-2b", wantKind: KindUser, wantID: "ops-2b"},
		{tag: "machine-0", wantKind: KindMachine, wantID: "0"},
		{tag: "machine-3", wantKind: KindMachine, wantID: "3"},
		{tag: "machine-123456789012345678", wantKind: KindMachine, wantID: "123456789012345678"},
		{tag: "unit-kv/0", wantKind: KindUnit, wantID: "kv/0"},
		{tag: "unit-my-app/12", wantKind: KindUnit, wantID: "my-app/12"},
		{tag: "unit-app2-db/3", wantKind: KindUnit, wantID: "app2-db/3"},

		{tag: "", wantErr: true},
		{tag: "Admin", wantErr: true},
		{tag: "admin-0", wantErr: true},
		{tag: "admin ", wantErr: true},
		{tag: "machine", wantErr: true},
		{tag: "machine-", wantErr: true},
		{tag: "machine-01", wantErr: true},
		{tag: "machine--1", wantErr: true},
		{tag: "machine-3a", wantErr: true},
		{tag: "machine-1234567890123456789", wantErr: true},
		{tag: "machine-0/lxd/1", wantErr: true},
		{tag: "machine-kv/0", wantErr: true},
		{tag: "unit-", wantErr: true},
		{tag: "unit-kv", wantErr: true},
		{tag: "unit-kv-0", wantErr: true},
		{tag: "unit-kv/", wantErr: true},
		{tag: "unit-/0", wantErr: true},
		{tag: "unit-kv/01", wantErr: true},
		{tag: "unit-kv/0/1", wantErr: true},
		{tag: "unit-KV/0", wantErr: true},
		{tag: "unit-2kv/0", wantErr: true},
		{tag: "unit-kv-2/0", wantErr: true},
		{tag: "unit-kv-/0", wantErr: true},
		{tag: "unit-" + strings.Repeat("a", 64) + "/0", wantErr: true},
		{tag: "unit-kv/0\n", wantErr: true},
		{tag: "service-kv", wantErr: true},
		{tag: "user-admin", wantErr: true},
		{tag: "user-", wantErr: true},
		{tag: "user-Bob", wantErr: true},
		{tag: "user-bob/0", wantErr: true},
		{tag: "user-2bob", wantErr: true},
		{tag: "users-bob", wantErr: true},
		{tag: "-3", wantErr: true},
	} {
		t.Run(tc.tag, func(t *testing.T) {
			kind, id, err := ParseTag(tc.tag)
			if tc.wantErr {
				if err == nil {
					t.Errorf("ParseTag(%q) = %q, %q, nil, want an error", tc.tag, kind, id)
				} else if !strings.Contains(err.Error(), fmt.Sprintf("invalid tag %q", tc.tag)) {
					t.Errorf("ParseTag(%q) error = %q, want one naming the tag", tc.tag, err)
				}
				return
			}
			if err != nil || kind != tc.wantKind || id != tc.wantID {
				t.Errorf("ParseTag(%q) = %q, %q, %v, want %q, %q, nil", tc.tag, kind, id, err, tc.wantKind, tc.wantID)
			}
		})
	}
}

func TestTagRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		tag  string
		kind string
		id   string
	}{
		{MachineTag("3"), KindMachine, "3"},
		{UnitTag("kv/0"), KindUnit, "kv/0"},
		{UnitTag("my-app/7"), KindUnit, "my-app/7"},
		{AdminTag, KindUser, AdminUser},
		{UserTag("admin"), KindUser, "admin"},
		{UserTag("alice"), KindUser, "alice"},
	} {
		kind, id, err := ParseTag(tc.tag)
		if err != nil || kind != tc.kind || id != tc.id {
			t.Errorf("ParseTag(%q) = %q, %q, %v, want %q, %q, nil", tc.tag, kind, id, err, tc.kind, tc.id)
		}
	}
	if got, want := MachineTag("3"), "machine-3"; got != want {
		t.Errorf("MachineTag(%q) = %q, want %q", "3", got, want)
	}
	if got, want := UnitTag("kv/0"), "unit-kv/0"; got != want {
		t.Errorf("UnitTag(%q) = %q, want %q", "kv/0", got, want)
	}
}
