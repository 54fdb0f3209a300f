package unitagent_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// TestHookOrder follows a principal through its life beside a related
// service: the order of its hooks is the contract with charm authors.
func TestHookOrder(t *testing.T) {
	w := newWorld(t)
	w.deploy(kvMeta, 2, "server")
	w.deploy(appMeta, 1, "db")
	resp, err := w.op.AddRelation(w.env.Ctx, &pb.AddRelationRequest{Endpoints: []string{"app", "kv"}})
	if err != nil {
		t.Fatal(err)
	}
	db := fmt.Sprintf("db:%d", resp.Relation.Id)
	for _, u := range []string{"kv/0", "app/0"} {
		w.start(u)
	}
	w.waitFor("app/0 to have joined kv/0", func() bool { return index(w.hooks("app/0"), "db-relation-changed "+db+" kv/0") >= 0 })

	w.start("kv/1")
	w.waitFor("app/0 to have joined kv/1", func() bool { return index(w.hooks("app/0"), "db-relation-changed "+db+" kv/1") >= 0 })
	if _, err := w.op.DestroyUnit(w.env.Ctx, &pb.DestroyUnitRequest{Unit: "kv/1"}); err != nil {
		t.Fatal(err)
	}
	w.waitFor("app/0 to see kv/1 depart", func() bool { return index(w.hooks("app/0"), "db-relation-departed "+db+" kv/1") >= 0 })
	w.waitFor("kv/1 to be dead", func() bool {
		u, err := w.env.State.Unit(w.env.Ctx, "kv/1")
		return err == nil && u.Life == pb.Life_LIFE_DEAD
	})
	if _, err := w.op.DestroyUnit(w.env.Ctx, &pb.DestroyUnitRequest{Unit: "app/0"}); err != nil {
		t.Fatal(err)
	}
	w.waitFor("app/0 to be dead", func() bool {
		u, err := w.env.State.Unit(w.env.Ctx, "app/0")
		return err == nil && u.Life == pb.Life_LIFE_DEAD
	})
	got := w.hooks("app/0")
	t.Logf("app/0 ran:\n  %s", strings.Join(got, "\n  "))
	want := []string{
		"install - -",
		"db-relation-created " + db + " -",
		"config-changed - -",
		"start - -",
		"db-relation-joined " + db + " kv/0",
		"db-relation-changed " + db + " kv/0",
		"db-relation-joined " + db + " kv/1",
		"db-relation-changed " + db + " kv/1",
		"db-relation-departed " + db + " kv/1",
		"db-relation-departed " + db + " kv/0",
		"db-relation-broken " + db + " -",
		"stop - -",
		"remove - -",
	}
	// kv/1's own settings changes may add relation-changed lines for it
	// before it departs; drop repeats of changed for the order check.
	var compact []string
	for i, l := range got {
		if i > 0 && l == got[i-1] && strings.Contains(l, "-relation-changed") {
			continue
		}
		compact = append(compact, l)
	}
	if !slices.Equal(compact, want) {
		t.Errorf("app/0's hooks =\n  %s\nwant\n  %s", strings.Join(compact, "\n  "), strings.Join(want, "\n  "))
	}
	// kv/1, destroyed alone, departed and broke nothing it was not in,
	// then stop and remove, then dead.
	kv1 := w.hooks("kv/1")
	if i, j := index(kv1, "server-relation-broken"), index(kv1, "stop"); i < 0 || j < i || index(kv1, "remove") < j {
		t.Errorf("kv/1's hooks = %v: want broken, then stop, then remove", kv1)
	}
}
