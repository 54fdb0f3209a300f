package state

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/lifelinehq/lifeline/internal/names"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// The revisions' and rollouts' keys. A service's revisions are
// revisions/<service>/<n>, its rollout rollouts/<service>, its policy
// rollout-policies/<service>, its permits permits/<service>/<unit> and its
// gate's decisions gate-decisions/<service>/<seq>; a unit's revisions are
// unit-revisions/<unit>. Numbers are 20 digits, so that keys sort by
// number. All of them go with their service (removeServiceOps), a unit's
// and its permit with the unit (removeUnitRevisionOps).
const (
	revisionsPrefix       = "revisions/"
	rolloutsPrefix        = "rollouts/"
	rolloutPoliciesPrefix = "rollout-policies/"
	unitRevisionsPrefix   = "unit-revisions/"
	permitsPrefix         = "permits/"
	gateDecisionsPrefix   = "gate-decisions/"
)

// revisionPrefixes are the prefixes of the revisions' records: entities'
// records, gone when the model is empty.
var revisionPrefixes = []string{revisionsPrefix, rolloutsPrefix, rolloutPoliciesPrefix, unitRevisionsPrefix, permitsPrefix, gateDecisionsPrefix}

// The revisions' limits.
const (
	// DefaultRevisionHistory is how many revisions a service keeps unless
	// a change says otherwise; MaxRevisionHistory the most it may say.
	DefaultRevisionHistory = 10
	MaxRevisionHistory     = 100
	// MaxRevisionChanges bounds the changes a revision lists, and
	// MaxChangeValueBytes each value's text (longer ones are cut).
	MaxRevisionChanges  = 64
	MaxChangeValueBytes = 256
	// MaxRevisionBytes bounds a revision's record: its spec's config is
	// bounded by MaxConfigBytes, the rest is small.
	MaxRevisionBytes = MaxConfigBytes + 64<<10
	// MaxGateDecisions is how many gate decisions a service keeps;
	// MaxGateReasonBytes bounds a decision's reason and MaxNoteBytes a
	// unit's note.
	MaxGateDecisions   = 100
	MaxGateReasonBytes = 1 << 10
	MaxNoteBytes       = 1 << 10
	// MaxGrantUnits bounds the units of one GrantPermits call: each costs
	// its transaction three operations (a comparison and two puts) beside
	// the rollout's comparison and put, the policy's comparison and room
	// for an operator's audit entry.
	MaxGrantUnits = (MaxTxnOps - 3 - auditOps) / 3
	// MaxReleaseUnits bounds the units of one ReleasePermits call: a
	// comparison and a deletion each.
	MaxReleaseUnits = (MaxTxnOps - 2 - auditOps) / 2
)

// The rollout policy's defaults.
const (
	DefaultMaxParallel = "100%"
	DefaultDeadline    = 10 * time.Minute
)

func revNum(n int64) string { return fmt.Sprintf("%020d", n) }

// RevisionsPrefix is the prefix of the service's revisions.
func RevisionsPrefix(service string) string { return revisionsPrefix + service + "/" }

// RevisionKey is the key of the service's revision n.
func RevisionKey(service string, n int64) string { return RevisionsPrefix(service) + revNum(n) }

// RolloutKey is the key of the service's rollout.
func RolloutKey(service string) string { return rolloutsPrefix + service }

// RolloutPolicyKey is the key of the service's rollout policy.
func RolloutPolicyKey(service string) string { return rolloutPoliciesPrefix + service }

// UnitRevisionKey is the key of the unit's revisions.
func UnitRevisionKey(unit string) string { return unitRevisionsPrefix + unit }

// UnitRevisionsPrefix is the prefix of the service's units' revisions.
func UnitRevisionsPrefix(service string) string { return unitRevisionsPrefix + service + "/" }

// PermitsPrefix is the prefix of the service's permits.
func PermitsPrefix(service string) string { return permitsPrefix + service + "/" }

// PermitKey is the key of the unit's permit.
func PermitKey(unit string) string { return PermitsPrefix(names.UnitService(unit)) + unit }

// GateDecisionsPrefix is the prefix of the service's gate decisions.
func GateDecisionsPrefix(service string) string { return gateDecisionsPrefix + service + "/" }

func gateDecisionKey(service string, seq int64) string {
	return GateDecisionsPrefix(service) + revNum(seq)
}

// parseNum parses a number of 20 digits, the last segment of a key.
func parseNum(s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || len(s) != 20 || n < 1 {
		return 0, fmt.Errorf("%q: want a positive number of 20 digits", s)
	}
	return n, nil
}

// CanonicalSpec is the encoding of spec its id hashes: JSON with no
// spaces, object keys sorted, of
//
//	{"charm":{"name":N,"revision":R,"sha256":S},"config":{KEY:VALUE,...}}
//
// where each VALUE names its type: {"string":"x"}, {"int":5},
// {"float":"1.5"} (Go's shortest 'g' form, so that NaN and infinities
// encode too) or {"bool":true}; a value of no type is {}. Two specs are the
// same exactly when their encodings are.
func CanonicalSpec(spec *pb.ServiceSpec) []byte {
	type charm struct {
		Name     string `json:"name"`
		Revision int64  `json:"revision"`
		Sha256   string `json:"sha256"`
	}
	config := make(map[string]map[string]any, len(spec.GetConfig()))
	for k, v := range spec.GetConfig() {
		config[k] = typedValue(v)
	}
	c := spec.GetCharm()
	b, err := canonicalJSON(struct {
		Charm  charm                     `json:"charm"`
		Config map[string]map[string]any `json:"config"`
	}{charm{c.GetName(), c.GetRevision(), c.GetSha256()}, config})
	if err != nil {
		// Strings, integers and booleans always encode; floats are text.
		panic(fmt.Sprintf("state: canonical spec: %v", err))
	}
	return b
}

func typedValue(v *pb.ConfigValue) map[string]any {
	switch x := v.GetValue().(type) {
	case *pb.ConfigValue_StringValue:
		return map[string]any{"string": x.StringValue}
	case *pb.ConfigValue_IntValue:
		return map[string]any{"int": x.IntValue}
	case *pb.ConfigValue_FloatValue:
		return map[string]any{"float": strconv.FormatFloat(x.FloatValue, 'g', -1, 64)}
	case *pb.ConfigValue_BoolValue:
		return map[string]any{"bool": x.BoolValue}
	}
	return map[string]any{}
}

// SpecID is the id of a spec: the hex SHA-256 of CanonicalSpec.
func SpecID(spec *pb.ServiceSpec) string {
	sum := sha256.Sum256(CanonicalSpec(spec))
	return hex.EncodeToString(sum[:])
}

// configText is a configuration value as a revision's change shows it:
// JSON ("x" quoted, 5, 1.5, true), "" for absent.
func configText(v *pb.ConfigValue) string {
	if v == nil {
		return ""
	}
	var b []byte
	switch x := v.GetValue().(type) {
	case *pb.ConfigValue_StringValue:
		b, _ = json.Marshal(x.StringValue)
	case *pb.ConfigValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *pb.ConfigValue_FloatValue:
		return strconv.FormatFloat(x.FloatValue, 'g', -1, 64)
	case *pb.ConfigValue_BoolValue:
		return strconv.FormatBool(x.BoolValue)
	default:
		return "null"
	}
	return cutText(string(b), MaxChangeValueBytes)
}

// charmText is a charm as a revision's change shows it: "kv-3".
func charmText(c *pb.CharmRef) string {
	if c == nil {
		return ""
	}
	return fmt.Sprintf("%s-%d", c.Name, c.Revision)
}

// specChanges lists what differs from old to next: the charm first, then
// the configuration's keys, sorted; at most MaxRevisionChanges.
func specChanges(old, next *pb.ServiceSpec) []*pb.RevisionChange {
	var out []*pb.RevisionChange
	oc, nc := old.GetCharm(), next.GetCharm()
	if oc.GetName() != nc.GetName() || oc.GetRevision() != nc.GetRevision() || oc.GetSha256() != nc.GetSha256() {
		ot, nt := charmText(oc), charmText(nc)
		if ot == nt {
			ot, nt = ot+" ("+oc.GetSha256()+")", nt+" ("+nc.GetSha256()+")"
		}
		out = append(out, &pb.RevisionChange{Charm: true, OldValue: ot, NewValue: nt})
	}
	keys := make([]string, 0, len(next.GetConfig()))
	for k := range old.GetConfig() {
		keys = append(keys, k)
	}
	for k := range next.GetConfig() {
		if _, ok := old.GetConfig()[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		if len(out) == MaxRevisionChanges {
			break
		}
		ov, nv := old.GetConfig()[k], next.GetConfig()[k]
		if proto.Equal(ov, nv) {
			continue
		}
		out = append(out, &pb.RevisionChange{Key: cutText(k, MaxChangeValueBytes), OldValue: configText(ov), NewValue: configText(nv)})
	}
	return out
}

// DefaultRolloutPolicy is the policy of a service that has none set.
func DefaultRolloutPolicy() *pb.RolloutPolicy {
	return &pb.RolloutPolicy{MaxParallel: DefaultMaxParallel, DeadlineMs: DefaultDeadline.Milliseconds(), AutoRevert: true}
}

// parseMaxParallel parses "N" (at least 1) or "P%" (1 to 100).
func parseMaxParallel(s string) (n int, percent bool, err error) {
	if p, ok := strings.CutSuffix(s, "%"); ok {
		v, err := strconv.Atoi(p)
		if err != nil || v < 1 || v > 100 {
			return 0, false, invalidf("max-parallel %q: want a percentage from 1%% to 100%%", s)
		}
		return v, true, nil
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < 1 {
		return 0, false, invalidf("max-parallel %q: want a number of units of at least 1, or a percentage", s)
	}
	return v, false, nil
}

// MaxParallelUnits is how many of a service's units policy lets move at
// once: its max-parallel, a percentage of units rounded up; at least 1.
// A policy whose max-parallel does not parse allows 1.
func MaxParallelUnits(policy *pb.RolloutPolicy, units int) int {
	mp := policy.GetMaxParallel()
	if mp == "" {
		mp = DefaultMaxParallel
	}
	n, percent, err := parseMaxParallel(mp)
	if err != nil {
		return 1
	}
	if percent {
		n = int(math.Ceil(float64(n) * float64(units) / 100))
	}
	return max(n, 1)
}

// ValidateRolloutPolicy checks a policy as SetRolloutPolicy stores it.
func ValidateRolloutPolicy(p *pb.RolloutPolicy) error {
	if p == nil {
		return invalidf("no rollout policy given")
	}
	if _, _, err := parseMaxParallel(p.MaxParallel); err != nil {
		return err
	}
	switch {
	case p.Canary < 0:
		return invalidf("canary %d: want 0 or more units", p.Canary)
	case p.MinHealthyMs < 0:
		return invalidf("min-healthy %s: want 0 or more", time.Duration(p.MinHealthyMs)*time.Millisecond)
	case p.DeadlineMs <= 0:
		return invalidf("deadline %s: want more than 0", time.Duration(p.DeadlineMs)*time.Millisecond)
	case p.Gate != "" && !names.ValidEndpoint(p.Gate):
		return invalidf("gate name %q: want lowercase letters, digits and dashes, starting with a letter", p.Gate)
	}
	return nil
}

// RolloutStateName is the state as ctl shows it: "canary".
func RolloutStateName(st pb.RolloutState) string {
	return strings.ToLower(strings.TrimPrefix(st.String(), "ROLLOUT_STATE_"))
}
