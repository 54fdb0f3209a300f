package state

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lifelinehq/lifeline/internal/names"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"
)

// An operation runs a charm's action on some of a service's units: one
// task a target unit (tasks.go). It is made by CreateOperation from what
// the caller validated against the charm's actions: INVALID with the
// validation errors (nothing runs), RUNNING at once for a safe action,
// else AWAITING_APPROVAL until an approver approves exactly what will run
// (its digest), after which the requester (or an admin) executes it. An
// approval request and an approval lapse after the operation's approval
// TTL. Executing is refused when the service's charm changed since the
// operation was made.
//
// The rules, as RuleError names them:
//
//	A1 an operation is made, and executed, only while its service is at the charm it was made against
//	A2 approved only while awaiting approval and not expired, with the digest shown, by an approver who is not the requester
//	A3 executed only once approved and not expired, by the requester or an admin
//	A4 rejected only while awaiting approval, by an approver or an admin
//	T1 a task moves only along its diagram (tasks.go); stopping is final
//	T2 a task's agent reports only on its task's current attempt, from the unit's machine

// DefaultApprovalTTL is how long an approval request, and an approval,
// stays good when the caller names no TTL.
const DefaultApprovalTTL = 24 * time.Hour

// Approvers with a role rather than a name.
const (
	ApproverAdmin    = "@admin"
	ApproverOperator = "@operator"
)

// maxOperationErrors bounds the validation errors an INVALID operation
// records.
const maxOperationErrors = 100

// NewOperation is an operation for CreateOperation: what the caller made
// of the request and the charm's action.
type NewOperation struct {
	Service, Action string
	// Units are the targets, units of Service.
	Units []string
	// ParamsJSON is the parameters, a JSON object with the action's
	// defaults applied; stored canonical.
	ParamsJSON []byte
	// Charm is the service's charm the parameters were validated against.
	Charm     *pb.CharmRef
	Requester string
	// Invalid, when not empty, lists the validation errors: the
	// operation is recorded INVALID and nothing runs.
	Invalid []string
	// The action's settings.
	Approvers   []string
	Safe        bool
	Parallel    bool
	Timeout     time.Duration
	MaxParallel int
	PauseGrace  time.Duration
	// ApprovalTTL is how long the request, and then the approval, stay
	// good; DefaultApprovalTTL when zero.
	ApprovalTTL time.Duration
}

func checkActionName(name string) error {
	ok := len(name) > 0 && len(name) <= 63 && name[0] >= 'a' && name[0] <= 'z' && name[len(name)-1] != '-'
	for i := 0; ok && i < len(name); i++ {
		c := name[i]
		ok = c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-'
	}
	if !ok {
		return invalidf("invalid action name %q: lowercase letters, digits and \"-\", starting with a letter", name)
	}
	return nil
}

func checkApprover(a string) error {
	if a == ApproverAdmin || a == ApproverOperator || names.ValidUser(a) {
		return nil
	}
	return invalidf("invalid approver %q: a user's name, %s or %s", a, ApproverAdmin, ApproverOperator)
}

// record makes the operation's record, without its id and digest, or
// refuses the request as malformed.
func (n NewOperation) record(now time.Time) (*pb.Operation, error) {
	if err := checkServiceName(n.Service); err != nil {
		return nil, err
	}
	if err := checkActionName(n.Action); err != nil {
		return nil, err
	}
	if err := checkUserName(n.Requester); err != nil {
		return nil, err
	}
	if n.Charm == nil {
		return nil, invalidf("operation of %s on %s: no charm", n.Action, n.Service)
	}
	units := slices.Clone(n.Units)
	slices.Sort(units)
	units = slices.Compact(units)
	switch {
	case len(units) == 0:
		return nil, invalidf("operation of %s on %s: no target units", n.Action, n.Service)
	case len(units) > MaxOperationTargets:
		return nil, invalidf("operation of %s on %s: %d target units, at most %d", n.Action, n.Service, len(units), MaxOperationTargets)
	}
	for _, u := range units {
		if err := checkUnitName(u); err != nil {
			return nil, err
		}
		if names.UnitService(u) != n.Service {
			return nil, invalidf("unit %s is not of service %s", u, n.Service)
		}
	}
	params, err := CanonicalParams(n.ParamsJSON)
	if err != nil {
		return nil, err
	}
	if len(params) > MaxParamsBytes {
		return nil, tooLarge("the parameters", len(params), MaxParamsBytes)
	}
	if len(n.Invalid) > maxOperationErrors {
		return nil, invalidf("%d validation errors: at most %d are recorded", len(n.Invalid), maxOperationErrors)
	}
	for _, e := range n.Invalid {
		if e == "" || len(e) > MaxTaskMessageBytes {
			return nil, invalidf("a validation error must hold 1 to %d bytes", MaxTaskMessageBytes)
		}
	}
	for _, a := range n.Approvers {
		if err := checkApprover(a); err != nil {
			return nil, err
		}
	}
	switch {
	case n.MaxParallel < 0 || n.MaxParallel > MaxOperationTargets:
		return nil, invalidf("max-parallel %d: want 0 (all) to %d", n.MaxParallel, MaxOperationTargets)
	case n.Timeout < 0 || n.PauseGrace < 0 || n.ApprovalTTL < 0:
		return nil, invalidf("operation of %s on %s: a negative duration", n.Action, n.Service)
	}
	ttl := n.ApprovalTTL
	if ttl == 0 {
		ttl = DefaultApprovalTTL
	}
	op := &pb.Operation{
		Service: n.Service, Action: n.Action, Units: units, ParamsJson: params, Charm: protoClone(n.Charm),
		Requester: n.Requester, Errors: n.Invalid, Approvers: n.Approvers, CreatedUnixNano: now.UnixNano(),
		ApprovalTtlNs: int64(ttl), Safe: n.Safe, Parallel: n.Parallel, TimeoutNs: int64(n.Timeout),
		MaxParallel: int32(n.MaxParallel), PauseGraceNs: int64(n.PauseGrace),
	}
	switch {
	case len(n.Invalid) > 0:
		op.State = pb.OperationState_OPERATION_STATE_INVALID
		op.FinishedUnixNano = now.UnixNano()
	case n.Safe:
		op.State = pb.OperationState_OPERATION_STATE_RUNNING
		op.ExecutedBy, op.ExecutedUnixNano = n.Requester, now.UnixNano()
	default:
		op.State = pb.OperationState_OPERATION_STATE_AWAITING_APPROVAL
		op.ExpiresUnixNano = now.Add(ttl).UnixNano()
	}
	if size := proto.Size(op) + 64; size > MaxOperationBytes {
		return nil, tooLarge("the operation's record", size, MaxOperationBytes)
	}
	return op, nil
}

// sameCharm says whether the service runs the charm the operation was
// made against.
func sameCharm(a, b *pb.CharmRef) bool {
	return a.GetName() == b.GetName() && a.GetRevision() == b.GetRevision() && a.GetSha256() == b.GetSha256()
}

// charmMoved is the refusal (A1) of an operation whose service moved on
// from its charm.
func charmMoved(what string, op *pb.Operation, svc *pb.Service) error {
	if op.Charm.GetRevision() != svc.Charm.GetRevision() || op.Charm.GetName() != svc.Charm.GetName() {
		return refused("A1", "%s was made against charm revision %d, the service is at %d: run it again",
			what, op.Charm.GetRevision(), svc.Charm.GetRevision())
	}
	return refused("A1", "%s was made against another archive of charm revision %d than the service runs: run it again",
		what, op.Charm.GetRevision())
}

// CreateOperation records an operation and returns it: INVALID when
// n.Invalid lists errors; RUNNING for a safe action, whose tasks it makes
// before it returns; else AWAITING_APPROVAL. The service must exist and
// run n.Charm (A1), every target must exist and have fewer than
// MaxOpenTasksPerUnit open tasks, and the model fewer than
// MaxOpenOperations open operations. An error after the record was
// written (making the tasks) comes with the operation: the leader's
// operations worker finishes making them (MaterializePending).
func (s *State) CreateOperation(ctx context.Context, n NewOperation) (*pb.Operation, error) {
	now := s.now()
	op, err := n.record(now)
	if err != nil {
		return nil, err
	}
	if op.State != pb.OperationState_OPERATION_STATE_INVALID {
		if err := s.checkTargets(ctx, op.Units); err != nil {
			return nil, err
		}
	}
	err = s.apply(ctx, fmt.Sprintf("create operation %s on %s", n.Action, n.Service), func(ctx context.Context) (*change, error) {
		r, err := s.read(ctx, get(ServiceKey(op.Service)), get(seqOperation),
			getCount(opRefOpen))
		if err != nil {
			return nil, err
		}
		svc, err := serviceFrom(r.one(0), op.Service)
		if err != nil {
			return nil, err
		}
		if !sameCharm(op.Charm, svc.v.Charm) {
			return nil, charmMoved(fmt.Sprintf("operation of %s on %s", op.Action, op.Service), op, svc.v)
		}
		last, seqRev, err := seqValue(r.one(1))
		if err != nil {
			return nil, err
		}
		open := operationOpen(op.State)
		if n := r.ranges[2].Count; open && n >= MaxOpenOperations {
			return nil, fullf("the model has %d open operations (awaiting approval, approved or running), the most it may have: wait for some to end", n)
		}
		op.Id = last + 1
		op.Digest = OperationDigest(op)
		c := &change{}
		c.ifMod(svc.key, svc.mod)
		c.ifMod(seqOperation, seqRev)
		c.putRaw(seqOperation, fmt.Sprint(op.Id))
		c.put(OperationKey(op.Id), op)
		if open {
			c.ifNoNewer(opRefOpen, r.rev)
			c.putRaw(opOpenOpRef(op.Id), OperationStateName(op.State))
		}
		return c, nil
	})
	if err != nil {
		return nil, err
	}
	if op.State == pb.OperationState_OPERATION_STATE_RUNNING {
		if err := s.materializeTasks(ctx, op.Id); err != nil {
			return op, fmt.Errorf("operation %d: make its tasks: %w", op.Id, err)
		}
	}
	return op, nil
}

// targetsPerRead is how many targets checkTargets reads in one round trip.
const targetsPerRead = MaxTxnOps / 2

// checkTargets checks that every unit exists and has fewer than
// MaxOpenTasksPerUnit open tasks, as read now: an operation's tasks are
// made later and each holds to the bound then (materializeTasks); this is
// the refusal that names the unit.
func (s *State) checkTargets(ctx context.Context, units []string) error {
	for len(units) > 0 {
		batch := units[:min(len(units), targetsPerRead)]
		units = units[len(batch):]
		gets := make([]getOp, 0, 2*len(batch))
		for _, u := range batch {
			p := UnitTasksPrefix(u)
			gets = append(gets, getExists(UnitKey(u)), getCount(p))
		}
		r, err := s.read(ctx, gets...)
		if err != nil {
			return err
		}
		for i, u := range batch {
			if r.ranges[2*i].Count == 0 {
				return notFoundf("unit %s not found", u)
			}
			if n := r.ranges[2*i+1].Count; n >= MaxOpenTasksPerUnit {
				return fullf("unit %s has %d open tasks, the most a unit may have: wait for some to end, or stop them", u, n)
			}
		}
	}
	return nil
}

// operation reads operation id.
func (s *State) operation(ctx context.Context, id int64) (*record[*pb.Operation], error) {
	r, err := s.read(ctx, get(OperationKey(id)))
	if err != nil {
		return nil, err
	}
	return operationFrom(r.one(0), id)
}

func operationFrom(kv *mvccpb.KeyValue, id int64) (*record[*pb.Operation], error) {
	op, err := decode[pb.Operation](kv)
	if err != nil {
		return nil, err
	}
	if op == nil {
		return nil, notFoundf("operation %d not found", id)
	}
	return op, nil
}

// opName is how a refusal names operation id.
func opName(id int64) string { return fmt.Sprintf("operation %d", id) }

// expired says whether an awaiting or approved operation has lapsed.
func (s *State) expired(op *pb.Operation) bool {
	return op.ExpiresUnixNano != 0 && s.now().UnixNano() >= op.ExpiresUnixNano
}

// expireOps adds to c the expiry of op, read as rec.
func (s *State) expireOps(c *change, rec *record[*pb.Operation]) *pb.Operation {
	next := protoClone(rec.v)
	next.State = pb.OperationState_OPERATION_STATE_EXPIRED
	next.FinishedUnixNano = s.now().UnixNano()
	c.ifMod(rec.key, rec.mod)
	c.put(rec.key, next)
	c.del(opOpenOpRef(next.Id))
	return next
}

// expiredErr is the refusal of a verb on an operation found lapsed (and
// written EXPIRED).
func expiredErr(rule string, op *pb.Operation) error {
	return refused(rule, "%s expired at %s: run it again", opName(op.Id), time.Unix(0, op.ExpiresUnixNano).UTC().Format(time.RFC3339))
}

// whoMay names who may approve op, for a refusal: "alice or an admin".
func whoMay(op *pb.Operation) string {
	var who []string
	admin := len(op.Approvers) == 0
	for _, a := range op.Approvers {
		switch a {
		case ApproverAdmin:
			admin = true
		case ApproverOperator:
			who = append(who, "an operator")
		default:
			who = append(who, a)
		}
	}
	if admin || len(who) == 0 {
		who = append(who, "an admin")
	}
	if len(who) == 1 {
		return who[0]
	}
	return strings.Join(who[:len(who)-1], ", ") + " or " + who[len(who)-1]
}

// mayApprove says whether user u is among op's approvers: listed by name,
// an admin where admins may (always when none are listed), an operator
// or admin where operators may.
func mayApprove(op *pb.Operation, u *pb.User) bool {
	if len(op.Approvers) == 0 {
		return u.Role == pb.UserRole_USER_ROLE_ADMIN
	}
	for _, a := range op.Approvers {
		switch a {
		case ApproverAdmin:
			if u.Role == pb.UserRole_USER_ROLE_ADMIN {
				return true
			}
		case ApproverOperator:
			if u.Role == pb.UserRole_USER_ROLE_OPERATOR || u.Role == pb.UserRole_USER_ROLE_ADMIN {
				return true
			}
		default:
			if a == u.Name {
				return true
			}
		}
	}
	return false
}

// ApproveOperation approves operation id as the named user, who saw
// digest (A2): only while it awaits approval and has not expired (one
// found expired is written EXPIRED and refused), the digest its own,
// the approver not its requester and among its approvers, by the role the
// user's record holds when the approval commits. The approval lasts the
// operation's approval TTL.
func (s *State) ApproveOperation(ctx context.Context, id int64, approver, digest string) (*pb.Operation, error) {
	if err := checkUserName(approver); err != nil {
		return nil, err
	}
	return s.decideAwaiting(ctx, id, approver, "A2", "approve", "approved", func(c *change, op *pb.Operation, u *pb.User) (*pb.Operation, error) {
		switch {
		case digest != op.Digest:
			return nil, refused("A2", "%s's digest is %s, not %s: it is not what you saw; show it again", opName(id), op.Digest, digest)
		case approver == op.Requester:
			return nil, refused("A2", "%s cannot approve %s: %s requested it", approver, opName(id), approver)
		case u == nil || !mayApprove(op, u):
			return nil, refused("A2", "%s cannot approve %s: only %s may", approver, opName(id), whoMay(op))
		}
		next := protoClone(op)
		now := s.now()
		next.State = pb.OperationState_OPERATION_STATE_APPROVED
		next.Approver, next.ApprovedUnixNano = approver, now.UnixNano()
		next.ExpiresUnixNano = now.Add(time.Duration(op.ApprovalTtlNs)).UnixNano()
		c.putRaw(opOpenOpRef(id), OperationStateName(next.State))
		return next, nil
	})
}

// RejectOperation rejects operation id as the named user, an admin or one
// of its approvers, while it awaits approval and has not expired (A4).
func (s *State) RejectOperation(ctx context.Context, id int64, user, reason string) (*pb.Operation, error) {
	if err := checkUserName(user); err != nil {
		return nil, err
	}
	if len(reason) > MaxTaskMessageBytes {
		return nil, tooLarge("the reason", len(reason), MaxTaskMessageBytes)
	}
	return s.decideAwaiting(ctx, id, user, "A4", "reject", "rejected", func(c *change, op *pb.Operation, u *pb.User) (*pb.Operation, error) {
		if u == nil || !(u.Role == pb.UserRole_USER_ROLE_ADMIN || mayApprove(op, u)) {
			return nil, refused("A4", "%s cannot reject %s: only %s may", user, opName(id), whoMay(op))
		}
		next := protoClone(op)
		next.State = pb.OperationState_OPERATION_STATE_REJECTED
		next.RejectedBy, next.Reason = user, reason
		next.FinishedUnixNano, next.ExpiresUnixNano = s.now().UnixNano(), 0
		c.del(opOpenOpRef(id))
		return next, nil
	})
}

// decideAwaiting is an approval's or a rejection's transaction: user's
// decision (verb; past, its past participle) on operation id, which must
// await approval (rule). One found expired is written EXPIRED and the
// decision refused. decide checks the decision against the operation and
// the user's record (nil when there is none) and returns the operation as
// the decision leaves it, adding its other writes to c; both records are
// compared unchanged.
func (s *State) decideAwaiting(ctx context.Context, id int64, user, rule, verb, past string,
	decide func(c *change, op *pb.Operation, u *pb.User) (*pb.Operation, error)) (*pb.Operation, error) {
	var out *pb.Operation
	var lapsed error
	err := s.apply(ctx, fmt.Sprintf("%s operation %d", verb, id), func(ctx context.Context) (*change, error) {
		lapsed = nil
		r, err := s.read(ctx, get(OperationKey(id)), get(UserKey(user)))
		if err != nil {
			return nil, err
		}
		op, err := operationFrom(r.one(0), id)
		if err != nil {
			return nil, err
		}
		u, err := decode[pb.User](r.one(1))
		if err != nil {
			return nil, err
		}
		if op.v.State != pb.OperationState_OPERATION_STATE_AWAITING_APPROVAL {
			return nil, refused(rule, "%s is %s: only an operation awaiting approval can be %s", opName(id), OperationStateName(op.v.State), past)
		}
		c := &change{}
		if s.expired(op.v) {
			out = s.expireOps(c, op)
			lapsed = expiredErr(rule, op.v)
			return c, nil
		}
		var uv *pb.User
		if u != nil {
			uv = u.v
		}
		next, err := decide(c, op.v, uv)
		if err != nil {
			return nil, err
		}
		c.ifMod(op.key, op.mod)
		if u != nil {
			c.ifMod(u.key, u.mod)
		}
		c.put(op.key, next)
		out = next
		return c, nil
	})
	if err != nil {
		return nil, err
	}
	return out, lapsed
}

// ExecuteOperation runs approved operation id as the named user: its
// requester, or an admin (A3), before the approval expires, while the
// service still runs the charm it was made against (A1). The operation
// becomes RUNNING and its tasks are made before it returns (an error
// making them comes with the operation, as CreateOperation's).
func (s *State) ExecuteOperation(ctx context.Context, id int64, user string, isAdmin bool) (*pb.Operation, error) {
	if err := checkUserName(user); err != nil {
		return nil, err
	}
	first, err := s.operation(ctx, id)
	if err != nil {
		return nil, err
	}
	if first.v.State == pb.OperationState_OPERATION_STATE_APPROVED {
		if err := s.checkTargets(ctx, first.v.Units); err != nil {
			return nil, err
		}
	}
	var out *pb.Operation
	var lapsed error
	err = s.apply(ctx, fmt.Sprintf("execute operation %d", id), func(ctx context.Context) (*change, error) {
		lapsed = nil
		r, err := s.read(ctx, get(OperationKey(id)), get(ServiceKey(first.v.Service)))
		if err != nil {
			return nil, err
		}
		op, err := operationFrom(r.one(0), id)
		if err != nil {
			return nil, err
		}
		switch op.v.State {
		case pb.OperationState_OPERATION_STATE_APPROVED:
		case pb.OperationState_OPERATION_STATE_AWAITING_APPROVAL:
			return nil, refused("A3", "%s is awaiting approval: only %s or an admin may execute it once approved", opName(id), op.v.Requester)
		default:
			return nil, refused("A3", "%s is %s: only an approved operation can be executed", opName(id), OperationStateName(op.v.State))
		}
		if user != op.v.Requester && !isAdmin {
			return nil, refused("A3", "%s cannot execute %s: only %s or an admin may", user, opName(id), op.v.Requester)
		}
		c := &change{}
		if s.expired(op.v) {
			out = s.expireOps(c, op)
			lapsed = expiredErr("A3", op.v)
			return c, nil
		}
		svc, err := serviceFrom(r.one(1), op.v.Service)
		if errors.Is(err, ErrNotFound) {
			return nil, refused("A1", "%s: service %s is gone", opName(id), op.v.Service)
		}
		if err != nil {
			return nil, err
		}
		if !sameCharm(op.v.Charm, svc.v.Charm) {
			return nil, charmMoved(opName(id), op.v, svc.v)
		}
		next := protoClone(op.v)
		now := s.now()
		next.State = pb.OperationState_OPERATION_STATE_RUNNING
		next.ExecutedBy, next.ExecutedUnixNano, next.ExpiresUnixNano = user, now.UnixNano(), 0
		c.ifMod(op.key, op.mod)
		c.ifMod(svc.key, svc.mod)
		c.put(op.key, next)
		c.putRaw(opOpenOpRef(id), OperationStateName(next.State))
		out = next
		return c, nil
	})
	if err != nil {
		return nil, err
	}
	if lapsed != nil {
		return out, lapsed
	}
	if err := s.materializeTasks(ctx, id); err != nil {
		return out, fmt.Errorf("operation %d: make its tasks: %w", id, err)
	}
	return out, nil
}
