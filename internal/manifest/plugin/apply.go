package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// ErrStillStale: a resource's actions all succeeded and its state action
// still answers STALE. An apply halts on it.
var ErrStillStale = errors.New("still stale after its actions")

// maxStaleShown bounds the staleState an ErrStillStale message quotes.
const maxStaleShown = 200

// Apply makes a resource VALID the way the protocol says: it runs the
// actions of s, a state answer, in order, then the state action again,
// which must answer VALID, and returns that answer. An action that fails
// stops it with that action's error. A state still STALE after them is an
// *Error wrapping ErrStillStale whose step names the last action run and
// whose message says what is still stale. When s is VALID, Apply runs
// nothing and returns s. before, when not nil, is called before each
// action, for progress.
func (p *Program) Apply(ctx context.Context, name, typ string, config map[string]any, s *StateResponse, before func(Action)) (*StateResponse, error) {
	if s == nil || s.Status == StatusValid {
		return s, nil
	}
	for _, a := range s.Actions {
		if before != nil {
			before(a)
		}
		if err := p.Do(ctx, name, typ, config, a); err != nil {
			return nil, err
		}
	}
	after, err := p.State(ctx, name, typ, config)
	if err != nil {
		return nil, err
	}
	if after.Status == StatusValid {
		return after, nil
	}
	last := s.Actions[len(s.Actions)-1]
	names := make([]string, len(after.Actions))
	for i, a := range after.Actions {
		names[i] = a.Name
	}
	msg := "the state action answers STALE with actions " + strings.Join(names, ", ")
	if after.StaleState != nil {
		b, _ := json.Marshal(after.StaleState)
		shown := string(b)
		if len(shown) > maxStaleShown {
			shown = shown[:maxStaleShown] + "…"
		}
		msg += "; staleState " + shown
	}
	return nil, &Error{Plugin: p.Path, Resource: name, Step: "state after action " + last.Name, Err: fmt.Errorf("%w: %s", ErrStillStale, msg)}
}
