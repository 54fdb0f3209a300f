// Package leader runs work in one process at a time among several that
// share an etcd cluster: the controllers of one model elect, through etcd's
// election recipe (client/v3/concurrency), the one that runs the singleton
// workers (the provisioner and the cleaner).
//
// A candidate holds a session (a lease it keeps alive). It campaigns; once
// elected it runs the work until its context ends or the session is lost
// (the process could not reach etcd for the lease's TTL, and another
// candidate may already lead), then resigns and, unless its context ended,
// campaigns again. A leader that dies leaves the election when its lease
// expires, so another takes over within the TTL; started again under the
// same ID (a controller restarted), it first ends the candidacy its dead
// run left, and campaigns at once.
//
// Election does not fence: for a moment after a session is lost, the old
// leader's work may still run beside the new leader's. The workers Lifeline
// elects are safe run twice (every step they take is a checked transaction);
// election saves the duplicated effort, it does not provide safety.
package leader
