package state

import (
	"errors"
	"fmt"
)

// Kinds of failure. Every error the package returns for a refused or
// impossible request wraps exactly one of these; the API maps them to status
// codes once, at its boundary.
var (
	// ErrNotFound: the entity does not exist (or no longer does).
	ErrNotFound = errors.New("not found")
	// ErrAlreadyExists: the entity to create exists already.
	ErrAlreadyExists = errors.New("already exists")
	// ErrRefused: a life rule said no; the message names the blocker.
	ErrRefused = errors.New("refused")
	// ErrInvalid: the request itself is malformed (a bad name, a bad value).
	ErrInvalid = errors.New("invalid")
	// ErrAborted: the transaction kept conflicting with concurrent changes
	// and the retries ran out. Trying again later is safe.
	ErrAborted = errors.New("too many conflicting changes")
	// ErrNotInError: an answer to a failed hook (SetResolved) for a unit
	// whose agent is not in an error state.
	ErrNotInError = errors.New("not in an error state")
	// ErrAlreadyResolved: an answer to a failed hook for a unit already
	// answered, whose agent has yet to act on it.
	ErrAlreadyResolved = errors.New("already resolved")
	// ErrBadJoinToken: a join token that does not join (used, expired,
	// or not the one issued).
	ErrBadJoinToken = errors.New("join token not valid")
	// ErrFull: a store the request would add to is at its limit (the
	// charm store, the users); the message names it.
	ErrFull = errors.New("full")
	// ErrUnauthenticated: the proof a caller without a credential offered
	// (a registration's one-time secret) does not hold.
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrNoChange: a change that would change nothing (a service's spec
	// set to the one it has); the message names what is already so.
	ErrNoChange = errors.New("no change")
)

// RuleError is a refusal by one of the life rules (docs/DESIGN.md). It matches
// ErrRefused with errors.Is.
type RuleError struct {
	// Rule names the rule, such as "M2".
	Rule string
	// Msg names the blocker: "machine 3 has unit kv/0 assigned".
	Msg string
}

func (e *RuleError) Error() string { return e.Msg }

// Is makes errors.Is(err, ErrRefused) true.
func (e *RuleError) Is(target error) bool { return target == ErrRefused }

func refused(rule, format string, args ...any) error {
	return &RuleError{Rule: rule, Msg: fmt.Sprintf(format, args...)}
}

// kindError is an error of one of the kinds above with its own sentence.
type kindError struct {
	kind error
	msg  string
}

func (e *kindError) Error() string        { return e.msg }
func (e *kindError) Is(target error) bool { return target == e.kind }

func notFoundf(format string, args ...any) error {
	return &kindError{kind: ErrNotFound, msg: fmt.Sprintf(format, args...)}
}

func existsf(format string, args ...any) error {
	return &kindError{kind: ErrAlreadyExists, msg: fmt.Sprintf(format, args...)}
}

func notInErrorf(format string, args ...any) error {
	return &kindError{kind: ErrNotInError, msg: fmt.Sprintf(format, args...)}
}

func alreadyResolvedf(format string, args ...any) error {
	return &kindError{kind: ErrAlreadyResolved, msg: fmt.Sprintf(format, args...)}
}

func fullf(format string, args ...any) error {
	return &kindError{kind: ErrFull, msg: fmt.Sprintf(format, args...)}
}

func noChangef(format string, args ...any) error {
	return &kindError{kind: ErrNoChange, msg: fmt.Sprintf(format, args...)}
}

func invalidf(format string, args ...any) error {
	return &kindError{kind: ErrInvalid, msg: fmt.Sprintf(format, args...)}
}

// RuleOf returns the rule that refused err, or "".
func RuleOf(err error) string {
	var re *RuleError
	if errors.As(err, &re) {
		return re.Rule
	}
	return ""
}
