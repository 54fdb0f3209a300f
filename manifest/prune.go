package manifest

import (
	"context"
	"slices"
	"strconv"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// PlanPrune reads the model and returns what pruning destroys: the alive
// services, relations and machines the manifest owns (their owner record
// names the manifest's name) whose resource the manifest no longer has,
// or has as another type. Services come first (each takes its relations
// and units with it, through the life rules), then the relations left,
// then machines. Nothing the manifest does not own is ever listed.
func (c *Checked) PlanPrune(ctx context.Context, model Model) ([]Action, error) {
	snap, err := ReadSnapshot(ctx, model, nil)
	if err != nil {
		return nil, err
	}
	return c.prune(snap), nil
}

func (c *Checked) prune(snap *Snapshot) []Action {
	m := c.Manifest
	gone := func(resource, typ string) bool {
		r, ok := m.Resources[resource]
		return !ok || r.Type != typ
	}
	var out []Action
	destroyed := map[string]bool{}
	for _, s := range snap.AllServices {
		if o := s.Owner; o.GetManifest() == m.Name && s.Life == "alive" && gone(o.Resource, TypeService) {
			out = append(out, Action{Kind: ActDestroyService, Service: s.Name})
			destroyed[s.Name] = true
		}
	}
	for _, rel := range snap.Relations {
		if slices.ContainsFunc(rel.Endpoints, func(ep *pb.RelationEndpointStatus) bool { return destroyed[ep.Service] }) {
			continue // goes with its service
		}
		if o := rel.Owner; o.GetManifest() == m.Name && rel.Life == "alive" && gone(o.Resource, TypeRelation) {
			var eps []any
			for _, ep := range rel.Endpoints {
				eps = append(eps, ep.Service+":"+ep.Endpoint)
			}
			out = append(out, Action{Kind: ActDestroyRelation, Endpoints: eps})
		}
	}
	var machines []string
	for _, mc := range snap.Machines {
		if o := mc.Owner; o.GetManifest() == m.Name && mc.Life == "alive" && gone(o.Resource, TypeMachine) {
			machines = append(machines, mc.Id)
		}
	}
	slices.SortFunc(machines, func(a, b string) int {
		x, _ := strconv.Atoi(a)
		y, _ := strconv.Atoi(b)
		return x - y
	})
	for _, id := range machines {
		out = append(out, Action{Kind: ActDestroyMachine, Units: []string{id}})
	}
	return out
}
