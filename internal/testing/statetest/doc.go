// Package statetest checks a live model for tests: a Monitor watches a
// namespace and checks the invariants (state.CheckInvariants) at every
// committed revision, and life monotonicity (state.LifeChecker) over the
// stream; HeldChanges holds a watch hub's changes back, for what follows
// the hub to fall behind. Only tests import it.
package statetest
