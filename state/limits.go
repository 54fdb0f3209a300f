package state

import "fmt"

// The sizes the State lets a record or a transaction reach, each checked
// before anything goes to etcd and refused as ErrInvalid with a sentence
// that names the limit: etcd itself refuses a request over 1.5 MiB (its
// --max-request-bytes) with an error that says nothing of what was too
// large, which reached the operator as Internal.
const (
	// MaxSettingsBytes bounds a unit's settings in a relation, encoded,
	// as they stand after an update (what an update adds is bounded by
	// the API too).
	MaxSettingsBytes = 64 << 10
	// MaxConfigBytes bounds a service's configuration, encoded, with its
	// charm's defaults.
	MaxConfigBytes = 512 << 10
	// MaxCharmRecordBytes bounds a charm revision's record, encoded: its
	// metadata, endpoints, hooks and config options with their defaults.
	MaxCharmRecordBytes = 1 << 20
	// MaxTxnBytes bounds the keys and values one transaction writes. Every
	// record above fits with room to spare; it is the last check, for a
	// write that none of them covers.
	MaxTxnBytes = 1<<20 + 256<<10

	// The operations' limits (operations.go). MaxParamsBytes bounds an
	// operation's parameters as canonical JSON, MaxResultsBytes a task's
	// results and MaxCheckpointBytes its checkpoint, each keys and values
	// together; MaxTaskMessageBytes a task's message (longer ones are cut,
	// not refused: they come from an action's failure). MaxOperationBytes
	// bounds an operation's record, with its targets.
	MaxParamsBytes      = 64 << 10
	MaxResultsBytes     = 64 << 10
	MaxCheckpointBytes  = 64 << 10
	MaxTaskMessageBytes = 1 << 10
	MaxOperationBytes   = 512 << 10
	// MaxOpenOperations bounds the operations awaiting approval, approved
	// or running at once; MaxOperationTargets the units of one operation;
	// MaxOpenTasksPerUnit the open tasks of one unit, of all operations
	// (the unit's agent watches them all).
	MaxOpenOperations   = 1000
	MaxOperationTargets = 10_000
	MaxOpenTasksPerUnit = 16
)

// sizeString writes a byte count for a sentence: "64 KiB", "1.5 MiB".
func sizeString(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}

// tooLarge is the refusal of a record of n bytes over limit.
func tooLarge(what string, n, limit int) error {
	return invalidf("%s would be %s: at most %s", what, sizeString(int64(n)), sizeString(int64(limit)))
}
