package state

import (
	"errors"
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// LifeChecker checks, over a watch stream of the whole namespace, that life
// never moves backward (I1), that every entity starts alive, and that
// machine ids, unit names and relation ids are never used twice (I7).
type LifeChecker struct {
	live map[string]incarnation // entity key → what it is now
	gone map[string]bool        // entity keys that have been removed
}

type incarnation struct {
	create int64
	life   pb.Life
}

// NewLifeChecker returns a checker that has seen nothing.
func NewLifeChecker() *LifeChecker {
	return &LifeChecker{live: map[string]incarnation{}, gone: map[string]bool{}}
}

// Observe checks one batch of a watch on the namespace's whole keyspace
// (prefix ""), returning the violations it shows.
func (l *LifeChecker) Observe(b WatchBatch) error {
	var errs []error
	if b.Reset {
		present := map[string]bool{}
		for _, e := range b.Events {
			present[e.Key] = true
		}
		for k := range l.live {
			if !present[k] {
				l.remove(k)
			}
		}
	}
	for _, e := range b.Events {
		life, reusable, ok := entityLife(e.Key, e.Value)
		if !ok {
			continue
		}
		if e.Type == EventDelete {
			l.remove(e.Key)
			continue
		}
		if life == pb.Life_LIFE_UNSPECIFIED {
			errs = append(errs, fmt.Errorf("revision %d: %s has no life", e.ModRevision, e.Key))
			continue
		}
		cur, known := l.live[e.Key]
		switch {
		case known && cur.create == e.CreateRevision:
			if life < cur.life {
				errs = append(errs, fmt.Errorf("I1: revision %d: %s went from %s back to %s", e.ModRevision, e.Key, lifeName(cur.life), lifeName(life)))
			}
		case (known || l.gone[e.Key]) && !reusable:
			errs = append(errs, fmt.Errorf("I7: revision %d: %s was used before and is created again", e.ModRevision, e.Key))
		case life != pb.Life_LIFE_ALIVE && !known && !b.Reset:
			errs = append(errs, fmt.Errorf("revision %d: %s was created %s, not alive", e.ModRevision, e.Key, lifeName(life)))
		}
		l.live[e.Key] = incarnation{create: e.CreateRevision, life: life}
	}
	return errors.Join(errs...)
}

func (l *LifeChecker) remove(k string) {
	delete(l.live, k)
	l.gone[k] = true
}

// entityLife decodes the life of an entity value. ok is false for keys that
// are not entities; reusable is true for services, whose names may be used
// again once removed.
func entityLife(key string, value []byte) (life pb.Life, reusable, ok bool) {
	var m interface {
		proto.Message
		GetLife() pb.Life
	}
	switch {
	case strings.HasPrefix(key, machinesPrefix):
		m = &pb.Machine{}
	case strings.HasPrefix(key, unitsPrefix):
		m = &pb.Unit{}
	case strings.HasPrefix(key, relationsPrefix):
		m = &pb.Relation{}
	case strings.HasPrefix(key, servicesPrefix):
		m, reusable = &pb.Service{}, true
	default:
		return 0, false, false
	}
	if len(value) > 0 {
		if err := proto.Unmarshal(value, m); err != nil {
			return 0, reusable, true
		}
	}
	return m.GetLife(), reusable, true
}
