package unitagent

import (
	"encoding/json"
	"time"
)

// The unit agent's states (docs/DESIGN.md, The unit agent).
const (
	StateNew          = "new"
	StateReady        = "ready"
	StateRunning      = "running"
	StateInstallError = "install-error"
	StateStartError   = "start-error"
	StateStopError    = "stop-error"
	StateHookError    = "hook-error"
)

// Steps of a hook operation. A new hook is saved first as running, just
// before it runs; it is saved queued after a failed run (to wait for its
// retry, or for the operator), and done when it succeeded with relation
// settings still to commit.
const (
	stepQueued  = "queued"
	stepRunning = "running"
	stepDone    = "done" // the hook succeeded; its relation settings are still to be committed
)

// localState is the unit's authoritative record, kept in its data directory
// by a stateStore: the relations' members apart from the rest (the head),
// so that saving one hook's progress costs the same whatever the number of
// members.
type localState struct {
	// State is the state machine's state.
	State string `json:"state"`
	// Resume is the state a hook-error returns to once resolved.
	Resume string `json:"resume,omitempty"`
	// Op is the hook in progress, or nil.
	Op *hookOp `json:"op,omitempty"`
	// Charm is the "<name>/<revision>" installed in the charm directory.
	Charm string `json:"charm,omitempty"`
	// Spec is the revision of the service's spec the unit runs, or is
	// moving to, and that spec: its configuration is what the unit's
	// hooks and actions see (config-get). nil until first read from the
	// controller (a new unit; an agent that ran before revisions).
	Spec *localSpec `json:"spec,omitempty"`
	// Revision is the revision the unit runs, as far as the agent has
	// applied it: Spec's once its charm is installed and config-changed
	// has run for its configuration; 0 before the first.
	Revision int64 `json:"revision,omitempty"`
	// ConfigRan is the digest (configDigest) of the configuration
	// config-changed last ran with: "" before the first, and after a new
	// charm is unpacked, so that config-changed runs again.
	ConfigRan string `json:"config_ran,omitempty"`
	// Upgrade says the charm directory holds a charm unpacked for a move
	// whose upgrade-charm hook has not run yet.
	Upgrade bool `json:"upgrade,omitempty"`
	// Started is set by start and cleared by stop.
	Started bool `json:"started,omitempty"`
	// Stopped and Removed record that stop and remove ran for a dying unit.
	Stopped bool `json:"stopped,omitempty"`
	Removed bool `json:"removed,omitempty"`
	// Relations are the relations the unit takes part in, by id.
	Relations map[int64]*localRelation `json:"relations,omitempty"`
	// HostClaims says the charm in the charm directory (Charm) claims
	// packages, files or daemons on its host (claims.go).
	HostClaims bool `json:"host_claims,omitempty"`
	// Host is what the host holds of the unit's claims (claims.go); nil
	// before the first host job.
	Host *hostState `json:"host,omitempty"`
	// OpenedPorts are the ports the unit's hooks opened (open-port), as
	// "8080/tcp" or "9000-9010/udp" (ports.go).
	OpenedPorts []string `json:"opened_ports,omitempty"`
	// Subordinates of this principal that it added, by relation id.
	AddedSubordinates map[int64]string `json:"added_subordinates,omitempty"`
	// SubordinatesRefused are the subordinates the controller refused to
	// place beside the unit (their host claims conflict with a unit's of
	// the machine: rule P1), by relation id: when to ask again. Meanwhile
	// the unit's other hooks run.
	SubordinatesRefused map[int64]time.Time `json:"subordinates_refused,omitempty"`
	// Leader says leader-elected ran and no leader-settings-changed since:
	// the unit's hooks were last told it leads. LeaderSeen says one of
	// the two ran, and LeaderSettings is the leader settings' version
	// leader-settings-changed last ran for (leadership.go).
	Leader         bool  `json:"leader,omitempty"`
	LeaderSeen     bool  `json:"leader_seen,omitempty"`
	LeaderSettings int64 `json:"leader_settings,omitempty"`

	// changes are the changes of relations' members since the last save,
	// in order: what the next journal record carries besides the head.
	changes []memberChange
}

// localRelation is what the unit has done in one relation.
type localRelation struct {
	Endpoint string `json:"endpoint"`
	// Created records that relation-created ran.
	Created bool `json:"created,omitempty"`
	// InScope records that the unit entered the relation's scope.
	InScope bool `json:"in_scope,omitempty"`
	// Entering records that the unit asked to enter the scope and has not
	// recorded the answer: it may be in the scope. Neither is saved on its
	// own: a crash may lose both, and the agent then asks the controller
	// (checkScopes).
	Entering bool `json:"entering,omitempty"`
	// Members are the remote units joined, with the settings version
	// relation-changed last ran for; 0 when joined ran but changed has not.
	// They are saved apart from the rest of the state (stateStore), and
	// changed only through localState's methods, which record each change
	// for the next save.
	Members map[string]int64 `json:"-"`
	// byName holds Members' units in name order, as firstMember last
	// sorted them, so that departing them one after another does not sort
	// them again for each: units departed since are passed over, and a
	// unit added clears it. Not saved.
	byName []string
	// joined holds the members joined whose relation-changed has not run
	// (version 0 in Members), kept as Members changes once asked for
	// (joinedUnchanged): the resolver looks at them before every
	// decision, and there are few, where Members may hold thousands. Not
	// saved.
	joined map[string]struct{}
	// Left records that the unit left a dying relation's scope; broken
	// runs next, then the record goes.
	Left bool `json:"left,omitempty"`
	// App is the version of the remote service's settings in the
	// relation (relation-set --app) that relation-changed last ran for;
	// 0 before any.
	App int64 `json:"app,omitempty"`
	// kept holds, by member, the member's settings as of the version
	// relation-changed last ran for (none before its first), which the
	// hooks read once the member has left the scope (kept.go). Saved, like
	// Members, apart from the head; dropped with the member's departure.
	kept map[string]*keptSettings
	// own is the unit's own settings in the relation, as it wrote them
	// (entering the scope, then its hooks' committed relation-set calls),
	// which its hooks read once it has left the scope; nil when not known
	// (not entered yet, or lost to a crash). Saved apart from the head.
	own json.RawMessage
}

// hookOp is one hook to run, persisted through its steps.
type hookOp struct {
	Hook     string `json:"hook"`
	Relation int64  `json:"relation,omitempty"`
	// Endpoint names the relation's endpoint on this unit's side.
	Endpoint  string `json:"endpoint,omitempty"`
	Remote    string `json:"remote,omitempty"`
	Departing string `json:"departing,omitempty"`
	// RemoteService, in a relation-changed for the remote service's
	// settings (Remote empty, as Juju leaves JUJU_REMOTE_UNIT), names
	// that service; Version is then their version.
	RemoteService string `json:"remote_service,omitempty"`
	// Version is the remote unit's settings version (relation-changed),
	// the revision whose spec the hook applies (config-changed,
	// upgrade-charm), or the leader settings' version
	// (leader-settings-changed).
	Version int64  `json:"version,omitempty"`
	Step    string `json:"step"`
	// Attempts counts failed runs so far; NotBefore delays the next.
	Attempts  int       `json:"attempts,omitempty"`
	NotBefore time.Time `json:"not_before,omitempty"`
	// StartFailure, after a run that could not start the hook's file
	// (hooks.StartError), says why: the unit's status message.
	StartFailure string `json:"start_failure,omitempty"`
	// Settings are the hook's relation-set changes, kept once it succeeded
	// until they are committed.
	Settings []settingsChange `json:"settings,omitempty"`
	// Seen, in a relation-changed done, are the remote unit's settings
	// the hook was delivered (kept.go), kept with the hook until it is
	// recorded done; not set while it runs, nor when the agent keeps none.
	Seen json.RawMessage `json:"seen,omitempty"`
	// Task, in a failed host job (claims.go), names the task that failed
	// and why.
	Task string `json:"task,omitempty"`
	// Conflict, in a failed host-claims job, says the machine refused
	// its claims (claims.go, ClaimsGate): Task then holds the conflict.
	Conflict bool `json:"conflict,omitempty"`
	// Ports are the unit's opened ports once the hook succeeded, when it
	// changed them (ports.go), kept with it until it is recorded done.
	Ports *portsChange `json:"ports,omitempty"`
}

type settingsChange struct {
	Relation int64 `json:"relation"`
	// App marks a change of the unit's service's settings in the
	// relation (relation-set --app), not of the unit's.
	App   bool              `json:"app,omitempty"`
	Set   map[string]string `json:"set,omitempty"`
	Unset []string          `json:"unset,omitempty"`
}

func (op *hookOp) isRelationHook() bool { return op.Endpoint != "" }

// memberChange is one change of a relation's members: remote unit Unit
// joined, or was delivered settings version Version (0: joined, changed
// not yet run) with Settings when the agent keeps them, or departed
// (Departed); Clear empties the relation's members first (a relation
// recreated under the same id); Own sets the unit's own settings to
// Settings, the members untouched.
type memberChange struct {
	Relation int64           `json:"r"`
	Unit     string          `json:"u,omitempty"`
	Version  int64           `json:"v,omitempty"`
	Departed bool            `json:"departed,omitempty"`
	Clear    bool            `json:"clear,omitempty"`
	Own      bool            `json:"own,omitempty"`
	Settings json.RawMessage `json:"s,omitempty"`
	// kept is the member's entry holding Settings in memory, which the
	// save that writes this change points at the disk (stateStore.append).
	kept *keptSettings
}

func newLocalState() *localState {
	return &localState{State: StateNew, Relations: map[int64]*localRelation{}, AddedSubordinates: map[int64]string{}}
}

// inError says whether the state machine waits for the operator.
func (l *localState) inError() bool {
	switch l.State {
	case StateInstallError, StateStartError, StateStopError, StateHookError:
		return true
	}
	return false
}

// retrying says whether a failed hook waits to run again (its unit not
// yet in an error state): the agent shows it in error meanwhile, and acts
// on a resolved mark at once.
func (l *localState) retrying() bool {
	return l.Op != nil && l.Op.Attempts > 0 && l.Op.Step == stepQueued && !l.inError()
}

// createRelation records that relation-created ran for relation id: a new
// record of it, with no members.
func (l *localState) createRelation(id int64, endpoint string) {
	if old := l.Relations[id]; old != nil && old.saved() {
		l.changes = append(l.changes, memberChange{Relation: id, Clear: true})
	}
	l.Relations[id] = &localRelation{Endpoint: endpoint, Created: true, Members: map[string]int64{}}
}

// breakRelation records that relation-broken ran for relation id: its
// record goes, members and all.
func (l *localState) breakRelation(id int64) {
	if lr := l.Relations[id]; lr != nil && lr.saved() {
		// Replayed onto a relation of the same id created later in the
		// same save, if there ever were one.
		l.changes = append(l.changes, memberChange{Relation: id, Clear: true})
	}
	delete(l.Relations, id)
	delete(l.AddedSubordinates, id)
	delete(l.SubordinatesRefused, id)
}

// saved says whether the relation holds anything saved apart from the
// head: members, their settings or its own.
func (lr *localRelation) saved() bool {
	return len(lr.Members) > 0 || len(lr.kept) > 0 || lr.own != nil
}

// setMember records that unit joined relation id (version 0) or that
// relation-changed ran for its settings version v, with the settings it
// was delivered (a JSON object) when the agent keeps them (else nil: the
// settings kept before stay).
func (l *localState) setMember(id int64, unit string, v int64, settings json.RawMessage) {
	lr := l.Relations[id]
	if lr == nil {
		return
	}
	if old, ok := lr.Members[unit]; ok && old == v && settings == nil {
		return
	}
	lr.set(unit, v)
	c := memberChange{Relation: id, Unit: unit, Version: v}
	if settings != nil {
		c.Settings, c.kept = settings, lr.keep(unit, &keptSettings{data: settings})
	}
	l.changes = append(l.changes, c)
}

// setOwn records the unit's own settings in relation id (a JSON object).
func (l *localState) setOwn(id int64, settings json.RawMessage) {
	lr := l.Relations[id]
	if lr == nil {
		return
	}
	lr.own = settings
	l.changes = append(l.changes, memberChange{Relation: id, Own: true, Settings: settings})
}

// departMember records that unit departed relation id.
func (l *localState) departMember(id int64, unit string) {
	lr := l.Relations[id]
	if lr == nil {
		return
	}
	if _, ok := lr.Members[unit]; !ok {
		return
	}
	lr.depart(unit)
	l.changes = append(l.changes, memberChange{Relation: id, Unit: unit, Departed: true})
}

// set records unit as a member at version v, keeping byName and joined.
func (lr *localRelation) set(unit string, v int64) {
	if _, ok := lr.Members[unit]; !ok {
		lr.byName = nil
	}
	lr.Members[unit] = v
	if lr.joined != nil {
		if v == 0 {
			lr.joined[unit] = struct{}{}
		} else {
			delete(lr.joined, unit)
		}
	}
}

// depart removes unit from the members, its kept settings with it,
// keeping joined (byName passes over it).
func (lr *localRelation) depart(unit string) {
	delete(lr.Members, unit)
	delete(lr.joined, unit)
	delete(lr.kept, unit)
}

// keep records k as unit's kept settings, and returns it.
func (lr *localRelation) keep(unit string, k *keptSettings) *keptSettings {
	if lr.kept == nil {
		lr.kept = map[string]*keptSettings{}
	}
	lr.kept[unit] = k
	return k
}

// joinedUnchanged returns the members at version 0: joined, and no
// relation-changed run for them yet.
func (lr *localRelation) joinedUnchanged() map[string]struct{} {
	if lr.joined == nil {
		lr.joined = map[string]struct{}{}
		for m, v := range lr.Members {
			if v == 0 {
				lr.joined[m] = struct{}{}
			}
		}
	}
	return lr.joined
}

// apply replays a recorded change onto l, its settings, if any, found
// on disk at ref; changes of relations l does not hold (broken since) are
// ignored, as they were when made.
func (l *localState) apply(c memberChange, ref diskRef) {
	lr := l.Relations[c.Relation]
	switch {
	case lr == nil:
	case c.Clear:
		lr.Members, lr.byName, lr.joined, lr.kept, lr.own = map[string]int64{}, nil, nil, nil, nil
	case c.Own:
		lr.own = c.Settings
	case c.Departed:
		lr.depart(c.Unit)
	default:
		lr.set(c.Unit, c.Version)
		if c.Settings != nil {
			lr.keep(c.Unit, &keptSettings{at: ref})
		}
	}
}
