package unitagent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"google.golang.org/protobuf/proto"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// The unit follows its own revision (the unit_revision watch subject):
// when its target differs from the revision whose spec it holds, it reads
// the target's spec (GetRevision), unpacks the spec's charm if it is
// another (then runs upgrade-charm), runs config-changed if the
// configuration differs from the one it last ran with (or the charm
// changed), records the revision and reports it (SetUnitRevision). Each
// step is recorded in the local state, so that a crash resumes where it
// stopped: a spec read again, a charm downloaded again, a hook counted as
// a failed attempt, a report made again (reporting the current revision
// does nothing).

// localSpec is a revision's spec as the local state keeps it: in the
// head, so that every record carries it, the configuration's size (a few
// hundred bytes for most charms; the controller bounds it).
type localSpec struct {
	Revision int64 `json:"revision"`
	// Spec is the pb.ServiceSpec, protobuf-encoded.
	Spec []byte `json:"spec"`
	// spec is Spec decoded, and digest its configuration's
	// configDigest, once asked for: the resolver asks at each decision.
	spec   *pb.ServiceSpec
	digest string
}

// newLocalSpec returns the local record of revision rev.
func newLocalSpec(rev *pb.Revision) (*localSpec, error) {
	b, err := proto.Marshal(rev.GetSpec())
	if err != nil {
		return nil, fmt.Errorf("encode the spec of revision %d: %w", rev.GetNumber(), err)
	}
	return &localSpec{Revision: rev.GetNumber(), Spec: b, spec: rev.GetSpec()}, nil
}

// decoded returns the spec; one that does not decode (a damaged state
// file) is empty, with no charm: the agent reads it again.
func (ls *localSpec) decoded() *pb.ServiceSpec {
	if ls.spec == nil {
		var spec pb.ServiceSpec
		if err := proto.Unmarshal(ls.Spec, &spec); err != nil {
			return &pb.ServiceSpec{}
		}
		ls.spec = &spec
	}
	return ls.spec
}

// config returns the configuration the unit's hooks and actions see: that
// of the spec the unit runs or is moving to; nil before it has one.
func (l *localState) config() map[string]*pb.ConfigValue {
	if l.Spec == nil {
		return nil
	}
	return l.Spec.decoded().GetConfig()
}

// configDigest returns the digest of the spec's configuration.
func (ls *localSpec) configDigest() string {
	if ls.digest == "" {
		ls.digest = configDigest(ls.decoded().GetConfig())
	}
	return ls.digest
}

// configDigest identifies a configuration: the hex SHA-256 of its
// deterministic encoding, keys sorted.
func configDigest(cfg map[string]*pb.ConfigValue) string {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(&pb.ServiceSpec{Config: cfg})
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// isMoveHook says whether op applies a revision's spec: a failure of one
// (a host-claims job's conflict included) gives way when the unit's
// target moves on from that revision.
func isMoveHook(op *hookOp) bool {
	return op.Hook == "upgrade-charm" || op.Hook == "config-changed" || op.Hook == opHostClaims
}

// fetchSpec reads revision n of the unit's service and holds its spec as
// the one the unit moves to; with adopt, as the one it runs (an agent
// that ran before revisions: config-changed runs again for it). A
// revision the controller no longer keeps is not an error: the unit's
// target has moved on from it, and the watch brings the news.
func (ex *executor) fetchSpec(ctx context.Context, n int64, adopt bool) error {
	a := ex.a
	resp, err := a.cfg.API.GetRevision(ctx, &pb.GetRevisionRequest{Unit: a.cfg.Unit, Number: n})
	if err != nil {
		return fmt.Errorf("read revision %d: %w", n, err)
	}
	ls, err := newLocalSpec(resp.GetRevision())
	if err != nil {
		return err
	}
	a.l.Spec = ls
	if adopt {
		a.l.Revision = n
	}
	a.logger.Info("revision read", "revision", n, "charm", charmKey(ls.decoded().GetCharm()))
	// Committed lazily (actFetchSpec's class): lost to a crash, it is
	// read again.
	return nil
}

// dropMove gives up the failed hook of a move whose revision the unit's
// target has moved on from: the unit leaves its error state (or its
// retries) and moves to the new target, running config-changed for it
// even if its configuration is the one config-changed last succeeded
// with. Its resolved mark, if any,
// answered the failure given up, and goes first.
func (ex *executor) dropMove(ctx context.Context, r *modelView) error {
	a := ex.a
	op := a.l.Op
	if _, err := a.cfg.API.ClearResolved(ctx, &pb.ClearResolvedRequest{Unit: a.cfg.Unit}); err != nil {
		return err
	}
	a.logger.Info("target moved on: giving up the failed hook", "hook", op.Hook, "revision", op.Version,
		"target", r.unitRev.GetTarget())
	if a.l.State == StateHookError {
		a.l.State, a.l.Resume = a.l.Resume, ""
	}
	if op.Hook == "config-changed" {
		// It ran, in part, with a configuration the unit will not run:
		// config-changed runs again, whatever the next one is.
		a.l.ConfigRan = ""
	}
	a.l.Op = nil
	a.failed, a.failedOp = nil, nil
	if op.Hook == opHostClaims {
		// The claims approved for it, if any, are not taken: the host
		// holds what it held, and no conflict is left to report.
		if a.l.Host != nil {
			a.l.Host.Conflicts = nil
		}
		a.tellGate()
	}
	return nil
}
