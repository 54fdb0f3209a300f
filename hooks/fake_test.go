package hooks_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// fakeContext is an in-memory hooks.Context for unit kv/0: in relations
// db:2 (members pg/0, pg/1, pg/10), db:3 (no members) and website:11.
type fakeContext struct {
	mu       sync.Mutex
	settings map[string]map[string]map[string]string // relation → unit → settings
	members  map[string][]string
	config   map[string]*pb.ConfigValue
	status   [2]string

	// What the hook tools did.
	sets       []relationSet
	logs       [][2]string // level, message
	calls      int
	active     int  // calls running now
	overlapped bool // two calls ran at once

	// getStarted, when set, makes RelationGet signal it and wait for its
	// ctx to end.
	getStarted chan struct{}
}

type relationSet struct {
	relation string
	set      map[string]string
	unset    []string
}

func newFakeContext() *fakeContext {
	return &fakeContext{
		settings: map[string]map[string]map[string]string{
			"db:2": {
				"kv/0":  {"database": "kv"},
				"pg/0":  {"host": "10.0.0.1", "port": "5432"},
				"pg/1":  {"host": "10.0.0.2", "port": "5432", "note": "a: b\nc"},
				"pg/10": {},
			},
			"db:3":       {"kv/0": {}},
			"website:11": {"kv/0": {"url": "http://kv/?a=1&b=<2>"}},
		},
		members: map[string][]string{"db:2": {"pg/10", "pg/1", "pg/0"}, "db:3": nil, "website:11": nil},
		config: map[string]*pb.ConfigValue{
			"name":   {Value: &pb.ConfigValue_StringValue{StringValue: "kv store"}},
			"port":   {Value: &pb.ConfigValue_IntValue{IntValue: 8080}},
			"ratio":  {Value: &pb.ConfigValue_FloatValue{FloatValue: 0.5}},
			"debug":  {Value: &pb.ConfigValue_BoolValue{BoolValue: false}},
			"unset":  nil,
			"empty":  {},
			"banner": {Value: &pb.ConfigValue_StringValue{StringValue: ""}},
		},
		status: [2]string{"waiting", "for a database"},
	}
}

// enter and exit count calls, noting concurrent ones.
func (f *fakeContext) enter() func() {
	f.mu.Lock()
	f.calls++
	f.active++
	if f.active > 1 {
		f.overlapped = true
	}
	f.mu.Unlock()
	return func() {
		f.mu.Lock()
		f.active--
		f.mu.Unlock()
	}
}

func (f *fakeContext) UnitName() string { return "kv/0" }

func (f *fakeContext) RelationIDs(_ context.Context, endpoint string) ([]string, error) {
	defer f.enter()()
	var ids []string
	for id := range f.settings {
		if endpoint == "" || strings.HasPrefix(id, endpoint+":") {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	slices.Reverse(ids) // the tool sorts them
	return ids, nil
}

func (f *fakeContext) RelationGet(ctx context.Context, relationID, unit string) (map[string]string, error) {
	defer f.enter()()
	if f.getStarted != nil {
		close(f.getStarted)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	units, ok := f.settings[relationID]
	if !ok {
		return nil, fmt.Errorf("relation %s not found", relationID)
	}
	s, ok := units[unit]
	if !ok {
		return nil, fmt.Errorf("unit %s is not in relation %s", unit, relationID)
	}
	return maps.Clone(s), nil
}

func (f *fakeContext) RelationSet(_ context.Context, relationID string, set map[string]string, unset []string) error {
	defer f.enter()()
	if _, ok := f.settings[relationID]; !ok {
		return fmt.Errorf("relation %s not found", relationID)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sets = append(f.sets, relationSet{relationID, set, unset})
	return nil
}

func (f *fakeContext) RelationList(_ context.Context, relationID string) ([]string, error) {
	defer f.enter()()
	m, ok := f.members[relationID]
	if !ok {
		return nil, fmt.Errorf("relation %s not found", relationID)
	}
	return slices.Clone(m), nil
}

func (f *fakeContext) Config(context.Context) (map[string]*pb.ConfigValue, error) {
	defer f.enter()()
	return f.config, nil
}

func (f *fakeContext) UnitAddress(_ context.Context, kind string) (string, error) {
	defer f.enter()()
	if kind == "public-address" {
		return "kv.example.com", nil
	}
	return "10.1.2.3", nil
}

func (f *fakeContext) SetWorkloadStatus(_ context.Context, status, message string) error {
	defer f.enter()()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.status = [2]string{status, message}
	return nil
}

func (f *fakeContext) WorkloadStatus(context.Context) (string, string, error) {
	defer f.enter()()
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.status[0], f.status[1], nil
}

func (f *fakeContext) Log(level, message string) {
	defer f.enter()()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.logs = append(f.logs, [2]string{level, message})
}
