package unitagent

import (
	"context"
	"fmt"
	"maps"
	"time"

	"github.com/lifelinehq/lifeline/internal/names"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// A service's settings in a relation (relation-get and relation-set
// --app): read from the controller when a hook asks, once a hook as a
// unit's are; written by the leader's hooks, buffered with the unit's
// relation-set calls and committed with them (UpdateSettings'
// app_updates), the controller refusing any unit but the leader.

// appOf names a service's settings in a relation, in hookContext.seen:
// the unit field holds "app:" and the service, which no unit name is.
func appOf(relation int64, service string) settingsOf {
	return settingsOf{relation, "app:" + service}
}

// AppRelationGet returns service's settings in relation rid: read once a
// hook, and the unit's own service's with the hook's relation-set --app
// calls.
func (hc *hookContext) AppRelationGet(ctx context.Context, rid, service string) (map[string]string, error) {
	id, _, err := hc.relation(rid)
	if err != nil {
		return nil, err
	}
	key := appOf(id, service)
	hc.mu.Lock()
	seen, ok := hc.seen[key]
	hc.mu.Unlock()
	if !ok {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		resp, err := hc.a.cfg.API.ReadSettings(cctx, &pb.ReadSettingsRequest{Relation: id, Service: service})
		cancel()
		if err != nil {
			return nil, fmt.Errorf("read the settings of service %s in %s: %w", service, rid, err)
		}
		seen = resp.Settings
		if seen == nil {
			seen = map[string]string{}
		}
		hc.mu.Lock()
		if old, ok := hc.seen[key]; ok {
			seen = old
		} else {
			hc.seen[key] = seen
		}
		hc.mu.Unlock()
	}
	out := maps.Clone(seen)
	hc.mu.Lock()
	defer hc.mu.Unlock()
	if c := hc.appSet[id]; c != nil && service == hc.service() {
		maps.Copy(out, c.Set)
		for _, k := range c.Unset {
			delete(out, k)
		}
	}
	return out, nil
}

// service is the unit's service.
func (hc *hookContext) service() string {
	return names.UnitService(hc.a.cfg.Unit)
}

// AppRelationSet buffers changes to the unit's service's settings in
// relation rid, committed with the hook's other settings if it succeeds.
// The tool asked whether the unit leads; the controller checks again
// when they are committed.
func (hc *hookContext) AppRelationSet(_ context.Context, rid string, set map[string]string, unset []string) error {
	return hc.bufferSettings(rid, set, unset, true)
}
