package charm

import (
	"crypto/sha256"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

func sum(s string) []byte {
	h := sha256.Sum256([]byte(s))
	return h[:]
}

func TestStatic(t *testing.T) {
	tests := []struct {
		name string
		host string // metadata.yaml's host section; "" for none
		want *pb.StaticClaims
	}{
		{name: "no host section", want: nil},
		{name: "daemons only", host: `{daemons: [{name: s, command: [a]}]}`, want: nil},
		{name: "relative and templated paths only", host: `{files: [{path: rel.conf, content: x}, {path: "/etc/{{ service }}", content: c}]}`, want: nil},
		{name: "templated versions only", host: `{packages: [{name: kv, version: "{{ config.v }}"}]}`, want: nil},
		{
			name: "ports, all of them",
			host: `{ports: [8080/tcp, 9000-9010/udp]}`,
			want: &pb.StaticClaims{Ports: []*pb.StaticPortClaim{{From: 8080, To: 8080, Protocol: "tcp"}, {From: 9000, To: 9010, Protocol: "udp"}}},
		},
		{
			name: "files",
			host: `
  files:
    - {path: rel.conf, content: x}
    - {path: /etc/a, content: a, mode: "0600"}
    - {path: /etc/b, template: "b={{ config.b }}"}
    - {path: "/etc/{{ service }}", content: c}
    - {path: "{{ unit_dir }}/d", content: d}
    - {path: /etc/empty, content: ""}`,
			want: &pb.StaticClaims{Files: []*pb.StaticFileClaim{
				{Path: "/etc/a", Sha256: sum("a"), Mode: 0o600},
				{Path: "/etc/b", Mode: 0o644},
				{Path: "/etc/empty", Sha256: sum(""), Mode: 0o644},
			}},
		},
		{
			name: "packages",
			host: `{packages: [{name: nginx}, {name: kv, version: "1.*"}, {name: kv2, version: "{{ config.v }}"}]}`,
			want: &pb.StaticClaims{Packages: []*pb.StaticPackageClaim{{Name: "nginx"}, {Name: "kv", Version: "1.*"}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			md := "name: kv\n"
			if tt.host != "" {
				md += "host: " + tt.host + "\n"
			}
			m, err := ParseMetadata([]byte(md))
			if err != nil {
				t.Fatalf("ParseMetadata = %v", err)
			}
			if got := m.Host.Static(); !proto.Equal(got, tt.want) || (got == nil) != (tt.want == nil) {
				t.Errorf("Static() = %v, want %v", got, tt.want)
			}
		})
	}
}

// The largest static claims a charm can make stay well under the charm
// record's bound in state (1 MiB), with room for the rest of the record.
func TestStaticBound(t *testing.T) {
	var b strings.Builder
	b.WriteString("name: kv\nhost:\n  ports:\n")
	for i := range MaxHostPorts {
		fmt.Fprintf(&b, "    - %d-%d/tcp\n", 1000+2*i, 1001+2*i)
	}
	b.WriteString("  files:\n")
	for i := range MaxHostFiles {
		p := fmt.Sprintf("/%d/%s", i, strings.Repeat("p", MaxHostPath-10))
		fmt.Fprintf(&b, "    - {path: %s, content: x, mode: \"0777\"}\n", p)
	}
	b.WriteString("  packages:\n")
	for i := range MaxHostPackages {
		fmt.Fprintf(&b, "    - {name: p%d%s, version: %s}\n", i, strings.Repeat("k", maxPackageName-4), strings.Repeat("1", maxPackageVersion))
	}
	m, err := ParseMetadata([]byte(b.String()))
	if err != nil {
		t.Fatalf("ParseMetadata = %v", err)
	}
	s := m.Host.Static()
	if len(s.Ports) != MaxHostPorts || len(s.Files) != MaxHostFiles || len(s.Packages) != MaxHostPackages {
		t.Fatalf("Static() has %d ports, %d files and %d packages, want all of them", len(s.Ports), len(s.Files), len(s.Packages))
	}
	if n := proto.Size(&pb.Charm{StaticClaims: s}); n > 300<<10 {
		t.Errorf("the largest static claims take %d bytes of a charm record, want at most 300 KiB", n)
	}
}
