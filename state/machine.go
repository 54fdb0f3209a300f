package state

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/lifelinehq/lifeline/internal/names"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// machinesPerTxn bounds AddMachines' batches: two writes a machine, the
// sequence compared and written, and room for an operator's audit entry
// (auditOps).
const machinesPerTxn = (MaxTxnOps - 2 - auditOps) / 2

// MachineOptions describe machines to add.
type MachineOptions struct {
	// Manual machines are hosts the operator brings: no instance is ever
	// started or stopped for them.
	Manual bool
}

// AddMachines adds n alive machines and returns them. Machines are added in
// batches, each in one transaction; on an error the machines already added
// are returned with it.
func (s *State) AddMachines(ctx context.Context, n int) ([]*pb.Machine, error) {
	return s.AddMachinesWith(ctx, n, MachineOptions{})
}

// AddMachinesWith is AddMachines with options.
func (s *State) AddMachinesWith(ctx context.Context, n int, opts MachineOptions) ([]*pb.Machine, error) {
	if n < 1 {
		return nil, invalidf("cannot add %d machines: want at least 1", n)
	}
	var added []*pb.Machine
	for len(added) < n {
		batch := min(n-len(added), machinesPerTxn)
		var ms []*pb.Machine
		unlock, err := s.hot.lock(ctx, seqMachine)
		if err != nil {
			return added, err
		}
		err = s.apply(ctx, "add machines", func(ctx context.Context) (*change, error) {
			r, err := s.read(ctx, get(seqMachine))
			if err != nil {
				return nil, err
			}
			next, seqRev, err := seqValue(r.one(0))
			if err != nil {
				return nil, err
			}
			c := &change{}
			c.ifMod(seqMachine, seqRev)
			ms = ms[:0]
			for i := 0; i < batch; i++ {
				m := &pb.Machine{Id: strconv.FormatInt(next+int64(i), 10), Life: pb.Life_LIFE_ALIVE, Manual: opts.Manual}
				c.put(MachineKey(m.Id), m)
				ms = append(ms, m)
			}
			c.putRaw(seqMachine, strconv.FormatInt(next+int64(batch), 10))
			return c, nil
		})
		unlock()
		if err != nil {
			return added, err
		}
		added = append(added, ms...)
	}
	return added, nil
}

// seqValue decodes a sequence key: the next id and the key's mod revision.
func seqValue(kv *mvccpb.KeyValue) (int64, int64, error) {
	if kv == nil {
		return 0, 0, nil
	}
	n, err := strconv.ParseInt(string(kv.Value), 10, 64)
	if err != nil {
		return 0, 0, invalidf("corrupt sequence %s: %v", kv.Key, err)
	}
	return n, kv.ModRevision, nil
}

func (s *State) machine(ctx context.Context, id string) (*record[*pb.Machine], error) {
	if err := checkMachineID(id); err != nil {
		return nil, err
	}
	r, err := s.read(ctx, get(MachineKey(id)))
	if err != nil {
		return nil, err
	}
	return machineFrom(r.one(0), id)
}

func machineFrom(kv *mvccpb.KeyValue, id string) (*record[*pb.Machine], error) {
	m, err := decode[pb.Machine](kv)
	if err != nil {
		return nil, err
	}
	if m == nil {
		return nil, notFoundf("machine %s not found", id)
	}
	return m, nil
}

// Machine returns machine id.
func (s *State) Machine(ctx context.Context, id string) (*pb.Machine, error) {
	m, err := s.machine(ctx, id)
	if err != nil {
		return nil, err
	}
	return m.v, nil
}

// Machines returns every machine.
func (s *State) Machines(ctx context.Context) ([]*pb.Machine, error) {
	return listDecoded[pb.Machine](ctx, s, machinesPrefix)
}

// MachinePrincipals returns the principal units assigned to machine id
// (MachineUnitNames adds their subordinates).
func (s *State) MachinePrincipals(ctx context.Context, id string) ([]string, error) {
	if err := checkMachineID(id); err != nil {
		return nil, err
	}
	kvs, err := s.listAll(ctx, machineUnitsPrefix(id), true)
	if err != nil {
		return nil, err
	}
	return keySuffixes(kvs, machineUnitsPrefix(id)), nil
}

func keySuffixes(kvs []*mvccpb.KeyValue, prefix string) []string {
	out := make([]string, len(kvs))
	for i, kv := range kvs {
		out[i] = strings.TrimPrefix(string(kv.Key), prefix)
	}
	return out
}

// DestroyOptions modify a destroy.
type DestroyOptions struct {
	// Force has the cleaner do the agents' work once MaxWait has passed,
	// for agents that are gone or stuck.
	Force bool
	// MaxWait is how long the agents get before the cleaner forces.
	MaxWait time.Duration
}

// DestroyMachine sets machine id dying. Without Force it is refused while
// any unit assigned to the machine is alive (M2); a manual machine that
// never joined (neverJoined) is removed at once instead. With Force the
// machine becomes dying whatever its units, and a cleanup item has the
// cleaner set its units dying and, after MaxWait, force them out and set
// the machine dead. Destroying a machine that is already dying or dead
// does nothing (but may shorten a forced wait).
func (s *State) DestroyMachine(ctx context.Context, id string, opts DestroyOptions) error {
	return s.DestroyMachines(ctx, []string{id}, opts)[0]
}

// destroysPerTxn bounds DestroyMachines' batches: at most four
// operations a machine (forced: its record and its cleanup item, each
// compared and written), and room for an operator's audit entry
// (auditOps).
const destroysPerTxn = (MaxTxnOps - auditOps) / 4

// DestroyMachines is DestroyMachine of each of ids, destroysPerTxn of them
// in a transaction: an operator's destroy of many machines at once, or a
// model's, costs a transaction a batch rather than one a machine. Each
// machine is answered alone, errs[i] for ids[i], as DestroyMachine would
// answer: one refused (M2) or not found is left out of its batch's
// transaction, and does not stop the others. An alive manual machine
// without an instance, which may never have joined, is left out of its
// batch too, and destroyed in a transaction of its own
// (destroyManualMachine), which reads what that depends on.
func (s *State) DestroyMachines(ctx context.Context, ids []string, opts DestroyOptions) (errs []error) {
	errs = s.machineBatches(ctx, "destroy", ids, destroysPerTxn, func(id string) []getOp {
		return []getOp{get(MachineKey(id)), getKeys(machineAlivePrefix(id), 4), get(cleanupKey(cleanupForceMachine, id))}
	}, func(c *change, r *reads, i int, id string) error {
		return s.destroyMachineOps(c, r, i, id, opts)
	})
	for i, err := range errs {
		if errors.Is(err, errManualMachine) {
			errs[i] = s.destroyManualMachine(ctx, ids[i])
		}
	}
	return errs
}

// errManualMachine says a machine is to be destroyed in a transaction of
// its own (destroyManualMachine).
var errManualMachine = errors.New("a manual machine without an instance")

// machineBatches changes each machine of ids, perTxn of them in a
// transaction: it reads gets(id) of each (the same number of reads for
// every id), and ops adds the machine's change to the batch's from those
// answers (r's from i on), or says why not: its error is the machine's
// answer, errs[i] for ids[i] (errNothingToDo: nil, nothing done).
func (s *State) machineBatches(ctx context.Context, verb string, ids []string, perTxn int, gets func(id string) []getOp, ops func(c *change, r *reads, i int, id string) error) (errs []error) {
	errs = make([]error, len(ids))
	seen := make(map[string]bool, len(ids))
	var valid []int // indexes of the ids to change
	for i, id := range ids {
		switch err := checkMachineID(id); {
		case err != nil:
			errs[i] = err
		case seen[id]:
			errs[i] = invalidf("machine %s is named twice", id)
		default:
			seen[id] = true
			valid = append(valid, i)
		}
	}
	for len(valid) > 0 {
		batch := valid[:min(len(valid), perTxn)]
		valid = valid[len(batch):]
		what := verb + " machine " + ids[batch[0]]
		if len(batch) > 1 {
			what = fmt.Sprintf("%s machines %s to %s", verb, ids[batch[0]], ids[batch[len(batch)-1]])
		}
		err := s.apply(ctx, what, func(ctx context.Context) (*change, error) {
			var all []getOp
			at := make([]int, len(batch)) // where each machine's answers start
			for j, i := range batch {
				at[j] = len(all)
				all = append(all, gets(ids[i])...)
			}
			r, err := s.read(ctx, all...)
			if err != nil {
				return nil, err
			}
			c := &change{}
			for j, i := range batch {
				errs[i] = ops(c, r, at[j], ids[i])
			}
			if c.empty() {
				return nil, errNothingToDo
			}
			return c, nil
		})
		for _, i := range batch {
			switch {
			case errors.Is(errs[i], errNothingToDo):
				errs[i] = nil
			case err != nil && errs[i] == nil:
				errs[i] = err
			}
		}
	}
	return errs
}

// destroyMachineOps adds to c the destroy of machine id, from what was
// read of it from r's answer i on (the machine, its alive units' prefix,
// its forced cleanup), or says why not (errNothingToDo when it is done).
func (s *State) destroyMachineOps(c *change, r *reads, i int, id string, opts DestroyOptions) error {
	m, err := machineFrom(r.one(i), id)
	if err != nil {
		return err
	}
	if opts.Force {
		if m.v.Life == pb.Life_LIFE_DEAD {
			return errNothingToDo
		}
		if !s.forceItem(c, r.one(i+2), pb.CleanupKind_CLEANUP_KIND_FORCE_MACHINE, id, opts.MaxWait) && m.v.Forced {
			return errNothingToDo
		}
		if m.v.Life == pb.Life_LIFE_ALIVE || !m.v.Forced {
			next := cloneMachine(m.v)
			next.Life = pb.Life_LIFE_DYING
			next.Forced = true
			c.ifMod(m.key, m.mod)
			c.put(m.key, next)
		}
		return nil
	}
	if m.v.Life != pb.Life_LIFE_ALIVE {
		return errNothingToDo
	}
	if alive := r.all(i + 1); len(alive) > 0 {
		return refused("M2", "machine %s has %s assigned", id, unitList(keySuffixes(alive, machineAlivePrefix(id)), r.more(i+1)))
	}
	if m.v.Manual && m.v.InstanceId == "" {
		return errManualMachine
	}
	dyingMachineOps(c, m)
	return nil
}

// dyingMachineOps adds to c setting alive machine m dying, with no alive
// unit assigned (M2).
func dyingMachineOps(c *change, m *record[*pb.Machine]) {
	next := cloneMachine(m.v)
	next.Life = pb.Life_LIFE_DYING
	c.ifMod(m.key, m.mod)
	c.ifEmpty(machineAlivePrefix(m.v.Id))
	c.put(m.key, next)
}

// destroyManualMachine destroys alive manual machine id without Force.
// One that never joined (neverJoined) is removed at once: no unit is
// assigned to it, so it can be dead at once (M3), and it has no instance
// to release and no agent to wait for (M4). Any other becomes dying, as
// DestroyMachine has every machine do (M2).
func (s *State) destroyManualMachine(ctx context.Context, id string) error {
	tag := names.MachineTag(id)
	return s.apply(ctx, "destroy machine "+id, func(ctx context.Context) (*change, error) {
		r, err := s.read(ctx, get(MachineKey(id)), getKeys(machineAlivePrefix(id), 4), getKeys(machineUnitsPrefix(id), 1),
			getExists(StatusKey(StatusMachine, id)), getExists(presenceKey(tag)), get(OwnerKey(OwnMachine, id)))
		if err != nil {
			return nil, err
		}
		m, err := machineFrom(r.one(0), id)
		if err != nil {
			return nil, err
		}
		if m.v.Life != pb.Life_LIFE_ALIVE {
			return nil, errNothingToDo
		}
		if alive := r.all(1); len(alive) > 0 {
			return nil, refused("M2", "machine %s has %s assigned", id, unitList(keySuffixes(alive, machineAlivePrefix(id)), r.more(1)))
		}
		c := &change{}
		if !neverJoined(m.v, len(r.all(2)) > 0, r.ranges[3].Count > 0, r.ranges[4].Count > 0) {
			dyingMachineOps(c, m)
			return c, nil
		}
		c.ifMod(m.key, m.mod)
		c.ifEmpty(machineUnitsPrefix(id))
		c.ifAbsent(StatusKey(StatusMachine, id))
		c.ifAbsent(presenceKey(tag))
		c.del(m.key)
		c.del(credentialKey(tag))
		c.del(MachineJoinKey(id)) // its join token, not used
		removeOwnerOps(c, OwnMachine, id, r.one(5), true)
		return c, nil
	})
}

// neverJoined says whether machine m is a manual machine whose agent
// never joined: no instance recorded, no unit assigned, and its agent has
// never reported a status (its first act once it runs: SetMachineStatus
// "started") nor holds its presence now.
func neverJoined(m *pb.Machine, units, reported, present bool) bool {
	return m.Manual && m.InstanceId == "" && !units && !reported && !present
}

// EnsureMachineDead sets dying machine id dead, once no unit is assigned to
// it (M3). Its machine agent calls it; so does the cleaner for a forced
// machine.
func (s *State) EnsureMachineDead(ctx context.Context, id string) error {
	return s.apply(ctx, "set machine "+id+" dead", func(ctx context.Context) (*change, error) {
		if err := checkMachineID(id); err != nil {
			return nil, err
		}
		r, err := s.read(ctx, get(MachineKey(id)), getKeys(machineUnitsPrefix(id), 4))
		if err != nil {
			return nil, err
		}
		m, err := machineFrom(r.one(0), id)
		if err != nil {
			return nil, err
		}
		switch m.v.Life {
		case pb.Life_LIFE_DEAD:
			return nil, errNothingToDo
		case pb.Life_LIFE_ALIVE:
			return nil, refused("M3", "machine %s is alive: destroy it before it can be dead", id)
		}
		if units := r.all(1); len(units) > 0 {
			return nil, refused("M3", "machine %s still has %s assigned", id, unitList(keySuffixes(units, machineUnitsPrefix(id)), r.more(1)))
		}
		next := cloneMachine(m.v)
		next.Life = pb.Life_LIFE_DEAD
		c := &change{}
		c.ifMod(m.key, m.mod)
		c.ifEmpty(machineUnitsPrefix(id))
		c.put(m.key, next)
		return c, nil
	})
}

// RemoveMachine removes dead machine id from the model, once the
// provisioner has released its instance (M4).
func (s *State) RemoveMachine(ctx context.Context, id string) error {
	return s.RemoveMachines(ctx, []string{id})[0]
}

// removalsPerTxn bounds RemoveMachines' batches: seven operations a
// machine (its record compared and deleted, its status, credential and
// join token deleted, its owner record and reference deleted).
const removalsPerTxn = 9

// RemoveMachines is RemoveMachine of each of ids, removalsPerTxn of them in
// a transaction: the provisioner removes the machines set dead together
// in a transaction a batch. Each machine is answered alone, errs[i] for
// ids[i]: one refused (M4) or not found is left out of its batch's
// transaction.
func (s *State) RemoveMachines(ctx context.Context, ids []string) (errs []error) {
	return s.machineBatches(ctx, "remove", ids, removalsPerTxn, func(id string) []getOp {
		return []getOp{get(MachineKey(id)), get(OwnerKey(OwnMachine, id))}
	}, func(c *change, r *reads, i int, id string) error {
		m, err := machineFrom(r.one(i), id)
		if err != nil {
			return err
		}
		if m.v.Life != pb.Life_LIFE_DEAD {
			return refused("M4", "machine %s is %s: only a dead machine can be removed", id, lifeName(m.v.Life))
		}
		c.ifMod(m.key, m.mod)
		c.del(m.key)
		for _, k := range machineStatusKinds {
			c.del(StatusKey(k, id))
		}
		c.del(credentialKey(names.MachineTag(id)))
		c.del(MachineJoinKey(id))
		removeOwnerOps(c, OwnMachine, id, r.one(i+1), false) // dead: no claim lands
		return nil
	})
}

// SetMachineInstance records the instance the provisioner started for alive
// machine id, and its address.
func (s *State) SetMachineInstance(ctx context.Context, id, instance, address string) error {
	return s.apply(ctx, "set instance of machine "+id, func(ctx context.Context) (*change, error) {
		m, err := s.machine(ctx, id)
		if err != nil {
			return nil, err
		}
		if m.v.InstanceId == instance && m.v.Address == address {
			return nil, errNothingToDo
		}
		if m.v.Life != pb.Life_LIFE_ALIVE {
			return nil, refused("M1", "machine %s is %s: no instance is started for it", id, lifeName(m.v.Life))
		}
		next := cloneMachine(m.v)
		next.InstanceId, next.Address = instance, address
		c := &change{}
		c.ifMod(m.key, m.mod)
		c.put(m.key, next)
		return c, nil
	})
}

func cloneMachine(m *pb.Machine) *pb.Machine { return protoClone(m) }

// unitList names units for a refusal: "unit kv/0", "units kv/0, kv/1 and more".
func unitList(units []string, more bool) string {
	switch {
	case len(units) == 1 && !more:
		return "unit " + units[0]
	case more:
		return "units " + strings.Join(units, ", ") + " and more"
	default:
		return "units " + strings.Join(units[:len(units)-1], ", ") + " and " + units[len(units)-1]
	}
}
