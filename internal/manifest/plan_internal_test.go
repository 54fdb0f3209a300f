package manifest

import (
	"testing"

	"github.com/lifelinehq/lifeline/internal/charm"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// TestInfoEndpointNames: the implicit endpoint answers to juju-info and
// lifeline-info, whichever a relation's record or a charm's metadata
// holds; no other endpoint answers to another's name.
func TestInfoEndpointNames(t *testing.T) {
	info := &pb.RelationEndpointStatus{Service: "app", Endpoint: "lifeline-info", Role: "provider", Interface: "lifeline-info"}
	req := &pb.RelationEndpointStatus{Service: "sub", Endpoint: "juju-info", Role: "requirer", Interface: "juju-info"}
	for _, tt := range []struct {
		spec string
		ep   *pb.RelationEndpointStatus
		want bool
	}{
		{"app", info, true},
		{"app:lifeline-info", info, true},
		{"app:juju-info", info, true},
		{"app:db", info, false},
		{"sub:juju-info", req, true},
		{"sub:lifeline-info", req, false},
	} {
		if got := endpointIs(tt.spec, tt.ep); got != tt.want {
			t.Errorf("endpointIs(%q, %s:%s) = %v, want %v", tt.spec, tt.ep.Service, tt.ep.Endpoint, got, tt.want)
		}
	}
	m, err := charm.ParseMetadata([]byte("name: app\nrequires:\n  db: kv\n"))
	if err != nil {
		t.Fatal(err)
	}
	for ep, want := range map[string]bool{"juju-info": true, "lifeline-info": true, "db": true, "nosuch": false} {
		if got := hasEndpoint(m, ep); got != want {
			t.Errorf("hasEndpoint(app, %q) = %v, want %v", ep, got, want)
		}
	}
}
