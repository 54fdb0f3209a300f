package charm

import (
	"errors"
	"fmt"
)

// Kinds of failure. Every error the package returns for bad input (a
// malformed charm, a bad config value, a bad KEY=VALUE argument, an unsafe or
// oversized archive) matches ErrInvalid with errors.Is; an archive over the
// size limit also matches ErrTooLarge. Other errors (a directory that cannot
// be read, a failing writer) match neither. The API maps them to status codes
// once, at its boundary.
var (
	ErrInvalid  = errors.New("invalid charm")
	ErrTooLarge = errors.New("charm too large")
)

// inputError is an error of bad input with its own sentence.
type inputError struct {
	msg      string
	tooLarge bool
	// violations are the parameters' violations of the action's schema
	// that msg lists (Validate).
	violations []string
}

func (e *inputError) Error() string { return e.msg }

func (e *inputError) Is(target error) bool {
	return target == ErrInvalid || (e.tooLarge && target == ErrTooLarge)
}

func invalidf(format string, args ...any) error {
	return &inputError{msg: fmt.Sprintf(format, args...)}
}

func tooLargef(format string, args ...any) error {
	return &inputError{msg: fmt.Sprintf(format, args...), tooLarge: true}
}

// sizeString renders a byte count as MiB when it is a whole number of them.
func sizeString(n int64) string {
	if n > 0 && n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}
