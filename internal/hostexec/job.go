package hostexec

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// A TaskKind is what a task does: the three that make a revision's
// claims hold and their three reverses.
type TaskKind string

const (
	// TaskInstall claims Packages for Unit, installing those missing.
	TaskInstall TaskKind = "install"
	// TaskManage writes File for Unit (under UnitDir if relative).
	TaskManage TaskKind = "manage"
	// TaskRun makes Unit's Daemon run with exactly its spec.
	TaskRun TaskKind = "run"
	// TaskUninstall releases Unit's claims of Packages (their names),
	// removing those it was the last claimant of.
	TaskUninstall TaskKind = "uninstall"
	// TaskRemove removes File.Path if Unit wrote it and it is unchanged.
	TaskRemove TaskKind = "remove"
	// TaskShutdown stops Unit's daemon Daemon.Name.
	TaskShutdown TaskKind = "shutdown"
)

// A Task is one step of a job. Which fields matter depends on Kind.
type Task struct {
	Kind     TaskKind  `json:"kind"`
	Unit     string    `json:"unit"`
	UnitDir  string    `json:"unit_dir,omitempty"`
	Packages []Package `json:"packages,omitempty"`
	File     File      `json:"file,omitzero"`
	Daemon   Daemon    `json:"daemon,omitzero"`
}

// The results of a task.
const (
	// Changed: the task changed the host.
	Changed = "changed"
	// Unchanged: the host was already as the task wants it.
	Unchanged = "unchanged"
	// OK: the task is done, with a note in the message (a file kept
	// because it changed since the unit wrote it).
	OK = "ok"
	// Failed: the task failed; the message says why.
	Failed = "failed"
)

// An Outcome is how a task ended.
type Outcome struct {
	Kind    TaskKind `json:"kind"`
	Unit    string   `json:"unit"`
	Target  string   `json:"target"` // the packages, the file's path or the daemon's name
	Result  string   `json:"result"` // Changed, Unchanged, OK or Failed
	Message string   `json:"message,omitempty"`
}

// Bounds on a job.
const (
	maxJobTasks   = 1000
	maxJobMessage = 512
)

// A Host carries out jobs of tasks with its packages and daemons.
type Host struct {
	Packages   *Packages
	Supervisor *Supervisor
}

type journalRecord struct {
	// Job is the digest of the tasks: a journal of another job is
	// started afresh.
	Job      string    `json:"job"`
	Outcomes []Outcome `json:"outcomes"`
}

// RunJob runs tasks in order, recording each one's outcome in the
// journal file (atomically) as it ends. A job whose journal shows tasks
// done resumes after them (a runner killed mid-job, run again with the
// same tasks, completes the job: every task is idempotent, so the one
// under way when it died is simply run again); a journal of other tasks
// is started afresh. The first task that fails ends the job, its error
// returned with the outcomes so far (the failed one last); running the
// job again retries from it. A completed job's outcomes are returned
// from its journal, nothing run again. Tasks are all checked before any
// runs.
func (h *Host) RunJob(ctx context.Context, journal string, tasks []Task) ([]Outcome, error) {
	if len(tasks) > maxJobTasks {
		return nil, fmt.Errorf("job of %d tasks, at most %d", len(tasks), maxJobTasks)
	}
	for i, t := range tasks {
		if err := h.check(t); err != nil {
			return nil, fmt.Errorf("task %d (%s): %w", i, t.Kind, err)
		}
	}
	b, err := json.Marshal(tasks)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(b)
	job := hex.EncodeToString(sum[:])
	var rec journalRecord
	if _, err := readRecord(journal, &rec); err != nil {
		return nil, err
	}
	if rec.Job != job || len(rec.Outcomes) > len(tasks) {
		rec = journalRecord{Job: job}
	}
	if n := len(rec.Outcomes); n > 0 && rec.Outcomes[n-1].Result == Failed {
		rec.Outcomes = rec.Outcomes[:n-1]
	}
	if rec.Outcomes == nil {
		rec.Outcomes = []Outcome{}
	}
	for i := len(rec.Outcomes); i < len(tasks); i++ {
		if err := ctx.Err(); err != nil {
			return rec.Outcomes, err
		}
		o, taskErr := h.run(ctx, tasks[i])
		if taskErr != nil && ctx.Err() != nil {
			return rec.Outcomes, ctx.Err() // cut short, not failed: run again
		}
		rec.Outcomes = append(rec.Outcomes, o)
		if err := writeRecord(journal, &rec); err != nil {
			return rec.Outcomes, fmt.Errorf("record task %d: %w", i, err)
		}
		if taskErr != nil {
			return rec.Outcomes, fmt.Errorf("task %d (%s %s of %s): %w", i, o.Kind, o.Target, o.Unit, taskErr)
		}
	}
	return rec.Outcomes, nil
}

// check refuses a task that lacks what its kind needs.
func (h *Host) check(t Task) error {
	if t.Unit == "" {
		return errors.New("no unit")
	}
	switch t.Kind {
	case TaskInstall, TaskUninstall:
		if h.Packages == nil {
			return errors.New("no package claims to act on")
		}
		if len(t.Packages) == 0 {
			return errors.New("no packages")
		}
		for _, p := range t.Packages {
			if err := p.Validate(); err != nil {
				return err
			}
		}
	case TaskManage, TaskRemove:
		if _, err := resolvePath(t.UnitDir, t.File.Path); err != nil {
			return err
		}
	case TaskRun:
		if h.Supervisor == nil {
			return errors.New("no supervisor")
		}
		return t.Daemon.Validate()
	case TaskShutdown:
		if h.Supervisor == nil {
			return errors.New("no supervisor")
		}
		if !daemonName.MatchString(t.Daemon.Name) {
			return fmt.Errorf("daemon name %q: not a daemon name", t.Daemon.Name)
		}
	default:
		return fmt.Errorf("unknown kind %q", t.Kind)
	}
	return nil
}

// run carries out one task.
func (h *Host) run(ctx context.Context, t Task) (Outcome, error) {
	o := Outcome{Kind: t.Kind, Unit: t.Unit}
	var changed bool
	var err error
	switch t.Kind {
	case TaskInstall, TaskUninstall:
		names := sortedNames(t.Packages)
		o.Target = strings.Join(names, " ")
		if t.Kind == TaskInstall {
			changed, err = h.Packages.Claim(ctx, t.Unit, t.Packages)
		} else {
			changed, err = h.Packages.Release(ctx, t.Unit, names)
		}
	case TaskManage:
		o.Target = t.File.Path
		changed, err = WriteFile(t.UnitDir, t.File)
	case TaskRemove:
		o.Target = t.File.Path
		var res RemoveResult
		res, err = RemoveFile(t.UnitDir, t.File.Path)
		changed = res == Removed
		if err == nil && res == Kept {
			o.Result, o.Message = OK, res.String()
			return o, nil
		}
	case TaskRun:
		o.Target = t.Daemon.Name
		changed, err = h.Supervisor.Ensure(t.Unit, t.Daemon)
	case TaskShutdown:
		o.Target = t.Daemon.Name
		changed, err = h.Supervisor.Stop(t.Unit, t.Daemon.Name)
	}
	switch {
	case err != nil:
		o.Result, o.Message = Failed, err.Error()
		if len(o.Message) > maxJobMessage {
			o.Message = o.Message[:maxJobMessage] + "…"
		}
	case changed:
		o.Result = Changed
	default:
		o.Result = Unchanged
	}
	return o, err
}
