package hostclaims

import (
	"slices"
	"testing"

	"github.com/lifelinehq/lifeline/internal/charm"
)

func ports(ss ...string) []charm.PortRange {
	var out []charm.PortRange
	for _, s := range ss {
		p, err := charm.ParsePort(s)
		if err != nil {
			panic(err)
		}
		out = append(out, p)
	}
	return out
}

func conflictStrings(cs []Conflict) []string {
	out := []string{}
	for _, c := range cs {
		out = append(out, c.String())
	}
	return out
}

func TestConflicts(t *testing.T) {
	tests := []struct {
		name string
		a, b *Claims
		want []string // a's conflicts with b
	}{
		{
			name: "same port and protocol",
			a:    &Claims{Unit: "a/0", Ports: ports("8080/tcp", "53/udp")},
			b:    &Claims{Unit: "kv/0", Ports: ports("8080/tcp", "53/tcp")},
			want: []string{"port 8080/tcp is claimed by kv/0"},
		},
		{
			name: "overlapping ranges",
			a:    &Claims{Unit: "a/0", Ports: ports("9000-9010/udp")},
			b:    &Claims{Unit: "kv/0", Ports: ports("9010-9020/udp")},
			want: []string{"port 9000-9010/udp is claimed by kv/0 (9010-9020/udp)"},
		},
		{
			name: "adjacent ranges",
			a:    &Claims{Unit: "a/0", Ports: ports("9000-9009/udp")},
			b:    &Claims{Unit: "kv/0", Ports: ports("9010-9020/udp")},
			want: []string{},
		},
		{
			name: "files",
			a: &Claims{Unit: "a/0", Files: []File{
				{Path: "/etc/same", Content: []byte("x"), Mode: 0o644},
				{Path: "/etc/content", Content: []byte("x"), Mode: 0o644},
				{Path: "/etc/mode", Content: []byte("x"), Mode: 0o644},
				{Path: "/etc/mine", Content: []byte("x"), Mode: 0o644},
			}},
			b: &Claims{Unit: "kv/0", Files: []File{
				{Path: "/etc/same", Content: []byte("x"), Mode: 0o644},
				{Path: "/etc/content", Content: []byte("y"), Mode: 0o644},
				{Path: "/etc/mode", Content: []byte("x"), Mode: 0o600},
			}},
			want: []string{"file /etc/content is claimed by kv/0 with other content", "file /etc/mode is claimed by kv/0 with mode 0600"},
		},
		{
			name: "packages",
			a:    &Claims{Unit: "a/0", Packages: []Package{{Name: "any"}, {Name: "pinned", Version: "1"}, {Name: "same", Version: "2.*"}, {Name: "other", Version: "1.2.*"}}},
			b:    &Claims{Unit: "kv/0", Packages: []Package{{Name: "any", Version: "3"}, {Name: "pinned"}, {Name: "same", Version: "2.*"}, {Name: "other", Version: "1.2.3"}}},
			want: []string{"package other is claimed by kv/0 at version 1.2.3"},
		},
		{
			name: "daemons of the same name",
			a:    &Claims{Unit: "a/0", Daemons: []Daemon{{Name: "server", Command: []string{"a"}}}},
			b:    &Claims{Unit: "kv/0", Daemons: []Daemon{{Name: "server", Command: []string{"b"}}}},
			want: []string{},
		},
		{
			name: "nil",
			a:    nil,
			b:    &Claims{Unit: "kv/0", Ports: ports("8080/tcp")},
			want: []string{},
		},
	}
	for _, tt := range tests {
		got := conflictStrings(Conflicts(tt.a, tt.b))
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s: Conflicts = %q, want %q", tt.name, got, tt.want)
		}
		// Conflicts are symmetric in whether they exist.
		if back := Conflicts(tt.b, tt.a); (len(back) == 0) != (len(got) == 0) {
			t.Errorf("%s: Conflicts(b, a) = %q, want conflicts iff Conflicts(a, b) has some", tt.name, conflictStrings(back))
		}
	}
}
