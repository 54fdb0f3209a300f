// Package state owns Lifeline's model in etcd: the keyspace, the values
// stored under it, and the life rules of machines, services, units and
// relations (docs/DESIGN.md, Life and Storage).
//
// Every rule is checked inside the etcd transaction that makes the change:
// an operation reads what the rule depends on, decides, and commits a
// transaction whose comparisons assert exactly what it read and relied on
// (a key's mod revision, a prefix being empty, a witness key still
// existing). When a comparison fails it reads again and decides again, a
// bounded number of times. A witness is chosen, where there is a choice,
// among keys none of the State's own transactions in flight is deleting
// (deleting.go). No transaction grows with the size of the model:
// work on many entities goes through cleanup items, which the Cleaner works
// off in small batches.
//
// A State has at most Config.MaxWritesInFlight writes in etcd at once; an
// operation takes its slot before its first read and holds it for all its
// attempts; an operation whose context has priority (WithPriority: a
// cascade's batches, an operator's command) takes one of a few slots of
// its own first, rather than queue behind the others. A write etcd
// refuses as too many (it is behind applying) is sent again after a pause
// (backpressure.go). Given Config.AtLeast (a controller passes its watch
// hub's revision), a read at an earlier revision is made again: etcd sends
// a change to its watchers a moment before reads can see it, and an agent
// acting on a change it was sent must find it.
//
// All of that is package state/internal/etcdkv, the etcd seam: the only
// code of state that knows etcd's wire types and the fast way to the
// member. The rules here speak its small API: a read is a list of gets
// (reads.go), a change a list of comparisons and writes (writes.go), and a
// record read is an mvccpb.KeyValue. etcdkv builds the requests in the
// State's namespace and sends them to the member's own handler when the
// client offers it (embedetcd's in-process client), else over clientv3's
// connection; the package's tests run on both (-etcdtest.backend).
//
// Every record it writes has a size limit of its own (limits.go), checked
// before etcd and refused as ErrInvalid naming it. A caller that budgets
// writes passes a context made with Metered, which counts the bytes each
// committed write puts. The charm store has a limit (Config.CharmStoreLimit,
// ErrFull past it); an upload that fails removes the chunks it wrote, and
// the CharmCollector removes the revisions no service uses and the
// archives no revision names.
//
// It keeps the operations too (operations.go, tasks.go): charms' actions
// run on units, their approvals and one task a unit, whose moves are
// checked in the same way.
//
// The package also keeps the invariant checkers (CheckInvariants over a
// snapshot, LifeChecker over a watch stream) that tests use to show the rules
// hold.
//
// Reading the model: one method for each question.
//
//   - One entity: Machine, Service, Unit, Relation (RelationByKey by its
//     endpoints), Charm, Operation, Task, User, Rollout.
//   - Entities of a kind: Machines, Services, Units, Relations; by a
//     relation to another: MachinePrincipals (a machine's principals),
//     MachineUnitNames (with their subordinates), ServiceRelations,
//     RelationsBetween, ScopeMembers, UnitScopes, Subordinates.
//   - The whole model at one revision, as ctl status shows it: Model,
//     decoded by a ModelBuilder, which a controller keeping the model in
//     memory feeds the changes of ModelPrefixes too; a part of it,
//     each selected name with what it needs: SelectModel; counts by
//     life only: Census; statuses and presence only: StatusCensus.
//   - Every key, raw, for the invariant checkers: Snapshot (backups copy
//     etcd's database file: internal/embedetcd).
//   - Raw keys for the watch hub and agents' watches: List, ListKey and
//     ListMany (a Reset batch's listing), then Watch, WatchKey (one key
//     exactly) and WatchChanges (resuming after a revision received).
//
// Nothing else in Lifeline writes to etcd. This package does not know about
// gRPC, credentials, charms on disk or agents; callers authorize before they
// call.
package state
