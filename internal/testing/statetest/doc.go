// Package statetest checks a live model for tests: a Monitor watches a
// namespace and checks the invariants (state.CheckInvariants) at every
// committed revision, and life monotonicity (state.LifeChecker) over the
// stream. Only tests import it.
package statetest
