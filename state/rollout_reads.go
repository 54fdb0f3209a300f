package state

// The prefixes the leader's rollout worker follows (controller/rollout.go)
// to keep its picture of the rolling services: every rollout, policy,
// unit's revisions and permit of the model. A unit's statuses are under
// StatusKey(StatusUnitAgent, "") and StatusKey(StatusUnit, ""), its
// record under UnitKey(""), its machine's agent's presence under
// PresencePrefix.
const (
	RolloutsRoot        = rolloutsPrefix
	RolloutPoliciesRoot = rolloutPoliciesPrefix
	UnitRevisionsRoot   = unitRevisionsPrefix
	PermitsRoot         = permitsPrefix
)
