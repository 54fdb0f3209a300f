package controller

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lifelinehq/lifeline/controller/modelcache"
	"github.com/lifelinehq/lifeline/internal/charm"
	"github.com/lifelinehq/lifeline/internal/names"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// UploadCharm reads a packed charm, header first, then its chunks, and
// stores it.
func (s *Server) UploadCharm(stream pb.OperatorService_UploadCharmServer) error {
	first, err := stream.Recv()
	if errors.Is(err, io.EOF) {
		return invalid("charm upload must start with its header: the upload sent nothing")
	}
	if err != nil {
		return err
	}
	h := first.GetHeader()
	switch {
	case h == nil:
		return invalid("charm upload must start with its header")
	case h.Size < 0:
		return invalid("charm upload: negative size %d", h.Size)
	case h.Size > charm.MaxSize:
		return invalid("charm archive is %s: over the %d MiB limit", mib(h.Size), charm.MaxSize>>20)
	}
	var buf bytes.Buffer
	buf.Grow(int(h.Size))
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if int64(buf.Len()+len(req.GetChunk())) > h.Size {
			return invalid("charm upload: more than the %d bytes its header declared", h.Size)
		}
		buf.Write(req.GetChunk())
	}
	if int64(buf.Len()) != h.Size {
		return invalid("charm upload: %d bytes received, %d declared", buf.Len(), h.Size)
	}
	sum := sha256.Sum256(buf.Bytes())
	if got := hex.EncodeToString(sum[:]); h.Sha256 != "" && got != h.Sha256 {
		return invalid("charm upload: sha256 %s does not match the declared %s", got, h.Sha256)
	}
	c, data, err := charm.ReadArchive(&buf, charm.MaxSize)
	if err != nil {
		return err
	}
	warnings, err := charm.ArchiveWarnings(data)
	if err != nil {
		return err
	}
	if h.Strict && len(warnings) > 0 {
		return failedPrecondition("--strict: charm %s declares what Lifeline does not use: %s", c.Meta.Name, strings.Join(warnings, "; "))
	}
	if a := state.AuditFrom(stream.Context()); a != nil {
		a.AddTargets("charm:" + c.Meta.Name)
	}
	rec, err := s.st.AddCharm(stream.Context(), c.Record(), data)
	if err != nil {
		return err
	}
	s.logger.Info("charm stored", "charm", rec.Name, "revision", rec.Revision, "bytes", rec.Size)
	return stream.SendAndClose(&pb.UploadCharmResponse{Charm: rec, Warnings: warnings})
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// maxAtOnce bounds the units or machines one call adds: a call asking for
// two billion would otherwise add batch after batch until its deadline.
const maxAtOnce = 1000

// Deploy adds a service of an uploaded charm, configured, with its units.
func (s *Server) Deploy(ctx context.Context, req *pb.DeployRequest) (*pb.DeployResponse, error) {
	if !names.ValidService(req.Charm) {
		return nil, invalid("invalid charm name %q", req.Charm)
	}
	name := req.Service
	if name == "" {
		name = req.Charm
	}
	if err := checkServiceName(name); err != nil {
		return nil, err
	}
	if req.NumUnits < 0 {
		return nil, invalid("cannot deploy %d units", req.NumUnits)
	}
	if req.NumUnits > maxAtOnce {
		return nil, invalid("cannot deploy %d units at once: at most %d", req.NumUnits, maxAtOnce)
	}
	c, err := s.st.Charm(ctx, req.Charm, req.Revision)
	if err != nil {
		return nil, err
	}
	if c.Subordinate && req.NumUnits > 0 {
		return nil, invalid("charm %s is a subordinate: its units come with the principals it is related to, so deploy it with no units", c.Name)
	}
	if c.Subordinate && req.To != "" {
		return nil, invalid("charm %s is a subordinate: it cannot be placed on a machine", c.Name)
	}
	if req.Force && req.To == "" {
		return nil, invalid("force places units on a given machine: name it (to)")
	}
	cfg := charm.ConfigFromOptions(c.Options)
	values, err := cfg.ParseValues(req.Config)
	if err != nil {
		return nil, err
	}
	if req.To != "" {
		// Checked now so that a bad placement adds nothing; AddUnits checks
		// again in its transaction.
		m, err := s.st.Machine(ctx, req.To)
		if err != nil {
			return nil, err
		}
		if m.Life != pb.Life_LIFE_ALIVE {
			return nil, status.Errorf(codes.FailedPrecondition, "machine %s is %s: units can be assigned only to an alive machine", m.Id, state.LifeName(m.Life))
		}
	}
	ref := &pb.CharmRef{Name: c.Name, Revision: c.Revision, Sha256: c.Sha256}
	if req.To != "" && !req.Force {
		// The units' static host claims against the machine's units
		// (P1), before there is a service to take back.
		if err := s.st.CheckPlacement(ctx, name, ref, req.To, int(req.NumUnits)); err != nil {
			return nil, err
		}
	}
	svc, err := s.st.AddService(ctx, state.AddServiceArgs{
		Name:        name,
		Charm:       ref,
		Subordinate: c.Subordinate,
		Endpoints:   c.Endpoints,
		Config:      cfg.WithDefaults(values),
		By:          userName(ctx),
	})
	if err != nil {
		return nil, err
	}
	resp := &pb.DeployResponse{Service: svc}
	if req.NumUnits > 0 {
		units, err := s.st.AddUnits(ctx, name, int(req.NumUnits), state.Placement{Machine: req.To, Force: req.Force})
		if err != nil {
			if len(units) == 0 {
				// Nothing was deployed after all: take the service back.
				if derr := s.st.DestroyService(ctx, name); derr != nil {
					s.logger.Warn("cannot remove the service of a failed deploy", "service", name, "error", derr)
				}
			}
			return nil, err
		}
		resp.Units = units
	}
	s.logger.Info("deployed", "service", name, "charm", c.Name, "revision", c.Revision, "units", req.NumUnits)
	return resp, nil
}

// AddUnits adds principal units to a service.
func (s *Server) AddUnits(ctx context.Context, req *pb.AddUnitsRequest) (*pb.AddUnitsResponse, error) {
	if req.NumUnits < 1 {
		return nil, invalid("cannot add %d units: want at least 1", req.NumUnits)
	}
	if req.NumUnits > maxAtOnce {
		return nil, invalid("cannot add %d units at once: at most %d", req.NumUnits, maxAtOnce)
	}
	if req.Force && req.To == "" {
		return nil, invalid("force places units on a given machine: name it (to)")
	}
	// A placement on a machine is refused when the units' static host
	// claims conflict with a unit's there (FailedPrecondition), unless
	// forced: state checks it in the transaction that places them.
	units, err := s.st.AddUnits(ctx, req.Service, int(req.NumUnits), state.Placement{Machine: req.To, Force: req.Force})
	if err != nil {
		return nil, err
	}
	return &pb.AddUnitsResponse{Units: units}, nil
}

// AddMachines adds machines for the provisioner to start, or manual
// machines, each with a join token carrying its credential.
func (s *Server) AddMachines(ctx context.Context, req *pb.AddMachinesRequest) (*pb.AddMachinesResponse, error) {
	if req.NumMachines < 1 {
		return nil, invalid("cannot add %d machines: want at least 1", req.NumMachines)
	}
	if req.NumMachines > maxAtOnce {
		return nil, invalid("cannot add %d machines at once: at most %d", req.NumMachines, maxAtOnce)
	}
	var ttl time.Duration
	if req.Manual {
		var err error
		if ttl, err = joinTokenTTL(req.JoinTokenTtlMs); err != nil {
			return nil, err
		}
		if err := s.canMakeJoinTokens(); err != nil {
			return nil, err
		}
	}
	ms, err := s.st.AddMachinesWith(ctx, int(req.NumMachines), state.MachineOptions{Manual: req.Manual})
	resp := &pb.AddMachinesResponse{Machines: ms}
	if err != nil {
		return nil, err
	}
	if req.Manual {
		ids := make([]string, len(ms))
		for i, m := range ms {
			ids[i] = m.Id
		}
		if resp.JoinTokens, err = s.joinTokens(ctx, ids, ttl); err != nil {
			return nil, err
		}
	}
	return resp, nil
}

// AddRelation relates two services.
func (s *Server) AddRelation(ctx context.Context, req *pb.AddRelationRequest) (*pb.AddRelationResponse, error) {
	a, b, err := endpointPair(req.Endpoints)
	if err != nil {
		return nil, err
	}
	rel, err := s.st.AddRelation(ctx, a, b)
	if err != nil {
		return nil, err
	}
	return &pb.AddRelationResponse{Relation: rel}, nil
}

func endpointPair(eps []string) (state.EndpointSpec, state.EndpointSpec, error) {
	if len(eps) != 2 {
		return state.EndpointSpec{}, state.EndpointSpec{}, invalid("a relation needs two endpoints, got %d", len(eps))
	}
	a, err := state.ParseEndpointSpec(eps[0])
	if err != nil {
		return a, a, err
	}
	b, err := state.ParseEndpointSpec(eps[1])
	return a, b, err
}

// DestroyRelation destroys the one relation between the given endpoints.
func (s *Server) DestroyRelation(ctx context.Context, req *pb.DestroyRelationRequest) (*pb.DestroyRelationResponse, error) {
	a, b, err := endpointPair(req.Endpoints)
	if err != nil {
		return nil, err
	}
	ids, err := s.st.ServiceRelations(ctx, a.Service)
	if err != nil {
		return nil, err
	}
	if _, err := s.st.Service(ctx, a.Service); err != nil {
		return nil, err
	}
	var found []*pb.Relation
	for _, id := range ids {
		rel, err := s.st.Relation(ctx, id)
		if errors.Is(err, state.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if relationJoins(rel, a, b) {
			found = append(found, rel)
		}
	}
	switch len(found) {
	case 0:
		return nil, status.Errorf(codes.NotFound, "no relation between %s and %s", a, b)
	case 1:
		return &pb.DestroyRelationResponse{}, s.st.DestroyRelation(ctx, found[0].Id)
	}
	return nil, invalid("%s and %s are related %d ways (%s, %s...): name the endpoints", a, b, len(found), found[0].Key, found[1].Key)
}

// relationJoins says whether rel is between a and b (endpoints, where
// named, matching).
func relationJoins(rel *pb.Relation, a, b state.EndpointSpec) bool {
	if len(rel.Endpoints) != 2 {
		return false
	}
	match := func(ep *pb.RelationEndpoint, spec state.EndpointSpec) bool {
		return ep.Service == spec.Service && (spec.Endpoint == "" || ep.Endpoint.Name == spec.Endpoint)
	}
	x, y := rel.Endpoints[0], rel.Endpoints[1]
	return match(x, a) && match(y, b) || match(x, b) && match(y, a)
}

// destroyOptions turns the request's force and wait into state's options.
func (s *Server) destroyOptions(force bool, maxWaitMs *int64) (state.DestroyOptions, error) {
	if !force {
		if maxWaitMs != nil {
			return state.DestroyOptions{}, invalid("a maximum wait needs --force")
		}
		return state.DestroyOptions{}, nil
	}
	wait := s.cfg.DefaultMaxWait
	if maxWaitMs != nil {
		if *maxWaitMs < 0 {
			return state.DestroyOptions{}, invalid("negative maximum wait %dms", *maxWaitMs)
		}
		wait = time.Duration(*maxWaitMs) * time.Millisecond
	}
	return state.DestroyOptions{Force: true, MaxWait: wait}, nil
}

// DestroyUnit destroys a principal unit; subordinates go with their
// principal or their relation.
func (s *Server) DestroyUnit(ctx context.Context, req *pb.DestroyUnitRequest) (*pb.DestroyUnitResponse, error) {
	opts, err := s.destroyOptions(req.Force, req.MaxWaitMs)
	if err != nil {
		return nil, err
	}
	u, err := s.st.Unit(ctx, req.Unit)
	if err != nil {
		return nil, err
	}
	if u.Principal != "" {
		return nil, status.Errorf(codes.FailedPrecondition, "unit %s is a subordinate of %s: destroy %s, or the relation between %s and %s",
			u.Name, u.Principal, u.Principal, names.UnitService(u.Principal), u.Service)
	}
	return &pb.DestroyUnitResponse{}, s.st.DestroyUnit(ctx, req.Unit, opts)
}

// DestroyMachine destroys a machine.
func (s *Server) DestroyMachine(ctx context.Context, req *pb.DestroyMachineRequest) (*pb.DestroyMachineResponse, error) {
	opts, err := s.destroyOptions(req.Force, req.MaxWaitMs)
	if err != nil {
		return nil, err
	}
	return &pb.DestroyMachineResponse{}, s.st.DestroyMachine(ctx, req.Machine, opts)
}

// maxMachineDestroys bounds the machines of a DestroyMachines call.
const maxMachineDestroys = 1000

// DestroyMachines destroys machines, several in a transaction
// (state.DestroyMachines), each answered alone.
func (s *Server) DestroyMachines(ctx context.Context, req *pb.DestroyMachinesRequest) (*pb.DestroyMachinesResponse, error) {
	ids := req.GetMachines()
	switch {
	case len(ids) == 0:
		return nil, invalid("DestroyMachines names no machine")
	case len(ids) > maxMachineDestroys:
		return nil, invalid("DestroyMachines names %d machines: at most %d a call", len(ids), maxMachineDestroys)
	}
	opts, err := s.destroyOptions(req.Force, req.MaxWaitMs)
	if err != nil {
		return nil, err
	}
	errs := s.st.DestroyMachines(ctx, ids, opts)
	resp := &pb.DestroyMachinesResponse{Results: make([]*pb.StatusReportResult, len(ids))}
	for i, err := range errs {
		resp.Results[i] = reportResult(err)
	}
	return resp, nil
}

// DestroyService destroys a service.
func (s *Server) DestroyService(ctx context.Context, req *pb.DestroyServiceRequest) (*pb.DestroyServiceResponse, error) {
	return &pb.DestroyServiceResponse{}, s.st.DestroyService(ctx, req.Service)
}

// Resolved answers a unit's failed hook, or with All every unit's in
// error. Whether a unit may be answered is the State's to decide, in the
// transaction that sets its mark.
func (s *Server) Resolved(ctx context.Context, req *pb.ResolvedRequest) (*pb.ResolvedResponse, error) {
	mode := pb.ResolvedMode_RESOLVED_MODE_RETRY
	if req.NoRetry {
		mode = pb.ResolvedMode_RESOLVED_MODE_NO_RETRY
	}
	if !req.All {
		return &pb.ResolvedResponse{}, s.st.SetResolved(ctx, req.Unit, mode)
	}
	if req.Unit != "" {
		return nil, invalid("Resolved names unit %s and asks for all units in error: one or the other", req.Unit)
	}
	units, err := s.st.UnitsInError(ctx)
	if err != nil {
		return nil, err
	}
	resp := &pb.ResolvedResponse{Results: make([]*pb.ResolvedResult, 0, len(units))}
	for _, u := range units {
		err := s.st.SetResolved(ctx, u, mode)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		st := status.Convert(toStatus(err))
		resp.Results = append(resp.Results, &pb.ResolvedResult{Unit: u, Code: uint32(st.Code()), Message: st.Message()})
	}
	return resp, nil
}

// GetConfig returns a service's options and settings.
func (s *Server) GetConfig(ctx context.Context, req *pb.GetConfigRequest) (*pb.GetConfigResponse, error) {
	c, values, err := s.serviceConfig(ctx, req.Service)
	if err != nil {
		return nil, err
	}
	return &pb.GetConfigResponse{Options: c.Options, Values: values}, nil
}

func (s *Server) serviceConfig(ctx context.Context, service string) (*pb.Charm, map[string]*pb.ConfigValue, error) {
	svc, err := s.st.Service(ctx, service)
	if err != nil {
		return nil, nil, err
	}
	c, err := s.st.Charm(ctx, svc.Charm.Name, svc.Charm.Revision)
	if err != nil {
		return nil, nil, err
	}
	cfg, err := s.st.ServiceConfig(ctx, service)
	if err != nil {
		return nil, nil, err
	}
	return c, charm.ConfigFromOptions(c.Options).WithDefaults(cfg.Values), nil
}

// SetConfig changes a service's settings; unset ones return to their
// defaults.
func (s *Server) SetConfig(ctx context.Context, req *pb.SetConfigRequest) (*pb.SetConfigResponse, error) {
	if len(req.Set) == 0 && len(req.Unset) == 0 {
		return nil, invalid("nothing to change: give KEY=VALUE settings")
	}
	c, _, err := s.serviceConfig(ctx, req.Service)
	if err != nil {
		return nil, err
	}
	cfg := charm.ConfigFromOptions(c.Options)
	values, err := cfg.ParseValues(req.Set)
	if err != nil {
		return nil, err
	}
	defaults := cfg.Defaults()
	for _, k := range req.Unset {
		if _, ok := cfg.Options[k]; !ok {
			return nil, invalid("unknown config option %q", k)
		}
	}
	// A new revision of the service's spec: the head's configuration with
	// the settings set, and those unset back to their defaults (or
	// absent, for an option without one).
	_, err = s.st.ChangeSpec(ctx, req.Service, state.SpecChange{By: userName(ctx), Reason: "config", History: s.cfg.RevisionHistory,
		Next: func(head *pb.Revision) (*pb.ServiceSpec, []*pb.Endpoint, error) {
			if ch := head.Spec.GetCharm(); ch.GetName() != c.Name || ch.GetRevision() != c.Revision {
				return nil, nil, status.Errorf(codes.Aborted, "service %s moved to charm %s-%d meanwhile: try again", req.Service, ch.GetName(), ch.GetRevision())
			}
			next := &pb.ServiceSpec{Charm: head.Spec.Charm, Config: map[string]*pb.ConfigValue{}}
			for k, v := range head.Spec.Config {
				next.Config[k] = v
			}
			for k, v := range values {
				next.Config[k] = v
			}
			for _, k := range req.Unset {
				if d, ok := defaults[k]; ok {
					next.Config[k] = d
				} else {
					delete(next.Config, k)
				}
			}
			return next, nil, nil
		}})
	if err != nil {
		return nil, err
	}
	return &pb.SetConfigResponse{}, nil
}

// userName is the name of the user who made the call; "" for an agent.
func userName(ctx context.Context) string {
	if c := callerFrom(ctx); c.kind == names.KindUser {
		return c.id
	}
	return ""
}

// Barrier returns a barrier at or past the model's current revision (or
// the revision asked for), writing one unless it is there already: the
// watch hubs of every controller bring their agents' streams to it, and
// the unit agents report once they have acted on everything up to it.
func (s *Server) Barrier(ctx context.Context, req *pb.BarrierRequest) (*pb.BarrierResponse, error) {
	rev, err := s.st.Barrier(ctx, req.GetAtLeast())
	if err != nil {
		return nil, err
	}
	return &pb.BarrierResponse{Revision: rev}, nil
}

// Status returns the whole model's status, what of it the request
// selects, or only its controllers (ControllersOnly).
func (s *Server) Status(ctx context.Context, req *pb.StatusRequest) (*pb.StatusResponse, error) {
	sel := state.Selection{Services: req.Services, Units: req.Units, Machines: req.Machines}
	var st *pb.ModelStatus
	var err error
	if req.ControllersOnly {
		if sel.Len() > 0 {
			return nil, invalid("controllers_only takes no services, units or machines")
		}
		st, err = s.controllersStatus(ctx)
	} else {
		st, err = s.modelStatus(ctx, sel)
	}
	if err != nil {
		return nil, err
	}
	return &pb.StatusResponse{Status: st, Controller: s.cfg.ID, User: callerFrom(ctx).id,
		Version: s.cfg.Build.Version, TimeUnixNano: time.Now().UnixNano()}, nil
}

// modelStatus reads the model, or of it what sel selects (all of it when
// sel is empty), and the live controllers.
func (s *Server) modelStatus(ctx context.Context, sel state.Selection) (*pb.ModelStatus, error) {
	var st *pb.ModelStatus
	if sel.Len() == 0 {
		m, err := s.wholeModel(ctx)
		if err != nil {
			return nil, err
		}
		st = s.wholeStatus(m, time.Now())
	} else {
		m, err := s.st.SelectModel(ctx, sel)
		if err != nil {
			return nil, err
		}
		st = buildStatus(m, time.Now())
	}
	if err := s.addControllers(ctx, st); err != nil {
		return nil, err
	}
	return st, nil
}

// wholeModel returns the whole model at the current revision or later:
// from the decoded model the controller keeps (modelcache) once it has
// applied every change up to the revision read when the call came, so
// that a status shows what its caller wrote before; else, while the cache
// starts or when it does not get there in time, read from etcd.
func (s *Server) wholeModel(ctx context.Context) (*state.Model, error) {
	rev, err := s.st.Revision(ctx)
	if err != nil {
		return nil, err
	}
	m, err := s.models.Model(ctx, rev)
	if err == nil {
		return m, nil
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	s.logger.Debug("whole-model status read from etcd", "revision", rev, "reason", err)
	return s.st.Model(ctx)
}

// wholeStatus returns the status of the whole model m, built once for as
// long as the model cache's model does not change (kept beside it there;
// the revision is m's), unless it says how long until a forced removal,
// which changes with the time. What it returns is the caller's to add the
// controllers to; the machines, services and relations are shared: read
// them only.
func (s *Server) wholeStatus(m *state.Model, now time.Time) *pb.ModelStatus {
	st, ok := s.models.Kept(m).(*pb.ModelStatus)
	if !ok {
		st = buildStatus(m, now)
		if !forcingPending(m, now) {
			s.models.Keep(m, st)
		}
	}
	return &pb.ModelStatus{Revision: m.Revision, Machines: st.Machines, Services: st.Services, Relations: st.Relations}
}

// ModelCacheStats returns the state and counts of the decoded model the
// controller keeps for the whole-model status, for tests and benchmarks.
func (s *Server) ModelCacheStats() modelcache.Stats { return s.models.Stats() }

// controllersStatus is a status of the live controllers, the alarms and
// the operations' counts alone, at the model's revision: reads of a few
// keys, whatever the model's size.
func (s *Server) controllersStatus(ctx context.Context) (*pb.ModelStatus, error) {
	rev, err := s.st.Revision(ctx)
	if err != nil {
		return nil, err
	}
	st := &pb.ModelStatus{Revision: rev}
	if err := s.addControllers(ctx, st); err != nil {
		return nil, err
	}
	return st, nil
}

// addControllers adds the live controllers, the alarms and the
// operations' counts to st.
func (s *Server) addControllers(ctx context.Context, st *pb.ModelStatus) error {
	cs, err := s.st.Controllers(ctx)
	if err != nil {
		return err
	}
	for _, c := range cs {
		st.Controllers = append(st.Controllers, &pb.ControllerStatus{Id: c.ID, Addresses: c.Addresses, Leader: c.Leader})
	}
	if s.cfg.Storage != nil {
		if a := s.cfg.Storage().Alarm(); a != "" {
			st.Alarms = append(st.Alarms, a)
		}
	}
	st.Operations, err = s.operationsStatus(ctx)
	return err
}

// controllerAddresses are the addresses agents should dial: every live
// controller's (the leader's first), then this controller's own if they
// are not among them. The list is read at most once every
// addressesFresh: every unit agent asks for it when it starts (10,000 at
// once in the scale harness), and the read, a sorted one of the leader
// election, was 2.4% of the controller's CPU deploying.
func (s *Server) controllerAddresses(ctx context.Context) []string {
	s.addrs.mu.Lock()
	defer s.addrs.mu.Unlock()
	if s.addrs.list != nil && time.Since(s.addrs.at) < addressesFresh {
		return slices.Clone(s.addrs.list)
	}
	addrs, err := s.st.ControllerAddresses(ctx)
	if err != nil {
		s.logger.Warn("cannot list the live controllers: giving agents this controller's addresses only", "error", err)
	}
	for _, a := range s.cfg.Addresses {
		if !slices.Contains(addrs, a) {
			addrs = append(addrs, a)
		}
	}
	if err == nil {
		s.addrs.list, s.addrs.at = addrs, time.Now()
	}
	return slices.Clone(addrs)
}

// addressesFresh is how long controllerAddresses keeps the list it read.
const addressesFresh = time.Second

// WatchStatus sends the status whenever the model changed, at most every
// interval.
func (s *Server) WatchStatus(req *pb.WatchStatusRequest, stream pb.OperatorService_WatchStatusServer) error {
	interval := time.Duration(req.IntervalMs) * time.Millisecond
	if interval <= 0 {
		interval = time.Second
	}
	interval = max(interval, 100*time.Millisecond)
	ctx := stream.Context()
	sel := state.Selection{Services: req.Services, Units: req.Units, Machines: req.Machines}
	if err := sel.Check(); err != nil {
		return err
	}
	last := int64(-1)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		rev, err := s.st.Revision(ctx)
		if err != nil {
			return err
		}
		if rev != last {
			st, err := s.modelStatus(ctx, sel)
			if err != nil {
				return err
			}
			if err := stream.Send(&pb.WatchStatusResponse{Status: st, Controller: s.cfg.ID, User: callerFrom(ctx).id,
				Version: s.cfg.Build.Version, TimeUnixNano: time.Now().UnixNano()}); err != nil {
				return err
			}
			last = st.Revision
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}
