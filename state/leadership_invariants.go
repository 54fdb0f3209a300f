package state

import (
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/lifelinehq/lifeline/internal/names"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// checkLeadership checks the leadership records (leadership.go): a
// leadership key names an existing unit of its service, on the machine
// the record names, and a service has at most one; leader settings
// belong to an existing service and are within their bound.
func checkLeadership(snap *Snapshot, m *model, bad func(string, ...any)) {
	leaders := map[string]string{}
	for k, v := range snap.Values {
		switch {
		case strings.HasPrefix(k, leadershipPrefix):
			unit := LeaderOfKey(k)
			if unit == "" || names.CheckUnit(unit) != nil {
				bad("leadership key %s names no unit", k)
				continue
			}
			rec := &pb.Leadership{}
			if err := proto.Unmarshal(v, rec); err != nil {
				bad("%s: undecodable value: %v", k, err)
				continue
			}
			svc := names.UnitService(unit)
			if rec.Unit != unit {
				bad("leadership key %s holds unit %s", k, rec.Unit)
			}
			if other, ok := leaders[svc]; ok {
				bad("L1: service %s has two leaders, %s and %s", svc, other, unit)
			}
			leaders[svc] = unit
			u, ok := m.units[unit]
			switch {
			case !ok:
				bad("L1: leader %s of service %s does not exist", unit, svc)
			case u.Service != svc:
				bad("L1: leader %s is not a unit of service %s", unit, svc)
			case u.MachineId != rec.MachineId:
				bad("leadership of %s names machine %q, the unit is on %q", unit, rec.MachineId, u.MachineId)
			}
			if m.services[svc] == nil {
				bad("L1: leadership %s of service %s, which does not exist", k, svc)
			}
		case strings.HasPrefix(k, leaderSettingsPrefix):
			svc := strings.TrimPrefix(k, leaderSettingsPrefix)
			if m.services[svc] == nil {
				bad("leader settings of service %s, which does not exist", svc)
			}
			st := &pb.LeaderSettings{}
			if err := proto.Unmarshal(v, st); err != nil {
				bad("%s: undecodable value: %v", k, err)
			} else if n := proto.Size(st); n > MaxLeaderSettingsBytes {
				bad("leader settings of %s are %d bytes, over %d", svc, n, MaxLeaderSettingsBytes)
			}
		}
	}
}
