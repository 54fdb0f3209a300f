package manifest

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

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

// PruneOptions are what Prune takes beside the actions.
type PruneOptions struct {
	// Model is read while the units go.
	Model Model
	// Destroy makes one destroy's call.
	Destroy func(ctx context.Context, a Action) error
	// Timeout bounds the wait for the units to go (10 minutes when 0);
	// Poll is how often the model is read meanwhile (1 s when 0).
	Timeout time.Duration
	Poll    time.Duration
	// Progress, when set, is told each step, one line each: the destroys,
	// and every few seconds the units still going.
	Progress func(string)
}

// Prune carries out the actions PlanPrune returned, in their order, but
// lets units go before their machines: the services and relations are
// destroyed first; then, when machines are to be destroyed, it waits until
// no unit of a destroyed service is left anywhere and no dying unit is
// left on those machines (the agents run the units' stop and remove
// hooks, through the life rules), at most Timeout; then it destroys the
// machines. A machine still holding an alive unit of a service the prune
// keeps is refused by the controller (M2), naming the unit.
func Prune(ctx context.Context, actions []Action, opts PruneOptions) error {
	progress := opts.Progress
	if progress == nil {
		progress = func(string) {}
	}
	var machines []Action
	destroyed := map[string]bool{}
	for _, a := range actions {
		if a.Kind == ActDestroyMachine {
			machines = append(machines, a)
			continue
		}
		progress(fmt.Sprintf("prune: - %s", a.Describe()))
		if err := opts.Destroy(ctx, a); err != nil {
			return fmt.Errorf("%s: %w", a.Describe(), err)
		}
		if a.Kind == ActDestroyService {
			destroyed[a.Service] = true
		}
	}
	if len(machines) == 0 {
		return nil
	}
	ids := map[string]bool{}
	var idList []string
	for _, a := range machines {
		for _, id := range a.Units {
			ids[id] = true
			idList = append(idList, id)
		}
	}
	if err := waitUnitsGone(ctx, destroyed, ids, idList, opts, progress); err != nil {
		return err
	}
	for _, a := range machines {
		progress(fmt.Sprintf("prune: - %s", a.Describe()))
		if err := opts.Destroy(ctx, a); err != nil {
			return fmt.Errorf("%s: %w", a.Describe(), err)
		}
	}
	return nil
}

// pruneProgressEvery is how often Prune says which units it waits for.
const pruneProgressEvery = 5 * time.Second

// waitUnitsGone waits until no unit of the destroyed services is left
// and no dying unit is left on the machines ids.
func waitUnitsGone(ctx context.Context, destroyed, ids map[string]bool, idList []string, opts PruneOptions, progress func(string)) error {
	timeout, poll := opts.Timeout, opts.Poll
	if timeout <= 0 {
		timeout = 10 * time.Minute
	}
	if poll <= 0 {
		poll = time.Second
	}
	start := time.Now()
	var said time.Time
	for {
		st, err := opts.Model.Status(ctx, &pb.StatusRequest{})
		if err != nil {
			return fmt.Errorf("read the model's status: %w", err)
		}
		going := unitsGoing(st.GetStatus(), destroyed, ids)
		if len(going) == 0 {
			return nil
		}
		what := fmt.Sprintf("%d units to go before destroying machine %s: %s", len(going),
			strings.Join(idList, ", "), listSome(going, 5))
		if time.Since(start) >= timeout {
			return fmt.Errorf("after %s, %s; no machine was destroyed", timeout, what)
		}
		if time.Since(said) >= pruneProgressEvery {
			said = time.Now()
			progress(fmt.Sprintf("prune: waiting for %s (%.0fs)", what, time.Since(start).Seconds()))
		}
		t := time.NewTimer(poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// unitsGoing are the units a machine's destroy waits for: those of the
// destroyed services, and those not alive on the machines ids; sorted.
func unitsGoing(st *pb.ModelStatus, destroyed, ids map[string]bool) []string {
	var out []string
	for _, s := range st.GetServices() {
		for _, u := range s.GetUnits() {
			if destroyed[s.Name] || (ids[u.Machine] && u.Life != "alive") {
				out = append(out, u.Name)
			}
		}
	}
	slices.Sort(out)
	return out
}

// listSome names up to n of items, saying how many more there are.
func listSome(items []string, n int) string {
	if len(items) <= n {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:n], ", "), len(items)-n)
}
