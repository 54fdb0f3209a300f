package unitagent_test

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/unitagent"
)

// readAll is a probe that prints, for the hook's remote unit and every
// unit relation-list names, the unit and its port and host, and this
// unit's own settings: "exit N" in probe.log tells of a tool that failed.
const readAll = `set -e
echo "$LIFELINE_HOOK_NAME ${LIFELINE_REMOTE_UNIT:--}: $(relation-list | tr '\n' ' ')"
for u in ${LIFELINE_REMOTE_UNIT:-} $(relation-list); do
  port=$(relation-get port "$u")
  host=$(relation-get host "$u")
  echo "  $u port=$port host=$host"
done
own=$(relation-get private-address "$LIFELINE_UNIT_NAME")
echo "  own $own"
`

// TestHooksReadUnitsThatLeft: a unit's hooks read every unit relation-list
// names, and the departing unit in relation-departed, whatever left the
// relation's scope (and had its settings deleted there) meanwhile, and
// their own settings once the unit left it too (relation-broken). app/0
// is related to three kv units, which publish host and port; its agent is
// killed (SIGKILL), the kv service destroyed, its units gone, and app/0's
// agent started again: it departs them one by one, each departed hook
// reading the ones not yet departed as last delivered, from what its
// killed agent kept on disk.
func TestHooksReadUnitsThatLeft(t *testing.T) {
	const kvs = 3
	w := newWorld(t)
	w.deploy(kvMeta, kvs, "server")
	w.deploy(appMeta, 1, "db")
	rel := relate(t, w, "app", "kv")
	for i := range kvs {
		u := "kv/" + strconv.Itoa(i)
		w.file(u, "set-settings", strconv.Itoa(7000+i))
		w.start(u)
	}
	w.file("app/0", "get-settings", "")
	p := w.spawn("app/0")
	w.waitFor("app/0 to be delivered every kv unit's host and port", func() bool {
		got := w.lines("app/0", "settings.log")
		for i := range kvs {
			if index(got, fmt.Sprintf("kv/%d host=10.0.0.kv-%d port=%d", i, i, 7000+i)) < 0 {
				return false
			}
		}
		return true
	})
	w.waitState("app/0", "running")
	p.kill()

	for _, h := range []string{"db-relation-departed", "db-relation-broken"} {
		w.file("app/0", "probe-"+h, readAll)
	}
	if _, err := w.op.DestroyService(w.env.Ctx, &pb.DestroyServiceRequest{Service: "kv"}); err != nil {
		t.Fatal(err)
	}
	for i := range kvs {
		if err := w.exited("kv/" + strconv.Itoa(i)); !errors.Is(err, unitagent.ErrDead) {
			t.Fatalf("kv/%d's agent returned %v, want ErrDead", i, err)
		}
	}
	for i := range kvs {
		if _, _, err := w.env.State.Settings(w.env.Ctx, rel.Id, "kv/"+strconv.Itoa(i)); err == nil {
			t.Fatalf("kv/%d still has settings in the relation, want them gone with it", i)
		}
	}

	w.spawn("app/0")
	w.waitHook("app/0", "db-relation-broken")
	want := []string{
		"db-relation-departed kv/0: kv/1 kv/2 ",
		"  kv/0 port=7000 host=10.0.0.kv-0",
		"  kv/1 port=7001 host=10.0.0.kv-1",
		"  kv/2 port=7002 host=10.0.0.kv-2",
		"  own 127.0.0.1",
		"db-relation-departed kv/1: kv/2 ",
		"  kv/1 port=7001 host=10.0.0.kv-1",
		"  kv/2 port=7002 host=10.0.0.kv-2",
		"  own 127.0.0.1",
		"db-relation-departed kv/2: ",
		"  kv/2 port=7002 host=10.0.0.kv-2",
		"  own 127.0.0.1",
		"db-relation-broken -: ",
		"  own 127.0.0.1",
	}
	if got := w.lines("app/0", "probe.log"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("app/0's hooks read\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestSubordinateReadsItsPrincipalThatLeft: in a container-scoped
// relation too, a unit departed after it left reads as last delivered.
// logger/0's agent is held down while its principal, app/0, is destroyed
// and leaves the relation's scope; started again, logger/0 departs app/0
// and reads its settings, and its own, then goes (app/0's agent, which
// waits for it, removes it).
func TestSubordinateReadsItsPrincipalThatLeft(t *testing.T) {
	w := newWorld(t)
	w.deploy(appMeta, 1, "db", "juju-info")
	w.deploy(loggerMeta, 0, "host")
	rel := relate(t, w, "app", "logger")
	w.start("app/0")
	host := fmt.Sprintf("host:%d", rel.Id)
	w.waitFor("logger/0 to be delivered app/0's settings", func() bool {
		return index(w.hooks("logger/0"), "host-relation-changed "+host+" app/0") >= 0
	})
	w.waitState("logger/0", "running")
	w.mu.Lock()
	w.held = map[string]bool{"logger/0": true}
	w.mu.Unlock()
	w.stop("logger/0")
	w.file("logger/0", "probe-host-relation-departed",
		`echo "$LIFELINE_REMOTE_UNIT $(relation-get private-address "$LIFELINE_REMOTE_UNIT") own $(relation-get private-address "$LIFELINE_UNIT_NAME")"`+"\n")

	if _, err := w.op.DestroyUnit(w.env.Ctx, &pb.DestroyUnitRequest{Unit: "app/0"}); err != nil {
		t.Fatal(err)
	}
	w.waitFor("app/0 to leave the relation's scope", func() bool {
		_, _, err := w.env.State.Settings(w.env.Ctx, rel.Id, "app/0")
		return err != nil
	})
	w.start("logger/0") // still held: the deployer does not start it too
	w.waitFor("logger/0 to be removed", func() bool {
		_, err := w.env.State.Unit(w.env.Ctx, "logger/0")
		return err != nil
	})
	want := "app/0 10.0.0.app-0 own 10.0.0.logger-0"
	if got := strings.Join(w.lines("logger/0", "probe.log"), "\n"); got != want {
		t.Errorf("logger/0's host-relation-departed read\n%s\nwant\n%s", got, want)
	}
}
