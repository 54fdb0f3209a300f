package hooks

// The environment of a hook (docs/DESIGN.md, The unit agent). The unit agent sets these in
// Spec.Env; Run adds PATH, HOME and LANG and passes nothing else.
const (
	// EnvUnitName is the unit's name, "kv/0".
	EnvUnitName = "LIFELINE_UNIT_NAME"
	// EnvService is the unit's service, "kv".
	EnvService = "LIFELINE_SERVICE"
	// EnvMachineID is the id of the unit's machine, "3".
	EnvMachineID = "LIFELINE_MACHINE_ID"
	// EnvHookName is the hook's name, "db-relation-changed".
	EnvHookName = "LIFELINE_HOOK_NAME"
	// EnvCharmDir is the charm directory, the hook's working directory.
	EnvCharmDir = "LIFELINE_CHARM_DIR"
	// EnvContextFile is the path of the file holding the hook's context id
	// (Server.Begin), which the hook tools read and present; the file is
	// removed, and the id no longer valid, at Server.End. The id itself is
	// kept out of the environment, which other processes of the user may
	// read (/proc/<pid>/environ), which every process the hook starts
	// inherits for good, and which a hook printing its environment puts in
	// its output.
	EnvContextFile = "LIFELINE_CONTEXT_FILE"
	// EnvAgentSocket is the path of the unit agent's hook tool socket
	// (Server.Socket).
	EnvAgentSocket = "LIFELINE_AGENT_SOCKET"
	// EnvSession marks every process of one unit on its host: the unit
	// agent gives each hook the same value (its data directory), and
	// whatever a hook starts inherits it, a daemon under nohup or setsid
	// included. StopSession ends a unit's processes by it.
	EnvSession = "LIFELINE_UNIT_SESSION"
	// EnvPrincipalSession, in a subordinate's hooks, is its principal's
	// EnvSession: a principal's session holds its subordinates', and
	// StopSession of the principal's ends theirs too.
	EnvPrincipalSession = "LIFELINE_PRINCIPAL_SESSION"

	// In relation hooks only:

	// EnvRelation is the name of the unit's endpoint of the relation, "db".
	EnvRelation = "LIFELINE_RELATION"
	// EnvRelationID is the relation's id as the tools take it,
	// "<endpoint>:<id>", "db:3". The tools' -r defaults to it.
	EnvRelationID = "LIFELINE_RELATION_ID"
	// EnvRemoteUnit is the remote unit the hook is about (joined, changed,
	// departed), "pg/1"; empty in relation-created and relation-broken.
	// relation-get's UNIT defaults to it.
	EnvRemoteUnit = "LIFELINE_REMOTE_UNIT"
	// EnvDepartingUnit is the unit leaving the relation, in
	// relation-departed.
	EnvDepartingUnit = "LIFELINE_DEPARTING_UNIT"

	// In actions only (the hook's variables above are set too, but
	// EnvHookName):

	// EnvOperationID is the id of the operation the action's task is of,
	// "7".
	EnvOperationID = "LIFELINE_OPERATION_ID"
	// EnvActionName is the action's name, "backup".
	EnvActionName = "LIFELINE_ACTION_NAME"
	// EnvActionResumed is "1" when the task was paused (or lost) and
	// resumed: checkpoint-get has what the runs before stored.
	EnvActionResumed = "LIFELINE_ACTION_RESUMED"
	// EnvJujuActionName and EnvJujuActionUUID are Juju's names of the
	// action and of its task ("<operation>-<unit>", "7-kv-0"), for charms
	// written for Juju.
	EnvJujuActionName = "JUJU_ACTION_NAME"
	EnvJujuActionUUID = "JUJU_ACTION_UUID"
)

// The variables Run sets itself; Spec.Env must not hold PATH or HOME.
const (
	envPath = "PATH"
	envHome = "HOME"
	envLang = "LANG"
	// defaultLang is LANG unless Spec.Env sets it.
	defaultLang = "C.UTF-8"
)
