package unitagent_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestHookToolsAreConfined: a hook cannot read a relation its unit is not
// in, and a hook tool call with a context id whose hook has ended is
// refused.
func TestHookToolsAreConfined(t *testing.T) {
	w := newWorld(t)
	w.deploy(kvMeta, 1, "server")
	w.deploy(appMeta, 1, "db")
	w.deploy("name: other\nrequires:\n  db: kv\n", 1, "db")
	rel := relate(t, w, "other", "kv") // app/0 is not in it
	w.file("app/0", "probe-start", fmt.Sprintf(`
echo "ids: $(relation-ids)"
relation-get -r db:%d - kv/0 && echo "read it"
relation-list -r db:%d
echo "$LIFELINE_AGENT_SOCKET $LIFELINE_CONTEXT_ID" > "$LIFELINE_CHARM_DIR/../context"
config-get colour
`, rel.Id, rel.Id))
	w.start("app/0")
	w.waitState("app/0", "running")
	probe := strings.Join(w.lines("app/0", "probe.log"), "\n")
	t.Logf("probe.log:\n%s", probe)
	for _, want := range []string{"ids: \n", "unknown relation", "red"} {
		if !strings.Contains(probe+"\n", want) {
			t.Errorf("probe.log lacks %q", want)
		}
	}
	if strings.Contains(probe, "read it") {
		t.Errorf("a hook read the settings of a relation its unit is not in")
	}

	// The start hook is over: its context id is stale.
	data, err := os.ReadFile(filepath.Join(w.dir("app/0"), "context"))
	if err != nil {
		t.Fatal(err)
	}
	socket, id, _ := strings.Cut(strings.TrimSpace(string(data)), " ")
	cmd := exec.Command(filepath.Join(toolsDir, "config-get"), "colour")
	cmd.Env = []string{"LIFELINE_AGENT_SOCKET=" + socket, "LIFELINE_CONTEXT_ID=" + id}
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "context expired") {
		t.Errorf("config-get with a stale context = %v, %q; want refused, context expired", err, out)
	}
}
