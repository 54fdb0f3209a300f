package state

import (
	"context"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// BarrierKey is the key of the model's barrier (pb.Barrier): each write of
// it is a mark that the controllers' watch hubs bring every watch stream
// to, so that an agent can tell it has seen every change up to the
// barrier's revision (its mod revision) on each of its subjects. It is not
// an entity's: it stays when the model empties, as the id sequences do.
const BarrierKey = "barrier"

// Barrier returns the revision of a barrier at or past atLeast, or, when
// atLeast is 0, at or past the store's current revision: the barrier
// already there when it is recent enough, else one written now. A revision
// the store has not reached is refused (ErrInvalid).
func (s *State) Barrier(ctx context.Context, atLeast int64) (int64, error) {
	if atLeast < 0 {
		return 0, invalidf("barrier at revision %d: want 0 or a revision the model has reached", atLeast)
	}
	r, err := s.read(ctx, getKeyOnly(BarrierKey))
	if err != nil {
		return 0, err
	}
	want := atLeast
	switch {
	case atLeast > r.rev:
		return 0, invalidf("barrier at revision %d: the model is at revision %d", atLeast, r.rev)
	case atLeast == 0:
		want = r.rev
	}
	if kv := r.one(0); kv != nil && kv.ModRevision >= want {
		return kv.ModRevision, nil
	}
	c := &change{}
	c.put(BarrierKey, &pb.Barrier{UnixNano: s.now().UnixNano()})
	_, rev, err := s.commitAt(ctx, c)
	if err != nil {
		return 0, err
	}
	return rev, nil
}
