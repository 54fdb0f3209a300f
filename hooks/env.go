package hooks

import "strings"

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
	// EnvRemoteService is the service on the other side of the relation
	// (the unit's own in a peer relation), "pg", when the hook knows it:
	// in a relation-changed for the service's settings (relation-set
	// --app) it is set and EnvRemoteUnit is not. relation-get --app reads
	// its settings by default.
	EnvRemoteService = "LIFELINE_REMOTE_SERVICE"
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

// Juju's names of the hook environment, for charms written for Juju
// (JujuEnv sets them beside the LIFELINE_* variables).
const (
	EnvJujuUnitName      = "JUJU_UNIT_NAME"
	EnvJujuRemoteUnit    = "JUJU_REMOTE_UNIT"
	EnvJujuRemoteApp     = "JUJU_REMOTE_APP"
	EnvJujuRelation      = "JUJU_RELATION"
	EnvJujuRelationID    = "JUJU_RELATION_ID"
	EnvJujuDepartingUnit = "JUJU_DEPARTING_UNIT"
	EnvJujuCharmDir      = "JUJU_CHARM_DIR"
	EnvCharmDirJuju      = "CHARM_DIR"
	EnvJujuHookName      = "JUJU_HOOK_NAME"
	EnvJujuModelName     = "JUJU_MODEL_NAME"
	EnvJujuMachineID     = "JUJU_MACHINE_ID"
	EnvJujuPrincipalUnit = "JUJU_PRINCIPAL_UNIT"
	EnvJujuSocketAddress = "JUJU_AGENT_SOCKET_ADDRESS"
	EnvJujuSocketNetwork = "JUJU_AGENT_SOCKET_NETWORK"
	EnvJujuVersion       = "JUJU_VERSION"
)

// JujuModelName is JUJU_MODEL_NAME: a Lifeline controller holds one model,
// which has no name of its own.
const JujuModelName = "lifeline"

// JujuVersion is JUJU_VERSION. Charms compare it to decide which tools and
// flags they may use: 2.9 has every one Lifeline provides (application
// settings in relations since 2.7, status-set --application and
// network-get's Juju 2 output, the leadership tools) and none of Juju 3's
// that Lifeline lacks (secrets, from 3.0.2; open-port --endpoints), so a
// charm checking for 3.x takes its 2.9 path, which works here.
const JujuVersion = "2.9.0"

// JujuEnv adds Juju's variables to env, a hook's or action's environment
// holding the LIFELINE_* ones: each is derived from its Lifeline twin
// (JUJU_UNIT_NAME from LIFELINE_UNIT_NAME, CHARM_DIR and JUJU_CHARM_DIR
// from LIFELINE_CHARM_DIR, ...). principal is the principal unit of a
// subordinate ("" for a principal). JUJU_AGENT_SOCKET_ADDRESS names the
// unit agent's hook tool socket (LIFELINE_AGENT_SOCKET), which speaks
// Lifeline's protocol (see the package doc), not Juju's: Juju's tools
// and its JUJU_CONTEXT_ID are not there, the hook tools on PATH are.
func JujuEnv(env map[string]string, principal string) {
	twin := map[string]string{
		EnvJujuUnitName:      EnvUnitName,
		EnvJujuRemoteUnit:    EnvRemoteUnit,
		EnvJujuRemoteApp:     EnvRemoteService,
		EnvJujuRelation:      EnvRelation,
		EnvJujuRelationID:    EnvRelationID,
		EnvJujuDepartingUnit: EnvDepartingUnit,
		EnvJujuCharmDir:      EnvCharmDir,
		EnvCharmDirJuju:      EnvCharmDir,
		EnvJujuHookName:      EnvHookName,
		EnvJujuMachineID:     EnvMachineID,
		EnvJujuSocketAddress: EnvAgentSocket,
	}
	for juju, ll := range twin {
		if v, ok := env[ll]; ok && v != "" {
			env[juju] = v
		}
	}
	if remote := env[EnvRemoteUnit]; remote != "" && env[EnvJujuRemoteApp] == "" {
		service, _, _ := strings.Cut(remote, "/")
		env[EnvJujuRemoteApp] = service
	}
	if env[EnvAgentSocket] != "" {
		env[EnvJujuSocketNetwork] = "unix"
	}
	if principal != "" {
		env[EnvJujuPrincipalUnit] = principal
	}
	env[EnvJujuModelName] = JujuModelName
	env[EnvJujuVersion] = JujuVersion
}
