package controller_test

import (
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/lifelinehq/lifeline/internal/testing/poll"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// What a unit agent's EnterScope and LeaveScope check of a relation (that
// its service is in it) is read once and remembered: the relation is not
// read for the check again, and a refusal says the same.
func TestAgentRelationCheckRemembered(t *testing.T) {
	m := newAgentModel(t)
	leave := func(rel int64) error {
		_, err := m.as("unit-kv/1").LeaveScope(m.ctx, &pb.LeaveScopeRequest{Relation: rel, Unit: "kv/1"})
		return err
	}
	const msg = "unit kv/1's agent may not leave relation"
	wantCode(t, "kv/1 leaving the container relation", leave(m.container), codes.PermissionDenied, msg)
	// The controller's copy of the credentials hears of kv/1's just
	// issued one a moment after the commit (more under -race and load);
	// until then every call reads it. Counting starts once a call reads
	// nothing.
	poll.UntilSays(t, "a call of kv/1 that reads nothing", func() (bool, string) {
		before := m.st.Stats().Reads
		wantCode(t, "kv/1 leaving", leave(m.container), codes.PermissionDenied, "")
		return m.st.Stats().Reads == before, "every call of kv/1 still reads etcd"
	})
	// The calls again read no more than calls refused before any read
	// (the controller's own workers may read meanwhile, now and then:
	// the fewest of three rounds of 20 calls is counted, since a worker's
	// pass within one round once read 11 times under make test's load).
	reads := func(rel int64, code codes.Code) int64 {
		fewest := int64(-1)
		for range 3 {
			before := m.st.Stats().Reads
			for range 20 {
				wantCode(t, "kv/1 leaving", leave(rel), code, "")
			}
			if n := m.st.Stats().Reads - before; fewest < 0 || n < fewest {
				fewest = n
			}
		}
		return fewest
	}
	if again, none := reads(m.container, codes.PermissionDenied), reads(-1, codes.InvalidArgument); again > none+5 {
		t.Errorf("refused again, 20 calls read %d times at fewest; refused before any read, %d", again, none)
	}
}
