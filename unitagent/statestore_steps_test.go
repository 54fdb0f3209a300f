package unitagent

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// The steps the state store's tests take, and how they compare states.

// canon is a state's content, for comparisons: its head, its members,
// and the settings kept, read from dir where saved.
func canon(t testing.TB, l *localState, dir string) string {
	t.Helper()
	head, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	members := map[int64]map[string]int64{}
	kept := map[int64]map[string]string{}
	r := newKeptReader(dir)
	defer r.close()
	for id, lr := range l.Relations {
		members[id] = lr.Members
		k := map[string]string{}
		for u, ks := range lr.kept {
			data, err := r.read(id, u, ks)
			if err != nil {
				t.Fatal(err)
			}
			k[u] = string(data)
		}
		if lr.own != nil {
			k["(own)"] = string(lr.own)
		}
		if len(k) > 0 {
			kept[id] = k
		}
	}
	m, err := json.Marshal(members)
	if err != nil {
		t.Fatal(err)
	}
	k, err := json.Marshal(kept)
	if err != nil {
		t.Fatal(err)
	}
	return string(head) + " " + string(m) + " " + string(k)
}

// settingsAt returns settings for step i: none (nil) a third of the
// time, else a JSON object, of a few kilobytes now and then.
func settingsAt(r *rand.Rand, i int) json.RawMessage {
	switch r.IntN(12) {
	case 0, 1, 2, 3:
		return nil
	case 4:
		return json.RawMessage(fmt.Sprintf(`{"blob":%q}`, strings.Repeat("x", 2000+i%100)))
	case 5:
		return json.RawMessage(`{}`)
	}
	return json.RawMessage(fmt.Sprintf(`{"host":"10.0.0.%d","port":"%d"}`, i%250, 7000+i))
}

// step changes l as the agent might in its i-th step, the same way for
// the same i: a configuration version that grows with i, members joining,
// changing and departing, hooks starting and finishing, a second relation
// created and broken.
func step(l *localState, i int) {
	r := rand.New(rand.NewPCG(uint64(i), 1))
	l.Revision = int64(i)
	if l.Relations[1] == nil {
		l.createRelation(1, "db")
		l.State = StateRunning
	}
	unit := fmt.Sprintf("bench/%d", r.IntN(1000))
	switch k := r.IntN(20); {
	case k < 12:
		v := int64(r.IntN(3))
		var settings json.RawMessage
		if v > 0 {
			settings = settingsAt(r, i)
		}
		l.setMember(1, unit, v, settings)
	case k < 14:
		l.departMember(1, unit)
	case k < 16:
		l.Op = &hookOp{Hook: "db-relation-changed", Relation: 1, Endpoint: "db", Remote: unit, Version: int64(i), Step: stepRunning,
			Settings: []settingsChange{{Relation: 1, Set: map[string]string{"port": strconv.Itoa(i)}}}}
	case k < 17:
		l.Op = nil
		if s := settingsAt(r, i); s != nil {
			l.setOwn(1, s)
		}
	default:
		switch lr := l.Relations[2]; {
		case lr == nil:
			l.createRelation(2, "peer")
		case r.IntN(5) == 0:
			l.breakRelation(2)
		case r.IntN(5) == 0:
			l.createRelation(2, "peer") // created again: its members cleared
		case r.IntN(5) == 0:
			l.breakRelation(2) // broken and created again in one save
			l.createRelation(2, "peer")
			l.setMember(2, "front/9", int64(i), nil)
		default:
			l.setMember(2, "front/"+strconv.Itoa(r.IntN(5)), int64(i), settingsAt(r, i))
		}
	}
}

// states returns the states after steps 1..n from a new state, by the
// content canon gives.
func states(t testing.TB, n int) []string {
	l := newLocalState()
	out := []string{canon(t, l, "")}
	for i := 1; i <= n; i++ {
		step(l, i)
		out = append(out, canon(t, l, ""))
	}
	return out
}

func loadCanon(t *testing.T, dir string) (string, *localState, *stateStore) {
	t.Helper()
	s := newStateStore(dir)
	l, err := s.load()
	if err != nil {
		t.Fatal(err)
	}
	return canon(t, l, dir), l, s
}
