package state

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"go.etcd.io/etcd/api/v3/mvccpb"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// A running operation has one task a target unit, tasks/<op>/<unit>. An
// open task (not done, failed or stopped) has refs/op-open/<op>/<unit>
// and refs/unit-tasks/<unit>/<op>, both valued with what its agent is to
// do (taskRefValue); one on its machine (running, pausing, stopping) has
// refs/machine-running/<machine>/<op>/<unit>; a lost one
// refs/lost-tasks/<op>/<unit>; a closed one that failed or stopped has
// operation-refs/failed or stopped/<op>/<unit>.
//
// With max_parallel > 0, at most that many tasks of the operation hold a
// slot, refs/op-slots/<op>/<unit>: admitted pending, running, pausing and
// stopping ones. A pending task without a slot is queued,
// refs/op-queue/<op>/<unit>. A change that frees a slot admits the first
// queued task (by key) in the same transaction; one that finds none
// queued puts operation-refs/freed/<op>, which every change that queues a
// task compares, with no slot added since its count: so no task is ever
// queued while a slot is free, and no slot is ever taken beyond the
// bound. With max_parallel = 0 every pending task is admitted and neither
// reference is written.
//
// The change that closes an operation's last open task (its open
// references compared: none added since they were counted) writes the
// operation's end: DONE when none failed or stopped, FAILED when one
// failed, else STOPPED. One that closes others asserts that another open
// task remains (a witness). While the tasks are still being made
// (tasks_created false), a closing change compares the operation's
// record instead, which the last batch of tasks rewrites.

// ledgerReads is how many reads of an operation's shared keys an
// attempt makes first (ledgerGets).
const ledgerReads = 8

// ledgerGets reads operation id's shared keys, for an attempt that
// changes up to k of its tasks.
//
// The open tasks' references are read for a witness (settle) in two
// ascending ranges of up to k+2 keys each, which together cover the
// prefix: from witnessStart to its end, then from its start up to
// witnessStart. etcd reads an ascending range with a limit from its
// store up to the limit, whatever the range holds; a range sorted any
// other way it reads whole, then sorts and cuts (its "fetch everything"),
// which made every task change cost O(open tasks). When neither range
// is cut short they read every open task; when one is, they read more
// than the change can close, so a witness is among them: the count of
// the open tasks is not read.
func (s *State) ledgerGets(id int64, k int) []getOp {
	p := opOpenPrefix(id)
	from := s.witnessStart(id, k+2)
	return []getOp{
		s.getOperation(id),
		getCount(opSlotsPrefix(id)),
		getKeyOnly(opFreedRef(id)),
		getKeys(opQueuePrefix(id), int64(2*k+2)),
		{Key: from, End: prefixEnd(p), Limit: int64(k + 2), KeysOnly: true},
		{Key: p, End: from, Limit: int64(k + 2), KeysOnly: true},
		getKeys(opFailedPrefix(id), 1),
		getKeys(opStoppedPrefix(id), 1),
	}
}

// witnessStart is where the first range of an operation's open tasks
// that ledgerGets reads begins: at its n-th last target, by the record
// the State keeps of it, else at the prefix's start. Tasks are made,
// admitted from the queue, paused and stopped in their targets' order,
// and mostly end in it: the last targets' tasks are the last likely to
// close, and make witnesses that a change in flight seldom deletes.
func (s *State) witnessStart(id int64, n int) string {
	s.ops.mu.Lock()
	rec := s.ops.recs[id]
	s.ops.mu.Unlock()
	if rec == nil || len(rec.v.Units) <= n {
		return opOpenPrefix(id)
	}
	return opOpenRef(id, rec.v.Units[len(rec.v.Units)-n])
}

// opLedger is what an attempt read of an operation's shared keys
// (ledgerGets) and what its change does to them.
type opLedger struct {
	s   *State
	c   *change
	rev int64
	op  *record[*pb.Operation]
	id  int64
	// next is the operation's record as the change writes it; nil when
	// it does not.
	next *pb.Operation
	max  int64

	slots     int64
	freedMod  int64
	queue     []*mvccpb.KeyValue
	queueMore bool
	used      map[string]bool // queue entries the change admits or removes
	// open is how many open tasks were read: all of them, or more than
	// the change can close (ledgerGets); openRead are their references.
	open      int64
	openRead  []*mvccpb.KeyValue
	failedAny bool
	stopAny   bool

	closing            map[string]bool
	closed, opened     int
	closedFailed       bool
	closedStopped      bool
	assertedSlots      bool
	assertedFreed      bool
	assertedQueueEmpty bool
	assertedOp         bool
}

// newLedger reads r's answers to ledgerGets(id, …) from i on.
func (s *State) newLedger(ctx context.Context, c *change, r *reads, i int, id int64) (*opLedger, error) {
	op, err := s.operationRead(ctx, r.one(i), id)
	if err != nil {
		return nil, err
	}
	l := &opLedger{
		s: s, c: c, rev: r.rev, op: op, id: id, max: int64(op.v.MaxParallel),
		slots: r.ranges[i+1].Count, queue: r.all(i + 3), queueMore: r.more(i + 3),
		used: map[string]bool{}, openRead: append(slices.Clip(r.all(i+4)), r.all(i+5)...),
		failedAny: len(r.all(i+6)) > 0, stopAny: len(r.all(i+7)) > 0, closing: map[string]bool{},
	}
	l.open = int64(len(l.openRead))
	if kv := r.one(i + 2); kv != nil {
		l.freedMod = kv.ModRevision
	}
	return l, nil
}

// cur is the operation as the change leaves it.
func (l *opLedger) cur() *pb.Operation {
	if l.next != nil {
		return l.next
	}
	return l.op.v
}

// rewrite returns the operation's record for the change to write,
// asserting the one read.
func (l *opLedger) rewrite() *pb.Operation {
	if l.next == nil {
		l.next = protoClone(l.op.v)
	}
	l.assertOp()
	return l.next
}

func (l *opLedger) assertOp() {
	if !l.assertedOp {
		l.c.ifMod(l.op.key, l.op.mod)
		l.assertedOp = true
	}
}

// setRefs writes an open task's references' value.
func (l *opLedger) setRefs(unit, value string) {
	l.c.putRaw(opOpenRef(l.id, unit), value)
	l.c.putRaw(unitTaskRef(unit, l.id), value)
}

// take gives a task becoming pending a slot if one is free, else queues
// it, and reports whether it was admitted.
func (l *opLedger) take(unit string) bool {
	if l.max == 0 {
		return true
	}
	if !l.assertedSlots {
		l.c.ifNoNewer(opSlotsPrefix(l.id), l.rev)
		l.assertedSlots = true
	}
	if l.slots < l.max {
		l.slots++
		l.c.putRaw(opSlotRef(l.id, unit), "")
		return true
	}
	if !l.assertedFreed {
		l.c.ifMod(opFreedRef(l.id), l.freedMod)
		l.assertedFreed = true
	}
	l.c.putRaw(opQueueRef(l.id, unit), "")
	return false
}

// release frees the slot of a task that held one and admits the first
// queued task, if any.
func (l *opLedger) release(unit string) error {
	if l.max == 0 {
		return nil
	}
	l.c.del(opSlotRef(l.id, unit))
	l.slots--
	for _, kv := range l.queue {
		q := strings.TrimPrefix(string(kv.Key), opQueuePrefix(l.id))
		if l.used[q] || l.closing[q] {
			continue
		}
		l.used[q] = true
		l.c.ifMod(string(kv.Key), kv.ModRevision)
		l.c.del(string(kv.Key))
		l.c.putRaw(opSlotRef(l.id, q), "")
		l.setRefs(q, taskAdmitted)
		l.slots++
		return nil
	}
	if l.queueMore {
		// ledgerGets reads more queued tasks than an attempt can use.
		return fmt.Errorf("operation %d: its queue was read short", l.id)
	}
	if !l.assertedQueueEmpty {
		// None queued but those the change admits or removes.
		l.c.ifNoNewer(opQueuePrefix(l.id), l.rev)
		l.c.putRaw(opFreedRef(l.id), "")
		l.assertedQueueEmpty = true
	}
	return nil
}

// dequeue takes a queued task out of the queue.
func (l *opLedger) dequeue(unit string) {
	l.used[unit] = true
	l.c.del(opQueueRef(l.id, unit))
}

// leave drops what an open task's state holds: its slot or queue place,
// its machine's reference, its lost reference. t is the task as read,
// admitted whether it held a slot while pending.
func (l *opLedger) leave(t *pb.Task, admitted bool) error {
	switch t.State {
	case pb.TaskState_TASK_STATE_PENDING:
		if !admitted {
			l.dequeue(t.Unit)
			return nil
		}
	case pb.TaskState_TASK_STATE_LOST:
		l.c.del(lostRef(l.id, t.Unit))
		return nil
	case pb.TaskState_TASK_STATE_PAUSED:
		return nil
	default: // on its machine
		l.c.del(machineRunningRef(t.Machine, l.id, t.Unit))
	}
	return l.release(t.Unit)
}

// close closes open task t (as read; admitted if it held a slot while
// pending) as next (DONE, FAILED or STOPPED), adding the change's writes
// but for next's record.
func (l *opLedger) close(t *pb.Task, admitted bool, outcome pb.TaskState) error {
	if err := l.leave(t, admitted); err != nil {
		return err
	}
	l.c.del(opOpenRef(l.id, t.Unit))
	l.c.del(unitTaskRef(t.Unit, l.id))
	switch outcome {
	case pb.TaskState_TASK_STATE_FAILED:
		l.c.putRaw(opFailedRef(l.id, t.Unit), "")
		l.closedFailed = true
	case pb.TaskState_TASK_STATE_STOPPED:
		l.c.putRaw(opStoppedRef(l.id, t.Unit), "")
		l.closedStopped = true
	}
	l.closing[t.Unit] = true
	l.closed++
	return nil
}

// settle ends the change's work on the operation: when it closes tasks
// or finishes making them, it writes the operation's end if no task is
// left open, else keeps a witness that one is; then it writes the
// operation's record if the change rewrote it.
func (l *opLedger) settle() error {
	created := l.next != nil && l.next.TasksCreated && !l.op.v.TasksCreated
	if l.closed > 0 || created {
		switch after := l.open - int64(l.closed) + int64(l.opened); {
		case !l.cur().TasksCreated:
			// The last batch of tasks rewrites the record: it and this
			// change see each other.
			l.assertOp()
		case after > 0 && l.opened > 0:
			// A task this change opens stays open.
		case after > 0:
			w := l.witness()
			if w == "" {
				return fmt.Errorf("operation %d: no open task read to witness", l.id)
			}
			l.c.ifExists(w)
		default:
			l.c.ifNoNewer(opOpenPrefix(l.id), l.rev)
			next := l.rewrite()
			switch {
			case l.failedAny || l.closedFailed:
				next.State = pb.OperationState_OPERATION_STATE_FAILED
			case l.stopAny || l.closedStopped:
				next.State = pb.OperationState_OPERATION_STATE_STOPPED
			default:
				next.State = pb.OperationState_OPERATION_STATE_DONE
			}
			next.FinishedUnixNano = l.s.now().UnixNano()
			l.c.del(opOpenOpRef(l.id))
		}
	}
	if l.next != nil {
		l.assertOp()
		l.c.put(l.op.key, l.next)
	}
	return nil
}

// witness picks an open task's reference the change does not close,
// among those read, preferring one no transaction of the State in
// flight deletes.
func (l *opLedger) witness() string {
	var cands []*mvccpb.KeyValue
	for _, kv := range l.openRead {
		if !l.closing[strings.TrimPrefix(string(kv.Key), opOpenPrefix(l.id))] {
			cands = append(cands, kv)
		}
	}
	if len(cands) == 0 {
		return ""
	}
	if st := l.s.deleting.staying(cands); len(st) > 0 {
		return string(st[0].Key)
	}
	return string(cands[0].Key)
}

// tasksPerBatch is how many tasks one transaction of materializeTasks
// makes: six operations each at most, with the operation's own few and
// an audit entry's.
const tasksPerBatch = 8

// maxMakeParts is how many parts of its targets an operation's tasks are
// made in at once. Making 10,000 tasks in batches one after another took
// most of a minute; the batches of different parts share no key but the
// count of parts done, which only a part's last batch writes, and so
// share etcd's rounds.
const maxMakeParts = 4

// makeParts is how many parts op's targets are made in: one a batch, up
// to maxMakeParts, and one only with max_parallel, where every batch
// that admits or queues a task compares the slots, so that batches at
// once would only conflict.
func makeParts(op *pb.Operation) int {
	if op.MaxParallel > 0 {
		return 1
	}
	return max(1, min(maxMakeParts, (len(op.Units)+tasksPerBatch-1)/tasksPerBatch))
}

// makePart is the range of op's targets that part p of parts covers.
func makePart(n, parts, p int) (lo, hi int) {
	return p * n / parts, (p + 1) * n / parts
}

// materializeTasks makes running operation id's tasks: its targets in
// makeParts parts at once, each part in batches of tasksPerBatch targets
// in order, each batch a transaction: an alive unit's task PENDING
// (admitted or queued), compared with the unit's record and its open
// tasks; a unit that is gone, not alive, or has MaxOpenTasksPerUnit open
// tasks gets a STOPPED task saying so. The last batch of the last part
// to finish sets tasks_created and, when no task is open, ends the
// operation. Each part resumes after the last task it made, as its count
// says (opMadeRef, one key read whatever the tasks made), so a run cut
// short by a crash is finished by another (MaterializePending); two at
// once make each task once, each batch comparing the count it read.
func (s *State) materializeTasks(ctx context.Context, id int64) error {
	s.making.add(id, 1)
	defer s.making.add(id, -1)
	op, err := s.cachedOperation(ctx, id)
	if err != nil {
		return err
	}
	parts := makeParts(op)
	if parts == 1 {
		return s.materializePart(ctx, id, 0)
	}
	errs := make([]error, parts)
	var wg sync.WaitGroup
	for p := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[p] = s.materializePart(ctx, id, p)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// materializePart makes the tasks of part p of operation id's targets,
// batch after batch.
func (s *State) materializePart(ctx context.Context, id int64, p int) error {
	start := -1 // where the next batch is expected to start
	for {
		done := false
		err := s.apply(ctx, fmt.Sprintf("make the tasks of operation %d", id), func(ctx context.Context) (*change, error) {
			for {
				c, at, err := s.materializeBatch(ctx, id, p, start)
				if err != nil || c != nil {
					done = errors.Is(err, errNothingToDo)
					return c, err
				}
				start = at
			}
		})
		if err != nil || done {
			return err
		}
		start += tasksPerBatch
	}
}

// making counts the runs of materializeTasks under way, by operation.
type making struct {
	mu   sync.Mutex
	runs map[int64]int
}

func (m *making) add(id int64, n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.runs == nil {
		m.runs = map[int64]int{}
	}
	if m.runs[id] += n; m.runs[id] <= 0 {
		delete(m.runs, id)
	}
}

// busy says whether a run of materializeTasks makes operation id's tasks.
func (m *making) busy(id int64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.runs[id] > 0
}

// madeCounts are an operation's counts of tasks made (opMadeRef) as read.
type madeCounts struct {
	part, done       int
	partMod, doneMod int64
}

// readMade reads part p's count and the count of parts done from kvs,
// the keys under opMadePrefix(id).
func readMade(kvs []*mvccpb.KeyValue, id int64, p, most int) (madeCounts, error) {
	var m madeCounts
	for _, kv := range kvs {
		n, err := strconv.Atoi(string(kv.Value))
		if err != nil || n < 0 || n > most {
			return m, fmt.Errorf("operation %d: corrupt count of tasks made %s=%q", id, kv.Key, kv.Value)
		}
		switch string(kv.Key) {
		case opMadeRef(id, p):
			m.part, m.partMod = n, kv.ModRevision
		case opMadeDoneRef(id):
			m.done, m.doneMod = n, kv.ModRevision
		}
	}
	return m, nil
}

// materializeBatch is one attempt of a batch of part p expected to start
// at target index start (-1: not known). When the tasks made so far say
// the batch starts elsewhere, it returns no change and where it starts;
// when none is left to make in the part, errNothingToDo.
func (s *State) materializeBatch(ctx context.Context, id int64, p, start int) (*change, int, error) {
	gets := append(s.ledgerGets(id, 0), getPrefix(opMadePrefix(id), maxMakeParts+1))
	var batch []string
	if start >= 0 {
		op, err := s.cachedOperation(ctx, id)
		if err != nil {
			return nil, 0, err
		}
		_, hi := makePart(len(op.Units), makeParts(op), p)
		batch = op.Units[min(start, hi):min(start+tasksPerBatch, hi)]
		for _, u := range batch {
			p := UnitTasksPrefix(u)
			gets = append(gets, get(UnitKey(u)), getCount(p))
		}
	}
	r, err := s.read(ctx, gets...)
	if err != nil {
		return nil, 0, err
	}
	c := &change{}
	l, err := s.newLedger(ctx, c, r, 0, id)
	if err != nil {
		return nil, 0, err
	}
	op := l.op.v
	if op.State != pb.OperationState_OPERATION_STATE_RUNNING || op.TasksCreated {
		return nil, 0, errNothingToDo
	}
	parts := makeParts(op)
	lo, hi := makePart(len(op.Units), parts, p)
	made, err := readMade(r.all(ledgerReads), id, p, len(op.Units))
	if err != nil {
		return nil, 0, err
	}
	switch at := lo + made.part; {
	case at > hi:
		return nil, 0, fmt.Errorf("operation %d: part %d counts %d tasks made, of %d targets", id, p, made.part, hi-lo)
	case at == hi:
		return nil, 0, errNothingToDo
	case at != start:
		return nil, at, nil
	}
	now := s.now().UnixNano()
	for i, name := range batch {
		u, err := decode[pb.Unit](r.one(ledgerReads + 1 + 2*i))
		if err != nil {
			return nil, 0, err
		}
		t := &pb.Task{Operation: id, Unit: name, ChangedUnixNano: now}
		key := TaskKey(id, name)
		var why string
		switch {
		case u == nil:
			why = "unit gone"
		case u.v.Life != pb.Life_LIFE_ALIVE:
			why = "unit " + lifeName(u.v.Life)
		case r.ranges[ledgerReads+2+2*i].Count >= MaxOpenTasksPerUnit:
			why = fmt.Sprintf("unit %s has %d open tasks, the most a unit may have", name, MaxOpenTasksPerUnit)
		}
		if why != "" {
			t.State, t.Message, t.FinishedUnixNano = pb.TaskState_TASK_STATE_STOPPED, why, now
			if u != nil {
				t.Machine = u.v.MachineId
			}
			c.ifAbsent(key)
			c.put(key, t)
			c.putRaw(opStoppedRef(id, name), "")
			l.stopAny = true
			continue
		}
		t.State, t.Machine = pb.TaskState_TASK_STATE_PENDING, u.v.MachineId
		// The unit alive and its open tasks as counted: no task of this
		// operation either.
		c.ifMod(u.key, u.mod)
		c.ifNoNewer(UnitTasksPrefix(name), r.rev)
		c.put(key, t)
		l.setRefs(name, taskRefValue(t.State, l.take(name)))
		l.opened++
	}
	c.ifMod(opMadeRef(id, p), made.partMod)
	switch {
	case start+len(batch) < hi:
		c.putRaw(opMadeRef(id, p), strconv.Itoa(start+len(batch)-lo))
	case made.done+1 < parts:
		// The part is done, others are not: the last of theirs sees it.
		c.putRaw(opMadeRef(id, p), strconv.Itoa(hi-lo))
		c.ifMod(opMadeDoneRef(id), made.doneMod)
		c.putRaw(opMadeDoneRef(id), strconv.Itoa(made.done+1))
	default:
		c.ifMod(opMadeDoneRef(id), made.doneMod)
		c.delPrefix(opMadePrefix(id))
		l.rewrite().TasksCreated = true
	}
	if err := l.settle(); err != nil {
		return nil, 0, err
	}
	return c, 0, nil
}

// cachedOperation reads operation id, from the copy kept when it is
// unchanged.
func (s *State) cachedOperation(ctx context.Context, id int64) (*pb.Operation, error) {
	r, err := s.read(ctx, s.getOperation(id))
	if err != nil {
		return nil, err
	}
	rec, err := s.operationRead(ctx, r.one(0), id)
	if err != nil {
		return nil, err
	}
	return rec.v, nil
}
