package unitagent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// What the agent reads and records of relation settings around its
// hooks, for the settings it keeps (kept.go). A unit of a charm without
// hooks keeps none: nothing would read them.

// deliver reads, for a relation-changed, the remote unit's settings the
// hook is delivered: the hook reads them (relation-get) without a call of
// its own, and the agent keeps them with the member once the hook is
// done. It returns them encoded (to keep, nil when there is nothing new
// to keep) and as the hook is to see them (nil: as it finds them). A
// unit that has left the scope is not read: the hook sees it as kept.
// The read made while relation-joined ran (prefetch) is used when it is
// of the version delivered or later.
func (ex *executor) deliver(ctx context.Context, op *hookOp, r *modelView) (json.RawMessage, map[string]string, error) {
	a := ex.a
	if !strings.HasSuffix(op.Hook, "-relation-changed") || op.Remote == "" || !a.hasHooks() || !inPicture(r, op) {
		return nil, nil, nil
	}
	var resp *pb.ReadSettingsResponse
	var err error
	if p := ex.takePrefetch(ctx, op.Relation, op.Remote); p != nil && (status.Code(p.err) == codes.NotFound ||
		p.err == nil && p.resp.Version >= op.Version) {
		resp, err = p.resp, p.err
	} else {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		resp, err = a.cfg.API.ReadSettings(cctx, &pb.ReadSettingsRequest{Relation: op.Relation, Unit: op.Remote})
		cancel()
	}
	if status.Code(err) == codes.NotFound {
		// It left the scope since the agent last heard: the hook sees it
		// as kept.
		values, err := a.kept(a.l.Relations[op.Relation], op.Relation, op.Remote, false)
		return nil, values, err
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read %s's settings in relation %d: %w", op.Remote, op.Relation, err)
	}
	values := resp.Settings
	if values == nil {
		values = map[string]string{}
	}
	data, err := json.Marshal(values)
	if err != nil {
		return nil, nil, fmt.Errorf("encode %s's settings: %w", op.Remote, err)
	}
	return data, values, nil
}

// inPicture says whether op's remote unit may be in its relation's
// scope: the scope's watch lists it, or has not answered yet (a hook in
// progress runs again after a restart before it answers; the controller
// then tells).
func inPicture(r *modelView, op *hookOp) bool {
	rr := r.relations[op.Relation]
	if rr == nil || !rr.scoped {
		return true
	}
	_, ok := rr.members[op.Remote]
	return ok
}

// prefetch is a read of a member's settings made while the agent runs
// the member's relation-joined, for the relation-changed that follows it
// at once (and for the joined hook, should it read them): a unit related
// to thousands runs their hooks one after another, and the round trip
// between its hooks would add up.
type prefetch struct {
	relation int64
	unit     string
	cancel   context.CancelFunc
	done     chan struct{} // closed once resp and err are set
	resp     *pb.ReadSettingsResponse
	err      error
}

// wait waits for p's answer, or gives it up when ctx ends.
func (p *prefetch) wait(ctx context.Context) {
	select {
	case <-p.done:
	case <-ctx.Done():
		p.cancel()
		<-p.done
	}
}

// prefetchFor starts, for op, a relation-joined of a charm with hooks, a
// read of the joining unit's settings; it ends the one started before,
// if any (a hook run again reads afresh). Only one runs at a time.
func (ex *executor) prefetchFor(ctx context.Context, op *hookOp, r *modelView) *prefetch {
	a := ex.a
	if !strings.HasSuffix(op.Hook, "-relation-joined") || op.Remote == "" || !a.hasHooks() || !inPicture(r, op) {
		return nil
	}
	ex.endPrefetch()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	p := &prefetch{relation: op.Relation, unit: op.Remote, cancel: cancel, done: make(chan struct{})}
	ex.pre = p
	api := a.cfg.API
	go func() {
		defer close(p.done)
		p.resp, p.err = api.ReadSettings(ctx, &pb.ReadSettingsRequest{Relation: p.relation, Unit: p.unit})
	}()
	return p
}

// takePrefetch returns the read of unit's settings in relation started
// before, once answered, and forgets it; nil when there is none.
func (ex *executor) takePrefetch(ctx context.Context, relation int64, unit string) *prefetch {
	p := ex.pre
	if p == nil || p.relation != relation || p.unit != unit {
		return nil
	}
	ex.pre = nil
	p.wait(ctx)
	p.cancel()
	return p
}

// endPrefetch ends the read started before, if any, and waits for it.
func (ex *executor) endPrefetch() {
	if p := ex.pre; p != nil {
		p.cancel()
		<-p.done
		ex.pre = nil
	}
}

// hasHooks reports whether the charm has any hook.
func (a *Agent) hasHooks() bool {
	if !a.hookEach && a.hookNames == nil {
		a.hasHook("install") // reads the hooks directory
	}
	if a.hookNames != nil {
		return len(a.hookNames) > 0
	}
	return true // a hook ran since the charm was unpacked, or the directory cannot be listed
}

// keepOwn records the unit's own settings in relation id: those it
// entered the scope with, or read there.
func (a *Agent) keepOwn(id int64, settings map[string]string) error {
	if !a.hasHooks() {
		return nil
	}
	data, err := json.Marshal(settings)
	if err != nil {
		return fmt.Errorf("encode the unit's settings: %w", err)
	}
	a.l.setOwn(id, data)
	return nil
}

// wrote records the unit's own settings after the controller applied a
// hook's relation-set calls, where it knows them.
func (ex *executor) wrote(changes []settingsChange) error {
	for _, c := range changes {
		lr := ex.a.l.Relations[c.Relation]
		if c.App || lr == nil || lr.own == nil {
			continue
		}
		own := map[string]string{}
		if err := json.Unmarshal(lr.own, &own); err != nil {
			return fmt.Errorf("kept settings of relation %d: %w", c.Relation, err)
		}
		for k, v := range c.Set {
			own[k] = v
		}
		for _, k := range c.Unset {
			delete(own, k)
		}
		data, err := json.Marshal(own)
		if err != nil {
			return fmt.Errorf("encode the unit's settings: %w", err)
		}
		if !bytes.Equal(data, lr.own) {
			ex.a.l.setOwn(c.Relation, data)
		}
	}
	return nil
}

// leaving reads the unit's own settings in relation id before it leaves
// the scope, when the agent does not know them (it lost them to a crash):
// its hooks read them once it has left.
func (ex *executor) leaving(ctx context.Context, id int64) error {
	a := ex.a
	lr := a.l.Relations[id]
	if lr == nil || lr.own != nil || !a.hasHooks() {
		return nil
	}
	resp, err := a.cfg.API.ReadSettings(ctx, &pb.ReadSettingsRequest{Relation: id, Unit: a.cfg.Unit})
	switch status.Code(err) {
	case codes.OK:
		values := resp.Settings
		if values == nil {
			values = map[string]string{}
		}
		return a.keepOwn(id, values)
	case codes.NotFound:
		return nil // not in the scope: nothing to read
	}
	return fmt.Errorf("read the unit's settings in relation %d: %w", id, err)
}
