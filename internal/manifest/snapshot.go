package manifest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lifelinehq/lifeline/internal/charm"
	"github.com/lifelinehq/lifeline/internal/names"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// Model is what planning reads of the model: the OperatorService's read
// calls (a pb.OperatorServiceClient is one).
type Model interface {
	Status(ctx context.Context, in *pb.StatusRequest, opts ...grpc.CallOption) (*pb.StatusResponse, error)
	ShowRevision(ctx context.Context, in *pb.ShowRevisionRequest, opts ...grpc.CallOption) (*pb.ShowRevisionResponse, error)
}

// readers bounds the calls a snapshot makes at once.
const readers = 8

// Snapshot is the model as a plan read it.
type Snapshot struct {
	// Revision is the etcd revision the model's status was read at.
	Revision int64
	// Services are the services the manifest names that the model has,
	// with their head revision's spec.
	Services map[string]*ServiceSnapshot
	// Relations and Machines are the model's.
	Relations []*pb.RelationStatus
	Machines  []*pb.MachineStatus
	// AllServices are the model's services, each with its owner: what
	// pruning reads.
	AllServices []*pb.ServiceStatus
}

// ServiceSnapshot is one service as the model has it.
type ServiceSnapshot struct {
	Status *pb.ServiceStatus
	// Head is the service's newest revision: its charm (with the
	// archive's SHA-256) and its complete configuration.
	Head *pb.ShowRevisionResponse
}

// ReadSnapshot reads the model's status and, for each of services the
// model has, its head revision.
func ReadSnapshot(ctx context.Context, model Model, services []string) (*Snapshot, error) {
	return readSnapshot(ctx, model, services, &pb.StatusRequest{})
}

// readSnapshot is ReadSnapshot with the status read as req selects.
func readSnapshot(ctx context.Context, model Model, services []string, req *pb.StatusRequest) (*Snapshot, error) {
	st, err := model.Status(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("read the model's status: %w", err)
	}
	ms := st.GetStatus()
	snap := &Snapshot{Revision: ms.GetRevision(), Services: map[string]*ServiceSnapshot{},
		Relations: ms.GetRelations(), Machines: ms.GetMachines(), AllServices: ms.GetServices()}
	for _, s := range ms.GetServices() {
		if slices.Contains(services, s.Name) {
			snap.Services[s.Name] = &ServiceSnapshot{Status: s}
		}
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		sem   = make(chan struct{}, readers)
	)
	for _, name := range sortedKeys(snap.Services) {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			head, err := model.ShowRevision(ctx, &pb.ShowRevisionRequest{Service: name})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case status.Code(err) == codes.NotFound:
				delete(snap.Services, name) // removed since the status was read
			case err != nil && first == nil:
				first = fmt.Errorf("read service %s's revision: %w", name, err)
			case err == nil:
				snap.Services[name].Head = head
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return nil, first
	}
	return snap, nil
}

// principals are a service's alive principal units, by number.
func principals(s *pb.ServiceStatus) []*pb.UnitStatus {
	var out []*pb.UnitStatus
	for _, u := range s.GetUnits() {
		if u.Principal == "" && u.Life == "alive" {
			out = append(out, u)
		}
	}
	slices.SortFunc(out, func(a, b *pb.UnitStatus) int {
		return int(names.UnitNumber(a.Name) - names.UnitNumber(b.Name))
	})
	return out
}

// serviceState is a service's state as its dependents' templates see it:
// {name, charm, charm_revision, charm_sha256, revision, life, config,
// units: [{name, address, machine, status, agent, revision}]}.
func serviceState(s *ServiceSnapshot) map[string]any {
	units := []any{}
	for _, u := range principals(s.Status) {
		units = append(units, map[string]any{
			"name": u.Name, "address": u.Address, "machine": u.Machine,
			"status": u.Workload, "agent": u.Agent, "revision": u.Revision,
		})
	}
	config := map[string]any{}
	for k, v := range s.Head.GetSpec().GetConfig() {
		config[k] = charm.ConfigValueOf(v)
	}
	ref := s.Head.GetSpec().GetCharm()
	return map[string]any{
		"name": s.Status.Name, "charm": ref.GetName(), "charm_revision": ref.GetRevision(),
		"charm_sha256": ref.GetSha256(), "revision": s.Head.GetHead(), "life": s.Status.Life,
		"config": config, "units": units,
	}
}

// digest is the hex SHA-256 of v's JSON encoding (maps' keys sorted).
func digest(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		b = []byte(err.Error())
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
