package unitagent

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// settingsAPI answers ReadSettings from its settings, by unit (NotFound
// for a unit it has none of: not in the scope), counting the calls.
type settingsAPI struct {
	API
	mu       sync.Mutex
	settings map[string]map[string]string
	version  int64 // of every unit's settings
	reads    []string
}

func (f *settingsAPI) ReadSettings(_ context.Context, in *pb.ReadSettingsRequest, _ ...grpc.CallOption) (*pb.ReadSettingsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads = append(f.reads, in.GetUnit())
	s, ok := f.settings[in.GetUnit()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "unit %s has no settings in relation %d: it is not in its scope", in.GetUnit(), in.GetRelation())
	}
	return &pb.ReadSettingsResponse{Settings: maps.Clone(s), Version: f.version}, nil
}

// keptAgent is an agent of app/0 (a charm with hooks) in relation 4 with
// kv/0, kv/1 (delivered settings, saved) and kv/2 (joined, changed not
// yet run), its own settings known, all loaded from disk as after a
// restart.
func keptAgent(t *testing.T, api API) *Agent {
	t.Helper()
	dir := t.TempDir()
	s := newStateStore(dir)
	l, err := s.load()
	if err != nil {
		t.Fatal(err)
	}
	l.State, l.Started = StateRunning, true
	l.createRelation(4, "db")
	l.Relations[4].InScope = true
	l.setOwn(4, json.RawMessage(`{"private-address":"10.0.0.1"}`))
	l.setMember(4, "kv/0", 7, json.RawMessage(`{"port":"7000"}`))
	l.setMember(4, "kv/1", 8, json.RawMessage(`{"port":"7001"}`))
	l.setMember(4, "kv/2", 0, nil)
	if err := s.commit(l, commitSynced); err != nil {
		t.Fatal(err)
	}
	s = newStateStore(dir)
	if l, err = s.load(); err != nil {
		t.Fatal(err)
	}
	return &Agent{cfg: Config{Unit: "app/0", API: api}, logger: hclog.NewNullLogger(), store: s, l: l,
		hookNames: map[string]bool{"db-relation-departed": true}}
}

// TestHookReadsOneView: the rules by which a hook reads settings. A unit
// in the scope, as the agent last heard, is read from the controller,
// once a hook; one that has left is read as kept, without a call, and so
// is one the controller finds gone; a member whose relation-changed has
// not run reads as empty once gone; the unit's own settings are read as
// kept once it has left the scope (or before it entered); a unit
// relation-list does not name, and that is not departing, is refused.
func TestHookReadsOneView(t *testing.T) {
	api := &settingsAPI{settings: map[string]map[string]string{
		"kv/0":  {"port": "7100"},
		"app/0": {"private-address": "10.0.0.1", "colour": "red"},
	}}
	a := keptAgent(t, api)
	// kv/1 is departing: it, and kv/2, have left the scope; the agent
	// has not heard kv/2 go.
	r := &modelView{relations: map[int64]*relationView{4: {scoped: true, members: map[string]int64{"kv/0": 7, "kv/2": 3}}}}
	op := &hookOp{Hook: "db-relation-departed", Relation: 4, Endpoint: "db", Remote: "kv/1", Departing: "kv/1"}
	hc := newHookContext(a, op, r)
	get := func(unit string) string {
		v, err := hc.RelationGet(context.Background(), "db:4", unit)
		if err != nil {
			return "error: " + err.Error()
		}
		return fmt.Sprint(v)
	}
	if got, err := hc.RelationList(context.Background(), "db:4"); err != nil || !slices.Equal(got, []string{"kv/0", "kv/2"}) {
		t.Fatalf("relation-list = %v, %v; want kv/0 kv/2", got, err)
	}
	for _, c := range []struct {
		unit, want string
		reads      []string
	}{
		{"kv/0", "map[port:7100]", []string{"kv/0"}}, // in the scope: the controller's, fresher
		{"kv/0", "map[port:7100]", nil},              // the same for the rest of the hook
		{"kv/1", "map[port:7001]", nil},              // departing, left: as kept
		{"kv/2", "map[]", []string{"kv/2"}},          // gone at the controller, never delivered
		{"app/0", "map[colour:red private-address:10.0.0.1]", []string{"app/0"}},
		{"kv/3", "error: unit kv/3 is not a member of relation db:4", nil},
	} {
		api.reads = nil
		if got := get(c.unit); got != c.want || !slices.Equal(api.reads, c.reads) {
			t.Errorf("relation-get %s = %s reading %v at the controller, want %s reading %v", c.unit, got, api.reads, c.want, c.reads)
		}
	}

	// Started again, a hook in progress runs before the scope's watch
	// answers: the units relation-list names are read at the controller,
	// as kept only when it finds them gone.
	op = &hookOp{Hook: "db-relation-changed", Relation: 4, Endpoint: "db", Remote: "kv/2"}
	for _, r := range []*modelView{{relations: map[int64]*relationView{4: {members: map[string]int64{}}}}, {}} {
		hc = newHookContext(a, op, r)
		for _, c := range []struct{ unit, want string }{
			{"kv/0", "map[port:7100]"}, // in the scope
			{"kv/1", "map[port:7001]"}, // gone at the controller: as kept
			{"kv/2", "map[]"},          // gone, never delivered
		} {
			api.reads = nil
			if got := get(c.unit); got != c.want || !slices.Equal(api.reads, []string{c.unit}) {
				t.Errorf("relation-get %s before the scope's watch answered = %s reading %v at the controller, want %s reading it", c.unit, got, api.reads, c.want)
			}
		}
	}

	// Left the scope (relation-broken): its own settings as kept.
	a.l.Relations[4].InScope, a.l.Relations[4].Left = false, true
	op = &hookOp{Hook: "db-relation-broken", Relation: 4, Endpoint: "db"}
	hc = newHookContext(a, op, &modelView{relations: map[int64]*relationView{}})
	if err := hc.RelationSet(context.Background(), "db:4", map[string]string{"x": "1"}, nil); err != nil {
		t.Fatal(err)
	}
	api.reads = nil
	if got := get("app/0"); got != "map[private-address:10.0.0.1 x:1]" || len(api.reads) > 0 {
		t.Errorf("relation-get of its own after leaving = %s reading %v, want its own as kept, its relation-set calls over them, no read", got, api.reads)
	}

	// Not entered yet (relation-created): empty, but for its own calls.
	op = &hookOp{Hook: "db-relation-created", Relation: 5, Endpoint: "db"}
	hc = newHookContext(a, op, &modelView{relations: map[int64]*relationView{}})
	if got, err := hc.RelationGet(context.Background(), "db:5", "app/0"); err != nil || len(got) != 0 || len(api.reads) > 0 {
		t.Errorf("relation-get of its own before entering = %v, %v reading %v; want empty, no read", got, err, api.reads)
	}
}

// TestChangedDeliversWhatItRead: relation-changed reads the remote unit's
// settings once, before the hook, which sees them without a call of its
// own, and the agent keeps them; a unit that left meanwhile is not read
// (or, gone at the controller, read in vain) and the hook sees it as
// kept, which stays as it was; a charm without hooks reads nothing.
func TestChangedDeliversWhatItRead(t *testing.T) {
	for _, c := range []struct {
		name      string
		inScope   bool
		unheard   bool // the scope's watch has not answered
		atCtl     map[string]string
		noHooks   bool
		wantReads int
		wantSeen  string
		wantKept  string
	}{
		{name: "in the scope", inScope: true, atCtl: map[string]string{"port": "7200"}, wantReads: 1, wantSeen: "map[port:7200]", wantKept: `{"port":"7200"}`},
		{name: "gone at the controller", inScope: true, wantReads: 1, wantSeen: "map[port:7001]", wantKept: `{"port":"7001"}`},
		{name: "left as the agent heard", wantSeen: "<none>", wantKept: `{"port":"7001"}`},
		{name: "in the scope, not heard yet", unheard: true, atCtl: map[string]string{"port": "7200"}, wantReads: 1, wantSeen: "map[port:7200]", wantKept: `{"port":"7200"}`},
		{name: "gone, not heard yet", unheard: true, wantReads: 1, wantSeen: "map[port:7001]", wantKept: `{"port":"7001"}`},
		{name: "a charm without hooks", inScope: true, atCtl: map[string]string{"port": "7200"}, noHooks: true, wantSeen: "<none>", wantKept: `{"port":"7001"}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			api := &settingsAPI{settings: map[string]map[string]string{}}
			if c.atCtl != nil {
				api.settings["kv/1"] = c.atCtl
			}
			a := keptAgent(t, api)
			if c.noHooks {
				a.hookNames = map[string]bool{}
			}
			r := &modelView{relations: map[int64]*relationView{4: {scoped: !c.unheard, members: map[string]int64{"kv/0": 7}}}}
			if c.inScope {
				r.relations[4].members["kv/1"] = 9
			}
			op := &hookOp{Hook: "db-relation-changed", Relation: 4, Endpoint: "db", Remote: "kv/1", Version: 9}
			data, values, err := (&executor{a: a}).deliver(context.Background(), op, r)
			if err != nil {
				t.Fatal(err)
			}
			seen := "<none>"
			if values != nil {
				seen = fmt.Sprint(values)
			}
			if len(api.reads) != c.wantReads || seen != c.wantSeen {
				t.Errorf("deliver read %v and has the hook see %s, want %d reads and %s", api.reads, seen, c.wantReads, c.wantSeen)
			}
			op.Seen = data
			applySuccess(a.l, op)
			if err := a.record(commitSynced); err != nil {
				t.Fatal(err)
			}
			l, err := newStateStore(a.store.dir).load()
			if err != nil {
				t.Fatal(err)
			}
			kept, _, err := a.store.keptOf(l.Relations[4], 4, "kv/1")
			if err != nil {
				t.Fatal(err)
			}
			got, _ := json.Marshal(kept)
			if string(got) != c.wantKept || l.Relations[4].Members["kv/1"] != 9 {
				t.Errorf("kept after the hook: version %d, %s; want version 9, %s", l.Relations[4].Members["kv/1"], got, c.wantKept)
			}
		})
	}
}

// TestOwnSettingsFollowTheHooks: the unit's own settings kept are those
// it entered with, then each hook's committed relation-set calls; a
// change that changes nothing records nothing.
func TestOwnSettingsFollowTheHooks(t *testing.T) {
	a := keptAgent(t, &settingsAPI{})
	ex := &executor{a: a}
	if err := ex.wrote([]settingsChange{{Relation: 4, Set: map[string]string{"port": "1"}}, {Relation: 9, Set: map[string]string{"y": "2"}}}); err != nil {
		t.Fatal(err)
	}
	if err := ex.wrote([]settingsChange{{Relation: 4, Set: map[string]string{"port": "1"}}}); err != nil {
		t.Fatal(err)
	}
	if got := len(a.l.changes); got != 1 {
		t.Errorf("%d changes recorded, want 1: the second write changed nothing", got)
	}
	if err := ex.wrote([]settingsChange{{Relation: 4, Unset: []string{"private-address"}}}); err != nil {
		t.Fatal(err)
	}
	if err := a.record(commitSynced); err != nil {
		t.Fatal(err)
	}
	l, err := newStateStore(a.store.dir).load()
	if err != nil {
		t.Fatal(err)
	}
	if got := string(l.Relations[4].own); !strings.Contains(got, `"port":"1"`) || strings.Contains(got, "private-address") {
		t.Errorf("own settings loaded = %s, want port 1 and no private-address", got)
	}
}

// TestKeptSettingsStayOnDisk: once saved, members' settings are held in
// memory only as where they are on disk, in the journal and then in a
// snapshot, and read back from there as saved, whole; loading leaves them
// there too. 300 members delivered in one record (a charm without the
// relation-changed hook leaves them for one save) are copied into the
// snapshot from it.
func TestKeptSettingsStayOnDisk(t *testing.T) {
	dir := t.TempDir()
	s := newStateStore(dir)
	l, err := s.load()
	if err != nil {
		t.Fatal(err)
	}
	l.createRelation(3, "db")
	want := map[string]string{}
	for i := range 300 {
		u := fmt.Sprintf("bench/%d", i)
		v := fmt.Sprintf(`{"host":"10.0.%d.%d","blob":%q}`, i/250, i%250, strings.Repeat("x", i))
		l.setMember(3, u, int64(100+i), json.RawMessage(v))
		want[u] = v
	}
	check := func(what string, l *localState) {
		t.Helper()
		lr := l.Relations[3]
		if len(lr.kept) != len(want) {
			t.Fatalf("%s: %d kept, want %d", what, len(lr.kept), len(want))
		}
		r := newKeptReader(dir)
		defer r.close()
		for u, k := range lr.kept {
			if k.data != nil {
				t.Fatalf("%s: %s's settings are in memory, want them on disk only", what, u)
			}
			got, err := r.read(3, u, k)
			if err != nil || string(got) != want[u] {
				t.Fatalf("%s: %s's settings read %s, %v; want %s", what, u, got, err, want[u])
			}
		}
	}
	if err := s.commit(l, commitSynced); err != nil {
		t.Fatal(err)
	}
	check("in the journal", l)
	loaded, err := newStateStore(dir).load()
	if err != nil {
		t.Fatal(err)
	}
	check("loaded from the journal", loaded)
	s.rewrite = true
	l.setMember(3, "bench/0", 1000, json.RawMessage(`{"host":"again"}`))
	want["bench/0"] = `{"host":"again"}`
	if err := s.commit(l, commitSynced); err != nil {
		t.Fatal(err)
	}
	if s.journalBytes != 0 {
		t.Fatalf("the save wrote no snapshot")
	}
	check("in the snapshot", l)
	loaded, err = newStateStore(dir).load()
	if err != nil {
		t.Fatal(err)
	}
	check("loaded from the snapshot", loaded)
	l.departMember(3, "bench/1")
	delete(want, "bench/1")
	if err := s.commit(l, commitSynced); err != nil {
		t.Fatal(err)
	}
	loaded, err = newStateStore(dir).load()
	if err != nil {
		t.Fatal(err)
	}
	check("departed one", loaded)
}

// TestJoinedReadsForChanged: the read of the joining unit's settings
// starts as relation-joined runs, which reads them from it, and the
// relation-changed that follows uses it when it is of the version delivered or later (one read for
// both hooks), or reads again when the unit changed its settings since.
func TestJoinedReadsForChanged(t *testing.T) {
	for _, c := range []struct {
		name            string
		read, delivered int64
		wantReads       int
	}{
		{"the version delivered", 9, 9, 1},
		{"a later version", 10, 9, 1},
		{"an earlier version", 8, 9, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			api := &settingsAPI{settings: map[string]map[string]string{"kv/3": {"port": "7300"}}, version: c.read}
			a := keptAgent(t, api)
			ex := &executor{a: a}
			defer ex.endPrefetch()
			r := &modelView{relations: map[int64]*relationView{4: {scoped: true, members: map[string]int64{"kv/3": c.delivered}}}}
			joined := &hookOp{Hook: "db-relation-joined", Relation: 4, Endpoint: "db", Remote: "kv/3"}
			pre := ex.prefetchFor(context.Background(), joined, r)
			if pre == nil {
				t.Fatal("no read started for relation-joined")
			}
			hc := newHookContext(a, joined, r)
			hc.pre = pre
			if got, err := hc.RelationGet(context.Background(), "db:4", "kv/3"); err != nil || got["port"] != "7300" || len(api.reads) != 1 {
				t.Errorf("relation-get in relation-joined = %v, %v after %d reads; want port 7300 after the one", got, err, len(api.reads))
			}
			changed := &hookOp{Hook: "db-relation-changed", Relation: 4, Endpoint: "db", Remote: "kv/3", Version: c.delivered}
			data, values, err := ex.deliver(context.Background(), changed, r)
			if err != nil {
				t.Fatal(err)
			}
			if got := fmt.Sprint(values); len(api.reads) != c.wantReads || got != "map[port:7300]" || string(data) != `{"port":"7300"}` {
				t.Errorf("deliver = %s, %s with %d reads; want port 7300 with %d", data, got, len(api.reads), c.wantReads)
			}
			if ex.pre != nil {
				t.Errorf("the read started for relation-joined is still held")
			}
		})
	}
}
