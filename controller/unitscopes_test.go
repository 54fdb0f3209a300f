package controller_test

import (
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

func unitScopes(unit string, want ...*pb.UnitScope) agentCall {
	return func(t *testing.T, m *agentModel, c pb.AgentServiceClient) error {
		resp, err := c.UnitScopes(m.ctx, &pb.UnitScopesRequest{Unit: unit})
		if err != nil {
			return err
		}
		if got, want := fmt.Sprint(resp.GetScopes()), fmt.Sprint(want); got != want {
			t.Errorf("UnitScopes(%s) = %s, want %s", unit, got, want)
		}
		return nil
	}
}

// A unit agent reads which scopes its unit is in, with its endpoint in
// each: what it checks its record against as it starts over its files.
func TestAgentUnitScopes(t *testing.T) {
	m := newAgentModel(t)
	runAgentCases(t, []agentCase{
		{name: "in two", as: "unit-app/0", call: unitScopes("app/0",
			&pb.UnitScope{Relation: m.global, Endpoint: "db"}, &pb.UnitScope{Relation: m.container, Endpoint: "juju-info"})},
		{name: "in none", as: "unit-kv/1", call: unitScopes("kv/1")},
		{name: "another unit's", as: "unit-kv/0", call: unitScopes("app/0"), code: codes.PermissionDenied, msg: "unit kv/0's agent may not read the scopes of unit app/0"},
		{name: "by a machine agent", as: "machine-2", call: unitScopes("app/0"), code: codes.PermissionDenied, msg: "machine 2's agent may not read the scopes of unit app/0"},
		{name: "malformed name", as: "unit-app/0", call: unitScopes("app"), code: codes.InvalidArgument, msg: "invalid unit name"},
	})
}
