package state

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// A unit's status history: every change of its agent's or its workload's
// status is appended, in the transaction that records it, at
// status-history/<unit>/<seq>. seq counts the unit's changes from 1; it is
// not stored apart but read off the newest key, and zero-padded so that the
// keys sort as the numbers do. The history keeps the last
// StatusHistoryLimit entries: the append of seq deletes every key below
// seq-StatusHistoryLimit+1, in one range delete, which in a history kept
// this way is the one key seq-StatusHistoryLimit. So every append is the
// same small transaction, however long the unit lives. The history goes
// with the unit, in one prefix delete.
const statusHistoryPrefix = "status-history/"

// StatusHistoryLimit is how many entries of its status history a unit
// keeps: its last status changes.
const StatusHistoryLimit = 50

// historySeqDigits is the width of a history key's sequence number.
const historySeqDigits = 20

// StatusHistoryPrefix is the prefix of the named unit's status history.
func StatusHistoryPrefix(unit string) string { return statusHistoryPrefix + unit + "/" }

// StatusHistoryKey is the key of entry seq of the named unit's status
// history.
func StatusHistoryKey(unit string, seq int64) string {
	return fmt.Sprintf("%s%0*d", StatusHistoryPrefix(unit), historySeqDigits, seq)
}

// parseHistoryKey splits a status history key into its unit and sequence
// number.
func parseHistoryKey(key string) (unit string, seq int64, err error) {
	rest, ok := strings.CutPrefix(key, statusHistoryPrefix)
	i := strings.LastIndexByte(rest, '/')
	if !ok || i < 0 {
		return "", 0, fmt.Errorf("%s is not a status history key", key)
	}
	unit, digits := rest[:i], rest[i+1:]
	if err := checkUnitName(unit); err != nil {
		return "", 0, fmt.Errorf("status history key %s: %w", key, err)
	}
	seq, err = strconv.ParseInt(digits, 10, 64)
	if err != nil || len(digits) != historySeqDigits || seq < 1 {
		return "", 0, fmt.Errorf("status history key %s: sequence %q is not %d digits counting from 1", key, digits, historySeqDigits)
	}
	return unit, seq, nil
}

// StatusHistoryEntry is one change of a unit's status.
type StatusHistoryEntry struct {
	// Seq numbers the unit's status changes from 1.
	Seq int64
	// Kind is StatusUnitAgent or StatusUnit.
	Kind StatusKind
	// Status is the status the unit entered, stamped with when.
	Status *pb.Status
}

// setUnitStatus records the named unit's status of kind (StatusUnitAgent
// or StatusUnit) and appends it to the unit's history, in one transaction.
// A status equal to the current one (status, message and data: its time
// does not count) changes nothing: the current record keeps its time and
// the history gets no entry, so that an agent repeating itself does not
// push real changes out of the history.
func (s *State) setUnitStatus(ctx context.Context, kind StatusKind, unit string, st *pb.Status) error {
	return s.apply(ctx, "set the "+string(kind)+" status of unit "+unit, func(ctx context.Context) (*change, error) {
		r, err := s.read(ctx, unitStatusGets(kind, unit)...)
		if err != nil {
			return nil, err
		}
		c := &change{}
		if err := unitStatusOps(c, r, 0, kind, unit, st); err != nil {
			return nil, err
		}
		if c.empty() {
			return nil, errNothingToDo
		}
		return c, nil
	})
}

// unitStatusGets are the reads unitStatusOps decides on: whether the unit
// exists (its value is not needed), its current status of kind, and the
// newest entry of its history.
func unitStatusGets(kind StatusKind, unit string) []getOp {
	return []getOp{getKeyOnly(UnitKey(unit)), get(StatusKey(kind, unit)), getLastKey(StatusHistoryPrefix(unit))}
}

// unitStatusOps adds to c what records unit's status st of kind, from the
// answers to unitStatusGets at r's answers i to i+2: nothing when st is a
// report overtaken by a newer one or repeats the current status with no
// newer seq. It asserts what it relied on.
func unitStatusOps(c *change, r *reads, i int, kind StatusKind, unit string, st *pb.Status) error {
	if r.one(i) == nil {
		return notFoundf("unit %s not found", unit)
	}
	statusKey, histPrefix := StatusKey(kind, unit), StatusHistoryPrefix(unit)
	cur, err := decode[pb.Status](r.one(i + 1))
	if err != nil {
		return err
	}
	var curMod int64
	if cur != nil {
		if overtaken(cur.v, st) {
			return nil
		}
		curMod = cur.mod
		if sameStatus(cur.v, st) {
			if st.Seq <= cur.v.Seq && st.SyncedRevision <= cur.v.SyncedRevision {
				return nil
			}
			// Nothing new for the history, but a report older than
			// this one, still on its way, must find it newer; and the
			// barrier the agent has seen moves on (a report for ctl
			// wait, which no one reads in the history).
			kept := protoClone(cur.v)
			kept.Seq = max(st.Seq, cur.v.Seq)
			kept.SyncedRevision = max(st.SyncedRevision, cur.v.SyncedRevision)
			c.ifMod(statusKey, curMod)
			c.put(statusKey, kept)
			return nil
		}
	}
	var last int64
	if kv := r.one(i + 2); kv != nil {
		if _, last, err = parseHistoryKey(string(kv.Key)); err != nil {
			return err
		}
	}
	seq := last + 1
	c.ifExists(UnitKey(unit))
	// The decision "this is a change" relied on the current record;
	// the sequence number on the history, which another writer (the
	// other kind's) may have appended to since.
	c.ifMod(statusKey, curMod)
	c.ifNoNewer(histPrefix, r.rev)
	c.put(statusKey, st)
	c.put(StatusHistoryKey(unit, seq), &pb.StatusHistoryEntry{Kind: string(kind), Status: st})
	if oldest := seq - StatusHistoryLimit + 1; oldest > 1 {
		c.delRange(StatusHistoryKey(unit, 0), StatusHistoryKey(unit, oldest))
	}
	return nil
}

// seqClockStep bounds how far below the stored status's seq a report's may
// be and still count as overtaken: a report is delayed by seconds at most
// (an agent waits 10 s for one), so a seq further behind is a clock set
// back on the agent's host, and its reports must not be ignored until the
// clock catches up.
const seqClockStep = 5 * 60 * int64(time.Second)

// overtaken says whether st is an agent's report that a newer one of the
// same agent has already replaced: both have a seq, st's the lower.
func overtaken(cur, st *pb.Status) bool {
	if cur.GetSeq() == 0 || st.GetSeq() == 0 {
		return false
	}
	return st.Seq < cur.Seq && cur.Seq-st.Seq < seqClockStep
}

// sameStatus reports whether a and b say the same, whenever they were set.
func sameStatus(a, b *pb.Status) bool {
	return a.GetStatus() == b.GetStatus() && a.GetMessage() == b.GetMessage() && maps.Equal(a.GetData(), b.GetData())
}

// StatusHistory returns the newest limit entries of the named unit's
// status history, oldest first: all it keeps (StatusHistoryLimit at most)
// when limit is 0 or more than that. The unit must exist.
func (s *State) StatusHistory(ctx context.Context, unit string, limit int) ([]StatusHistoryEntry, error) {
	if err := checkUnitName(unit); err != nil {
		return nil, err
	}
	if limit < 0 {
		return nil, invalidf("status history limit %d is negative", limit)
	}
	if limit == 0 || limit > StatusHistoryLimit {
		limit = StatusHistoryLimit
	}
	r, err := s.read(ctx,
		getKeyOnly(UnitKey(unit)),
		getOp{Key: StatusHistoryPrefix(unit), End: prefixEnd(StatusHistoryPrefix(unit)), Limit: int64(limit), NewestFirst: true},
	)
	if err != nil {
		return nil, err
	}
	if r.one(0) == nil {
		return nil, notFoundf("unit %s not found", unit)
	}
	out := make([]StatusHistoryEntry, 0, len(r.all(1)))
	for _, kv := range r.all(1) {
		_, seq, err := parseHistoryKey(string(kv.Key))
		if err != nil {
			return nil, err
		}
		e, err := decode[pb.StatusHistoryEntry](kv)
		if err != nil {
			return nil, err
		}
		out = append(out, StatusHistoryEntry{Seq: seq, Kind: StatusKind(e.v.Kind), Status: e.v.GetStatus()})
	}
	slices.Reverse(out)
	return out, nil
}
