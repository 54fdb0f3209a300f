// Package hooks owns a charm's hooks as processes and the hook tools they
// call (docs/DESIGN.md, The unit agent): running one hook executable, and the unit agent's
// end of the tools (relation-get, relation-set, ...) over a unix socket,
// with the tools' client side, which lifelined runs when invoked through a
// tool's symlink.
//
// It must not touch gRPC, etcd or the controller, and knows nothing of the
// unit agent's state machine: which hook runs when, retries, error states
// and committing relation settings belong to unitagent, which implements
// Context and decides what a hook's Result means.
//
// # Running a hook
//
// Run executes the hook file directly (no shell) in its own process group,
// in the charm directory, with stdin /dev/null and an environment of
// exactly Spec.Env (the LIFELINE_* variables, the Env* constants) plus
// PATH (the tools directory first, then the agent's PATH), HOME (the charm
// directory) and LANG=C.UTF-8. Each output line goes to the logger with
// the unit and hook; the Result keeps the last lines, the exit code, and
// whether the hook was killed. At the timeout (5 minutes by default) or
// when ctx ends, the whole process group gets SIGTERM, then SIGKILL after a
// grace period. A missing hook file is skipped (Result.Skipped); a file
// that is not executable is an error naming it.
//
// # A unit's session
//
// The unit agent marks every hook with its unit's session (EnvSession, the
// unit's data directory; a subordinate's also with its principal's,
// EnvPrincipalSession), which whatever the hook starts inherits.
// StopSession ends a unit's session on the host: the processes so marked,
// and those in a process group or POSIX session they made (a hook's group,
// a session whose leader is marked), never the caller's own; SIGTERM, then
// SIGKILL after a grace period. They are found by reading /proc.
//
// # The tools and their socket
//
// A unit agent runs one Server (NewServer, Serve, Close) on a socket in
// the unit's data directory, created with mode 0600; the unit agents of a
// machine agent share the machine's, in its data directory. For each hook
// run the unit agent calls Begin with the hook's Context and puts the
// returned Hook.Env in the hook's environment: LIFELINE_AGENT_SOCKET, the
// socket, and LIFELINE_CONTEXT_FILE, a file (mode 0600, under a random name
// in hook-contexts/ beside the socket, mode 0700) holding the hook's
// context id, which the tools read and present. It calls End when the hook
// has exited, which removes the file. A tool call presenting any other id,
// or whose context file is gone, is refused: "context expired: this hook
// tool was called outside the hook that received it". After End returns no
// Context method runs any more, so the agent may then commit the buffered
// relation settings.
//
// The id is kept out of the hook's environment, which every process of the
// machine's user may read (/proc/<pid>/environ), which every process the
// hook starts (daemons included) inherits for good, and which a hook that
// prints its environment puts in its output and so in the unit's status
// history. A file, not an inherited descriptor: the tools run from the
// hook's children too, and many programs close the descriptors they do not
// know before starting a child (Python's subprocess does by default), while
// none drops the environment variable naming the file. This does not
// isolate the units of a machine from one another: hooks run as one user,
// who can read the file (and every unit's files) as well; a machine is one
// trust domain (docs/OPERATIONS.md).
//
// InstallTools links each tool name (ToolNames) to the lifelined binary;
// lifelined, seeing a tool name in argv[0] (IsTool), runs RunTool.
//
// # Protocol
//
// One connection per tool call. The tool sends one JSON object on one
// line, at most MaxRequestBytes:
//
//	{"version":1,"context_id":"...","tool":"relation-get","args":["-r","db:3","host"],
//	 "env":{"LIFELINE_RELATION_ID":"db:2","LIFELINE_REMOTE_UNIT":"pg/0"}}
//
// env carries those two variables when set, and nothing else of the
// tool's environment; input carries what relation-set --file read (the
// tool reads the file, or its stdin for "-", and sends "--file=-"). The
// server answers with one line and closes:
//
//	{"stdout":"10.0.0.5\n","stderr":"","code":0}
//
// The tool prints stdout and stderr and exits with code. Arguments are
// parsed by the server, so the tool binary stays a pipe. Codes: 0 success,
// 1 failure (an error of the Context, an expired context, an unreachable
// agent), 2 a usage error (an unknown flag, a bad argument). Every error is
// one line on stderr, "<tool>: <error>".
//
// # The tools
//
// Flags may come before or after arguments; "--" ends them. -r takes a
// relation id "db:3" (or its number, "3"), defaulting to the hook's
// LIFELINE_RELATION_ID; --format is text (the default) or json; --help
// prints a tool's usage.
//
//	relation-get [-r ID] [--format=text|json] [KEY|-] [UNIT]
//	relation-set [-r ID] KEY=VALUE...             (empty VALUE unsets; buffered)
//	relation-list [-r ID] [--format=text|json]
//	relation-ids [--format=text|json] [ENDPOINT]  (default: the hook's endpoint, else all)
//	config-get [--format=text|json] [KEY]         (text via charm.FormatValue; typed json)
//	unit-get [--format=text|json] private-address|public-address
//	status-set maintenance|blocked|waiting|active [MESSAGE...]
//	status-get [--format=text|json]               (text: the status; json: status and message)
//	log [-l LEVEL] MESSAGE...
//
// For charms written for Juju (juju.go), the tools take Juju's forms too:
// --format=smart|yaml|json (Juju's smart: strings as they are, booleans
// True/False, the rest YAML), config-get -a/--all, relation-set --file,
// status-set/status-get --application, status-get --include-data,
// relation-get/relation-set --app (refused until a Context implements
// AppSettingsContext), and Juju's own tools:
//
//	juju-log [-l LEVEL|--log-level LEVEL] [--debug] MESSAGE...
//	application-version-set VERSION
//	network-get BINDING [--ingress-address] [--bind-address] [--egress-subnets] [-r ID]
//
// What acts for the service needs ApplicationContext; a Context that
// implements LeaderContext refuses it to units that do not lead their
// service (requireLeader). JujuEnv adds Juju's variables to a hook's
// environment. A hook file that cannot start is a StartError.
//
// In a hook (PortContext) the port tools work too: the unit's port claims
// made at run time, kept only if the hook succeeds; they fail in an
// action.
//
//	open-port PORT[/PROTOCOL] | FROM-TO[/PROTOCOL]  (tcp by default; udp; icmp refused)
//	close-port PORT[/PROTOCOL] | FROM-TO[/PROTOCOL] (as it was opened)
//	opened-ports [--format=text|json]               (sorted by protocol and port)
//
// In a run of a charm's action (ActionContext) the tools above work, and
// so do the action tools, which fail in a hook ("not running an action"):
//
//	action-get [--format=text|json] [KEY]         (KEY dotted; text: strings as they are, the rest YAML)
//	action-set KEY=VALUE...                       (results; dotted keys nest; stdout, stderr... reserved)
//	action-fail [MESSAGE...]                      (the action goes on, and fails)
//	action-log MESSAGE...
//	checkpoint-get [--format=text|json] [KEY]
//	checkpoint-set KEY=VALUE...                   (stored in the controller before it returns)
//
// Keys of action-set and checkpoint-set are ValidActionKey's.
//
// relation-get's UNIT defaults to LIFELINE_REMOTE_UNIT when the relation
// is the hook's own. relation-set refuses, exiting 1, changes whose values
// for one relation would pass MaxSettingsBytes, the controller's limit of
// a unit's settings in a relation. A key that is not set prints nothing in text and null
// in json, and succeeds. Lists are sorted: units by service and number,
// relation ids by number.
package hooks
