package controller

import (
	"context"

	"google.golang.org/protobuf/proto"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// A service's settings in a relation (relation-get and relation-set
// --app, Juju's application databag): ReadSettings with a service reads
// them, UpdateSettings' app_updates write them, the watch subject
// relation_app_settings follows their versions.

// readAppSettings returns a service's settings in a relation the caller's
// service is in: its own service's or the other side's.
func (a *agentServer) readAppSettings(ctx context.Context, req *pb.ReadSettingsRequest) (*pb.ReadSettingsResponse, error) {
	c := callerFrom(ctx)
	id, service := req.GetRelation(), req.GetService()
	if req.GetUnit() != "" {
		return nil, invalid("read the settings of a unit or of a service, not both")
	}
	if err := checkServiceName(service); err != nil {
		return nil, err
	}
	rel, err := a.unitRelation(ctx, c, id, "read the settings of")
	if err != nil {
		return nil, err
	}
	if !relationHas(rel, service) {
		return nil, notFound("service %s is not in relation %d (%s)", service, id, rel.Key)
	}
	values, version, err := a.s.st.AppSettings(ctx, id, service)
	if err != nil {
		return nil, readErr(err, "read the settings of service %s in relation %d", service, id)
	}
	return &pb.ReadSettingsResponse{Settings: values, Version: version}, nil
}

// relationHas says whether service is one of rel's.
func relationHas(rel *pb.Relation, service string) bool {
	for _, ep := range rel.Endpoints {
		if ep.Service == service {
			return true
		}
	}
	return false
}

// appSettingsChanges checks a request's app_updates as UpdateSettings
// checks its updates, and makes them state's changes.
func appSettingsChanges(updates []*pb.SettingsUpdate) ([]state.SettingsChange, error) {
	changes := make([]state.SettingsChange, len(updates))
	seen := map[int64]bool{}
	for i, u := range updates {
		if err := checkRelationID(u.GetRelation()); err != nil {
			return nil, err
		}
		if seen[u.GetRelation()] {
			return nil, invalid("the service's settings in relation %d are updated twice: merge the changes", u.GetRelation())
		}
		seen[u.GetRelation()] = true
		if proto.Size(u) > maxRecordBytes {
			return nil, invalid("service settings update of relation %d is %d bytes: at most %d", u.GetRelation(), proto.Size(u), maxRecordBytes)
		}
		changes[i] = state.SettingsChange{Relation: u.GetRelation(), Set: u.GetSet(), Unset: u.GetUnset()}
	}
	return changes, nil
}

// watchAppSettings is the watch of relation id's services' settings, for
// a unit of either side.
func (a *agentServer) watchAppSettings(ctx context.Context, c caller, id int64) (*watch, error) {
	if _, err := a.unitRelation(ctx, c, id, "watch the service settings of"); err != nil {
		return nil, err
	}
	return &watch{prefix: state.AppSettingsPrefix(id), trim: state.AppSettingsPrefix(id)}, nil
}
