package state

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// Model is the whole model at one revision, decoded: what status shows.
type Model struct {
	Revision  int64
	Machines  []*pb.Machine // by id, numerically
	Services  []*pb.Service // by name
	Units     []*pb.Unit    // by name, numbers numerically
	Relations []*pb.Relation
	// Scopes maps a relation id to the units in its scope, sorted.
	Scopes map[int64][]string
	// Statuses maps StatusKey(kind, id) to the status.
	Statuses map[string]*pb.Status
	// Cleanups are the cleaner's pending items.
	Cleanups []*pb.Cleanup
	// Present holds the tags of the agents connected now.
	Present map[string]bool
	// UnitRevisions maps a unit's name to its revisions, and Rollouts a
	// service's name to its rollout: what status shows of revisions, read
	// as two ranges whatever the units.
	UnitRevisions map[string]*pb.UnitRevision
	Rollouts      map[string]*pb.Rollout
	// Ports maps a unit's name to its port claims as its agent last
	// reported them (host-ports/<unit>); units without any are absent.
	Ports map[string][]string
	// Leaders maps a service's name to its leader's, as the leadership
	// records name it (leadership.go); a service without one is absent.
	Leaders map[string]string
	// Partial names the services held with only some of their units: a
	// model SelectModel read for a unit's or a machine's sake.
	Partial map[string]bool
	// Owners maps "<kind>/<id>" ("service/web", "relation/7",
	// "machine/3") to the manifest owning the entity (owners.go); stale
	// records are left out.
	Owners map[string]*pb.Owner
}

// Model reads the whole model at one revision, decoded, as ctl status
// shows it: every key under ModelPrefixes, decoded by a ModelBuilder. For
// a part of it use SelectModel; for counts by life alone, Census; for the
// raw keys, Snapshot.
func (s *State) Model(ctx context.Context) (*Model, error) {
	r, err := s.read(ctx, getKeys(machinesPrefix, 1))
	if err != nil {
		return nil, err
	}
	b := NewModelBuilder()
	// The parts are read at one revision and each fills its own part of
	// the builder: on a large model each read and decoding takes a core
	// for a while, so they run on every core.
	errs := make([]error, numModelParts)
	next := make(chan modelPart, numModelParts)
	for p := range numModelParts {
		next <- p
	}
	close(next)
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), int(numModelParts)) {
		wg.Go(func() {
			for p := range next {
				errs[p] = s.readPart(ctx, b, p, r.rev)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return b.model(r.rev, true), nil
}

// readPart reads part p of the model at rev into b.
func (s *State) readPart(ctx context.Context, b *ModelBuilder, p modelPart, rev int64) error {
	kvs, err := s.listRev(ctx, modelParts[p].prefix, modelParts[p].keysOnly, rev)
	if err != nil {
		return err
	}
	for _, kv := range kvs {
		if err := b.put(p, string(kv.Key), kv.Value, kv.CreateRevision); err != nil {
			return err
		}
	}
	return nil
}

// Status returns the model's status of an entity, or nil.
func (m *Model) Status(kind StatusKind, id string) *pb.Status { return m.Statuses[StatusKey(kind, id)] }

// numLess orders decimal ids numerically.
func numLess(a, b string) bool {
	if len(a) != len(b) {
		return len(a) < len(b)
	}
	return a < b
}

// unitLess orders unit names by service, then numerically.
func unitLess(a, b string) bool {
	sa, na, _ := strings.Cut(a, "/")
	sb, nb, _ := strings.Cut(b, "/")
	if sa != sb {
		return sa < sb
	}
	return numLess(na, nb)
}

// Revision returns the store's current revision: it changes with every
// write, so a watcher of the whole model can tell cheaply whether to look.
func (s *State) Revision(ctx context.Context) (int64, error) {
	r, err := s.read(ctx, getKeys(seqMachine, 1))
	if err != nil {
		return 0, err
	}
	return r.rev, nil
}

// UnitCount returns how many units the model holds, whatever their life,
// from a count of their keys that reads no value.
func (s *State) UnitCount(ctx context.Context) (int64, error) {
	resp, err := s.kv.Get(ctx, unitsPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("count units: %w", err)
	}
	return resp.Count, nil
}

// Census is how many of each kind of entity the model holds, by life.
type Census struct {
	Machines, Services, Units, Relations map[pb.Life]int
}

// Census counts the model's machines, services, units and relations by
// life, at one revision: for a caller that needs the counts, not the
// entities (Model). It reads their records alone, not their
// statuses, scopes or presence: at 10,000 units on 1,000 machines,
// 11,000 keys where Model reads 33,000 or more.
func (s *State) Census(ctx context.Context) (*Census, error) {
	c := &Census{Machines: map[pb.Life]int{}, Services: map[pb.Life]int{}, Units: map[pb.Life]int{}, Relations: map[pb.Life]int{}}
	var rev int64
	for _, k := range []struct {
		prefix string
		into   map[pb.Life]int
		life   func(*mvccpb.KeyValue) (pb.Life, error)
	}{
		{machinesPrefix, c.Machines, lifeOf[pb.Machine]},
		{servicesPrefix, c.Services, lifeOf[pb.Service]},
		{unitsPrefix, c.Units, lifeOf[pb.Unit]},
		{relationsPrefix, c.Relations, lifeOf[pb.Relation]},
	} {
		kvs, at, err := s.listRevAt(ctx, k.prefix, false, rev)
		if err != nil {
			return nil, err
		}
		rev = at
		for _, kv := range kvs {
			l, err := k.life(kv)
			if err != nil {
				return nil, err
			}
			k.into[l]++
		}
	}
	return c, nil
}

// lifeOf decodes an entity's record and returns its life: decode's
// error, without the record and the copy of its key that decode makes.
func lifeOf[T any, P interface {
	*T
	proto.Message
	GetLife() pb.Life
}](kv *mvccpb.KeyValue) (pb.Life, error) {
	var m P = new(T)
	if err := proto.Unmarshal(kv.Value, m); err != nil {
		return 0, fmt.Errorf("decode %s: %w", kv.Key, err)
	}
	return m.GetLife(), nil
}
