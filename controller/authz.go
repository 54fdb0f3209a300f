package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/lifelinehq/lifeline/internal/names"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// Authorization of agents (docs/DESIGN.md, The API): a machine agent may act only on
// its machine and the units on it; a unit agent only on its unit (and its
// subordinates), the relations its service is in, and its own settings,
// reading those of the units it is related to.
//
// Every check reads the model at call time, by point reads or by range
// reads bounded by what one machine or one unit holds: never a listing that
// grows with the model.
//
// NotFound or PermissionDenied. A check that can be decided without the
// target's own record comes first and refuses with PermissionDenied whether
// or not the target exists: a machine agent naming another machine, a unit
// agent naming a unit other than itself where only itself will do, a
// service or charm that none of the caller's units use (decided from the
// caller's own unit and machine). A check that needs the target's own
// record (a unit's machine or principal, a relation's endpoints, the
// endpoints of the service AddSubordinate would add a unit of) reads it
// first, and a missing record is NotFound. So a caller may learn that a
// name exists, never what it holds: names are never reused and machine,
// unit and relation ids are sequential, so existence says little, while an
// agent must be able to tell "gone" (its work is done: the cleaner removed
// the unit first) from "forbidden" (a bug, or an attack).

// The checks of names, as InvalidArgument.
func checkUnitName(name string) error    { return asInvalid(names.CheckUnit(name)) }
func checkServiceName(name string) error { return asInvalid(names.CheckService(name)) }
func checkMachineID(id string) error     { return asInvalid(names.CheckMachine(id)) }

func asInvalid(err error) error {
	if err == nil {
		return nil
	}
	return invalid("%v", err)
}

func checkRelationID(id int64) error {
	if id < 0 {
		return invalid("invalid relation id %d: want a number from 0", id)
	}
	return nil
}

// ownMachine checks that the caller is machine id's agent; verb says what it
// would do ("read machine 3").
func ownMachine(c caller, id, verb string) error {
	if err := checkMachineID(id); err != nil {
		return err
	}
	if c.kind != names.KindMachine || c.id != id {
		return denied("%s may not %s machine %s", c, verb, id)
	}
	return nil
}

// ownUnit checks that the caller is the named unit's agent.
func ownUnit(c caller, name, verb string) error {
	if err := checkUnitName(name); err != nil {
		return err
	}
	if c.kind != names.KindUnit || c.id != name {
		return denied("%s may not %s unit %s", c, verb, name)
	}
	return nil
}

// unitFound returns the named unit's record, NotFound when there is none.
func (a *agentServer) unitFound(ctx context.Context, name string) (*pb.Unit, error) {
	u, err := a.s.st.Unit(ctx, name)
	return u, readErr(err, "read unit %s", name)
}

// machineUnit returns the named unit when the caller is the agent of the
// machine it is on (a principal assigned to it or a subordinate of one).
func (a *agentServer) machineUnit(ctx context.Context, c caller, name, verb string) (*pb.Unit, error) {
	if err := checkUnitName(name); err != nil {
		return nil, err
	}
	if c.kind != names.KindMachine {
		return nil, denied("%s may not %s unit %s", c, verb, name)
	}
	u, err := a.unitFound(ctx, name)
	if err != nil {
		return nil, err
	}
	if err := onMachine(c, name, u, verb); err != nil {
		return nil, err
	}
	return u, nil
}

// onMachine checks that unit name, u as read (nil if missing), is on the
// machine of c, a machine agent.
func onMachine(c caller, name string, u *pb.Unit, verb string) error {
	if u == nil {
		return notFound("unit %s not found", name)
	}
	if u.MachineId != c.id {
		return denied("%s may not %s unit %s: it is not on machine %s", c, verb, name, c.id)
	}
	return nil
}

// subordinateUnit returns the named unit when it is a subordinate of the
// caller's unit.
func (a *agentServer) subordinateUnit(ctx context.Context, c caller, name, verb string) (*pb.Unit, error) {
	if err := checkUnitName(name); err != nil {
		return nil, err
	}
	if c.kind != names.KindUnit {
		return nil, denied("%s may not %s unit %s", c, verb, name)
	}
	u, err := a.unitFound(ctx, name)
	if err != nil {
		return nil, err
	}
	if u.Principal != c.id {
		return nil, denied("%s may not %s unit %s: it is not a subordinate of %s", c, verb, name, c.id)
	}
	return u, nil
}

// visibleUnit returns the named unit when the caller may see it: a machine
// agent the units on its machine; a unit agent its own unit, its
// subordinates and its principal.
func (a *agentServer) visibleUnit(ctx context.Context, c caller, name, verb string) (*pb.Unit, error) {
	if err := checkUnitName(name); err != nil {
		return nil, err
	}
	switch c.kind {
	case names.KindMachine:
		return a.machineUnit(ctx, c, name, verb)
	case names.KindUnit:
		if name == c.id {
			return a.unitFound(ctx, name)
		}
		// The target and the caller's own unit, in one round trip.
		us, err := a.s.st.UnitsNamed(ctx, name, c.id)
		if err != nil {
			return nil, readErr(err, "read units %s and %s", name, c.id)
		}
		target, own := us[0], us[1]
		switch {
		case target == nil:
			return nil, notFound("unit %s not found", name)
		case target.Principal == c.id:
			return target, nil
		case own != nil && own.Principal == name:
			return target, nil
		}
	}
	return nil, denied("%s may not %s unit %s", c, verb, name)
}

// serviceAllowed checks that the caller may see the named service: a
// machine agent a service with a unit on its machine; a unit agent its own
// service, its principal's and its subordinates'. It needs no read of the
// service itself.
func (a *agentServer) serviceAllowed(ctx context.Context, c caller, service, verb string) error {
	if err := checkServiceName(service); err != nil {
		return err
	}
	switch c.kind {
	case names.KindMachine:
		ok, err := a.s.st.MachineRunsService(ctx, c.id, service)
		if err != nil {
			return readErr(err, "find units of %s on machine %s", service, c.id)
		}
		if ok {
			return nil
		}
		return denied("%s may not %s service %s: none of its units is on machine %s", c, verb, service, c.id)
	case names.KindUnit:
		if names.UnitService(c.id) == service {
			return nil
		}
		own, err := a.unitFound(ctx, c.id)
		if err != nil {
			return err
		}
		if own.Principal != "" && names.UnitService(own.Principal) == service {
			return nil
		}
		sub, err := a.s.st.SubordinateOfService(ctx, c.id, service)
		if err != nil {
			return readErr(err, "find %s's subordinate of %s", c.id, service)
		}
		if sub != "" {
			return nil
		}
		return denied("%s may not %s service %s", c, verb, service)
	}
	return denied("%s may not %s service %s", c, verb, service)
}

// callerServices returns the services whose charms the caller's units use:
// for a machine agent those of the units on its machine; for a unit agent
// its own service, its principal's and its subordinates'.
func (a *agentServer) callerServices(ctx context.Context, c caller) ([]string, error) {
	var units []string
	switch c.kind {
	case names.KindMachine:
		us, err := a.s.st.MachineUnitNames(ctx, c.id)
		if err != nil {
			return nil, readErr(err, "list units on machine %s", c.id)
		}
		units = us
	case names.KindUnit:
		own, err := a.unitFound(ctx, c.id)
		if err != nil {
			return nil, err
		}
		subs, err := a.s.st.Subordinates(ctx, c.id)
		if err != nil {
			return nil, readErr(err, "list subordinates of %s", c.id)
		}
		units = append(append([]string{c.id}, subs...), own.Principal)
	}
	seen := map[string]bool{}
	var out []string
	for _, u := range units {
		if svc := names.UnitService(u); u != "" && !seen[svc] {
			seen[svc] = true
			out = append(out, svc)
		}
	}
	return out, nil
}

// unitRelation returns relation id when the caller is a unit agent whose
// service is in it.
func (a *agentServer) unitRelation(ctx context.Context, c caller, id int64, verb string) (*pb.Relation, error) {
	if err := checkRelationCaller(c, id, verb); err != nil {
		return nil, err
	}
	rel, err := a.s.st.Relation(ctx, id)
	if err != nil {
		return nil, readErr(err, "read relation %d", id)
	}
	if err := inRelation(c, verb, a.s.rels.put(rel)); err != nil {
		return nil, err
	}
	return rel, nil
}

// unitInRelation is unitRelation for a caller that needs no more of the
// relation than that its unit's service is in it: that is known from
// relationFacts once the relation was read (relcache.go). The state call
// that follows reads the relation again, and finds it gone if it is.
func (a *agentServer) unitInRelation(ctx context.Context, c caller, id int64, verb string) error {
	if err := checkRelationCaller(c, id, verb); err != nil {
		return err
	}
	if f, ok := a.s.rels.get(id); ok {
		return inRelation(c, verb, f)
	}
	_, err := a.unitRelation(ctx, c, id, verb)
	return err
}

// checkRelationCaller checks what unitRelation can before reading the
// relation: its id, and that the caller is a unit agent.
func checkRelationCaller(c caller, id int64, verb string) error {
	if err := checkRelationID(id); err != nil {
		return err
	}
	if c.kind != names.KindUnit {
		return denied("%s may not %s relation %d", c, verb, id)
	}
	return nil
}

// inRelation checks that the service of c, a unit agent, is in the
// relation of f.
func inRelation(c caller, verb string, f relationFacts) error {
	svc := names.UnitService(c.id)
	if slices.Contains(f.services, svc) {
		return nil
	}
	return denied("%s may not %s relation %d (%s): service %s is not in it", c, verb, f.id, f.key, svc)
}

func notFound(format string, args ...any) error {
	return grpcstatus.Errorf(codes.NotFound, format, args...)
}

func failedPrecondition(format string, args ...any) error {
	return grpcstatus.Errorf(codes.FailedPrecondition, format, args...)
}

// isNotFound reports whether err says its target does not exist, as state
// or as a status.
func isNotFound(err error) bool {
	return errors.Is(err, state.ErrNotFound) || grpcstatus.Code(err) == codes.NotFound
}

// readErr gives a failed read context. State's own refusals (not found,
// invalid) already name their entity in a sentence and pass unchanged;
// anything else (etcd unavailable, a timeout) is wrapped with what was
// being read.
func readErr(err error, format string, args ...any) error {
	if err == nil || errors.Is(err, state.ErrNotFound) || errors.Is(err, state.ErrInvalid) {
		return err
	}
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), err)
}
