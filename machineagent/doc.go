// Package machineagent runs on every host: it keeps its machine present at
// the controller, runs a unit agent worker (package unitagent; workers.go) for every
// unit assigned to its machine and for their subordinates, each with its own
// credential and data directory, removes its dead principal units (U5;
// beside its other work, those that die together in one call, their files
// a few at once), ends the units forced out (forced.go: their agents, the
// processes of their sessions, their files; also those that went while it
// was away, by the directories they left), and sets its dying machine dead
// once no unit is left (M3), then stops.
//
// One agent instance runs a machine at a time (instance.go): its presence
// names its instance, and another is refused while it is present; the
// agent runs nothing until it is present, and stops (ErrFenced) once
// refused. A manual machine's host joins with a join token (Join).
//
// Its data directory holds agent.lock (one process a directory) and
// instance (the id of the run in progress, which the next run names to
// take its machine back at once); units/<unit>, each unit agent's own, made when
// that agent first writes there (a unit assigned while the agent watched
// starts as new: unitagent.Config.New);
// charms/, the charms its units deploy, downloaded and unpacked once
// (charm.Cache): a unit's charm directory is made of hard links to those
// files (a unit of a charm without hooks has none); tools/, the hook
// tools; daemons.json and packages.json, the records of the machine's
// daemons and package claims (host.go); claims.json, the record of its
// units' claims for the check of conflicts (conflicts.go); and agent.sock, the socket on which its unit agents serve their
// hooks' tools (hooks.Server), one for all.
//
// Its unit agents' reports of their own agent status go to the controller
// through it, several to a call, as do its removals of its dead units
// (batch.go). Its unit agents make their other calls themselves, each with
// its own credential, which it has issued again when the controller
// refuses it (unitcred.go): a unit that cannot have a new one shows
// unauthenticated.
//
// It owns the host's side of its units' claims (host.go): one
// hostexec.Supervisor for the machine's daemons, which outlive the agent
// and are adopted again as it starts, and one hostexec.Packages over the
// package manager of its --package-manager flag (none by default),
// lent to its unit agents as one hostexec.Host. A unit removed or forced
// out has its daemons stopped, its files removed and its packages
// released before its directory goes. Before a unit's job takes new
// claims, its agent asks the machine's gate (conflicts.go,
// unitagent.ClaimsGate), which weighs the units asking together in one
// pass against the machine's other units (hostclaims.Resolve): the changed
// unit with the most conflicts is rolled back; of unchanged units in
// conflict, the one whose agent it first started later is held (logged).
// The gate's record, claims.json in the data directory, keeps each unit's
// order and the claims it holds or was approved; it is written when a
// unit's claims change, so that units claiming nothing cost no write.
//
// Run owns every goroutine the agent keeps: its presence, its heartbeat,
// the daemon supervisor, the ender of forced units, the two batchers'
// senders and the shared watch stream (agentwatch.Mux.Run) run in its
// wait group and end with it, before its unit agents are stopped.
//
// It reaches the controller only through the AgentService methods it
// declares, and never talks to etcd. It does not start instances: that is
// the provisioner's job, in the controller.
package machineagent
