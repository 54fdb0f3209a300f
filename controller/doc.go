// Package controller owns Lifeline's gRPC API: the OperatorService that ctl
// calls, the AgentService that machine and unit agents call, the
// ControllerJoinService that a controller being added calls with its join
// token to receive the key-encryption key of the model's CA key, the
// MachineJoinService a manual machine's host calls to join, and the
// RegistrationService through which a new user binds its credential; the
// authentication of every call by its credential (a join's by its token, a
// registration's by its one-time secret) and its authorization by what the
// caller is (a user's role: roles.go), the audit of users' calls
// (audit.go), the mapping of state's errors to status codes, the status
// ctl shows, the API's metrics, and the limits on what clients can make it
// hold: connections (connlimit.go) and what the watch hub holds for the
// agents' watch streams (watchlimit.go); and what one caller may write:
// each agent credential's budgets of writes a second and bytes a minute
// (budget.go), and, while etcd's database is near its quota, only the
// writes that shrink the model (storage.go). It owns the operations'
// calls (operations.go) and the leader's upkeep of operations
// (OperationsWorker, opworker.go).
//
// It changes the model only through package state, never by writing to etcd
// itself, and it starts no listeners and no workers of its own: the
// composition root (cmd/lifelined) serves it, runs Server.Run beside it,
// and runs the cleaner and the operations worker under the elected leader. The goroutines it keeps between calls (workers.go)
// only run calls' handlers, and end when idle or when Run ends. Run keeps its copies of the
// credentials (credmirror.go) and of the presence keys' changes
// (presence.go), each following one stream of the watch hub until Run's
// context ends or the hub stops, and, while whole-model statuses are
// asked for, the decoded model they are built from (package modelcache);
// without them (before their first listing, or with Run not running)
// calls read etcd instead.
package controller
