package statetest

import (
	"context"
	"sync"

	"github.com/lifelinehq/lifeline/state"
)

// HeldChanges is a State as a watch hub's source whose changes can be
// held back: while held, what follows the hub (the controller's decoded
// model) cannot catch up with the writes.
type HeldChanges struct {
	*state.State
	mu   sync.Mutex
	flow chan struct{} // closed while the changes flow
}

// NewHeldChanges returns st as a source whose changes flow until Hold.
func NewHeldChanges(st *state.State) *HeldChanges {
	h := &HeldChanges{State: st, flow: make(chan struct{})}
	close(h.flow)
	return h
}

// Hold holds the changes back (on) or lets them flow again.
func (h *HeldChanges) Hold(on bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	select {
	case <-h.flow:
		if on {
			h.flow = make(chan struct{})
		}
	default:
		if !on {
			close(h.flow)
		}
	}
}

func (h *HeldChanges) flowing() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.flow
}

// WatchChanges is the State's, each batch handed on once the changes
// flow. Its goroutine ends when the State's stream does or ctx ends.
func (h *HeldChanges) WatchChanges(ctx context.Context, prefix string, after int64) <-chan state.WatchBatch {
	in := h.State.WatchChanges(ctx, prefix, after)
	out := make(chan state.WatchBatch)
	go func() {
		defer close(out)
		for b := range in {
			select {
			case <-h.flowing():
			case <-ctx.Done():
				return
			}
			select {
			case out <- b:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}
