// Package unitagent runs one unit: the persisted state machine of
// docs/DESIGN.md, The unit agent (new, ready, running and the error states), the hooks in the order
// charm authors rely on, the unit's relations (entering and leaving their
// scopes, joined/changed/departed/broken), its subordinates, and its way
// from dying to dead. The unit runs its own revision of its service's
// spec (charm and configuration), and moves to the one its unit's record
// targets, which the controller sets when the rollout grants it a permit
// (spec.go).
//
// It owns the unit's local state, which is authoritative: it is saved
// between steps (a snapshot and a journal of what changed since, in the
// unit's data directory: statestore.go), and an agent restarted after a
// crash resumes from it (a hook interrupted by the crash counts as a
// failed attempt, never as a success). Every step goes prepare, execute,
// commit, and how far each phase is recorded (synced, written, left in
// memory for the next record as a step it can do again at no cost, such
// as entering a scope, is; or nothing) is looked up by the step's kind in
// one table (steps.go). The local state
// keeps, with each member of a relation, the settings its last
// relation-changed delivered, and the unit's own settings there, so that
// the hooks read a unit that has left the relation's scope (whose
// settings the controller deleted then) as last seen (kept.go, hookctx.go).
// Its directory is made when it first writes there. Unless it is known to
// be new to its machine (Config.New), it may have run before and lost what
// it did not save, and it first asks the controller which scopes its unit
// is in (scopes.go). It follows its watch subjects in one goroutine
// (agentwatch.Group). It reaches the controller only through the few
// AgentService methods it declares (API), and runs hooks only through
// package hooks.
// It carries out its charm's host claims (claims.go): the claims rendered
// with its spec's configuration, each change of them a job of tasks its
// machine's hostexec.Host runs (Config.Host), the tasks identical to what
// the host holds pruned; each job is a step of the state machine run as
// a hook is (retried, then the unit in error until ctl resolved), in a
// fixed order against the hooks (packages and files before install,
// upgrade-charm and config-changed; daemons after config-changed, before
// start; on the way out, after stop and before remove, all undone). The
// claims in place are kept in the local state, so that after a crash the
// next job is right, and a job cut short resumes from its journal. A job
// that would take claims other than those in place asks its machine's
// ClaimsGate first (Config.Gate); refused, for a conflict with another
// unit of the machine, the unit keeps its revision, runs no task, does
// not report the new revision, and shows error with the conflict until
// its target moves on or ctl resolved asks again.
// It does not start unit agents of its own but asks its Deployer to run
// its subordinates' (and tells it which subordinates it has), and it never
// talks to etcd. Its hooks carry the unit's session mark (its data
// directory), by which its machine agent ends what they started when the
// unit is forced out: Run says so with ErrForcedOut, where a unit taken to
// dead by its agent ends it with ErrDead.
package unitagent
