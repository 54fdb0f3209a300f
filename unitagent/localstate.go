package unitagent

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// The unit agent's states (DESIGN.md §6).
const (
	StateNew          = "new"
	StateReady        = "ready"
	StateRunning      = "running"
	StateInstallError = "install-error"
	StateStartError   = "start-error"
	StateStopError    = "stop-error"
	StateHookError    = "hook-error"
)

// Steps of a hook operation, persisted before and after it runs.
const (
	stepQueued  = "queued"
	stepRunning = "running"
	stepDone    = "done" // the hook succeeded; its relation settings are still to be committed
)

// localState is the unit's authoritative record, kept in state.json in its
// data directory.
type localState struct {
	// State is the state machine's state.
	State string `json:"state"`
	// Resume is the state a hook-error returns to once resolved.
	Resume string `json:"resume,omitempty"`
	// Op is the hook in progress, or nil.
	Op *hookOp `json:"op,omitempty"`
	// Charm is the "<name>/<revision>" installed in the charm directory.
	Charm string `json:"charm,omitempty"`
	// ConfigVersion is the version of the configuration config-changed
	// last ran for.
	ConfigVersion int64 `json:"config_version,omitempty"`
	// Started is set by start and cleared by stop.
	Started bool `json:"started,omitempty"`
	// Stopped and Removed record that stop and remove ran for a dying unit.
	Stopped bool `json:"stopped,omitempty"`
	Removed bool `json:"removed,omitempty"`
	// Relations are the relations the unit takes part in, by id.
	Relations map[int64]*localRelation `json:"relations,omitempty"`
	// Subordinates of this principal that it added, by relation id.
	AddedSubordinates map[int64]string `json:"added_subordinates,omitempty"`
}

// localRelation is what the unit has done in one relation.
type localRelation struct {
	Endpoint string `json:"endpoint"`
	// Created records that relation-created ran.
	Created bool `json:"created,omitempty"`
	// InScope records that the unit entered the relation's scope.
	InScope bool `json:"in_scope,omitempty"`
	// Members are the remote units joined, with the settings version
	// relation-changed last ran for; 0 when joined ran but changed has not.
	Members map[string]int64 `json:"members,omitempty"`
	// Left records that the unit left a dying relation's scope; broken
	// runs next, then the record goes.
	Left bool `json:"left,omitempty"`
}

// hookOp is one hook to run, persisted through its steps.
type hookOp struct {
	Hook     string `json:"hook"`
	Relation int64  `json:"relation,omitempty"`
	// Endpoint names the relation's endpoint on this unit's side.
	Endpoint  string `json:"endpoint,omitempty"`
	Remote    string `json:"remote,omitempty"`
	Departing string `json:"departing,omitempty"`
	// Version is the remote unit's settings version (relation-changed),
	// or the configuration's (config-changed).
	Version int64  `json:"version,omitempty"`
	Step    string `json:"step"`
	// Attempts counts failed runs so far; NotBefore delays the next.
	Attempts  int       `json:"attempts,omitempty"`
	NotBefore time.Time `json:"not_before,omitempty"`
	// Settings are the hook's relation-set changes, kept once it succeeded
	// until they are committed.
	Settings []settingsChange `json:"settings,omitempty"`
}

type settingsChange struct {
	Relation int64             `json:"relation"`
	Set      map[string]string `json:"set,omitempty"`
	Unset    []string          `json:"unset,omitempty"`
}

func (op *hookOp) isRelationHook() bool { return op.Endpoint != "" }

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

// stateFile reads and writes the local state atomically: a new file is
// written and synced beside the old, renamed over it, and the directory
// synced, so that a crash at any point leaves the old state or the new,
// never a torn one.
type stateFile struct{ path string }

func (f stateFile) load() (*localState, error) {
	data, err := os.ReadFile(f.path)
	if errors.Is(err, os.ErrNotExist) {
		return newLocalState(), nil
	}
	if err != nil {
		return nil, fmt.Errorf("read unit state: %w", err)
	}
	l := newLocalState()
	if err := json.Unmarshal(data, l); err != nil {
		return nil, fmt.Errorf("unit state %s is damaged: %w", f.path, err)
	}
	if l.Relations == nil {
		l.Relations = map[int64]*localRelation{}
	}
	for id, lr := range l.Relations {
		switch {
		case lr == nil:
			delete(l.Relations, id)
		case lr.Members == nil:
			// Saved without members (omitempty): none joined yet.
			lr.Members = map[string]int64{}
		}
	}
	if l.AddedSubordinates == nil {
		l.AddedSubordinates = map[int64]string{}
	}
	return l, nil
}

func (f stateFile) save(l *localState) error {
	data, err := json.MarshalIndent(l, "", "  ")
	if err != nil {
		return fmt.Errorf("encode unit state: %w", err)
	}
	tmp := f.path + ".tmp"
	w, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("write unit state: %w", err)
	}
	if _, err := w.Write(append(data, '\n')); err != nil {
		w.Close()
		return fmt.Errorf("write unit state: %w", err)
	}
	if err := w.Sync(); err != nil {
		w.Close()
		return fmt.Errorf("sync unit state: %w", err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("write unit state: %w", err)
	}
	if err := os.Rename(tmp, f.path); err != nil {
		return fmt.Errorf("replace unit state: %w", err)
	}
	d, err := os.Open(filepath.Dir(f.path))
	if err != nil {
		return fmt.Errorf("sync unit state directory: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync unit state directory: %w", err)
	}
	return nil
}
