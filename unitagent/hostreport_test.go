package unitagent_test

import (
	"slices"
	"strings"
	"syscall"
	"testing"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// hostReport returns the unit's host report as the controller has it.
func (w *world) hostReport(unit string) *pb.HostReport {
	w.t.Helper()
	r, err := w.env.State.HostReport(w.env.Ctx, unit)
	if err != nil {
		w.t.Fatal(err)
	}
	return r
}

// TestHostReportAfterJobsAndDaemonChanges: after its host jobs the unit's
// agent reports its claims, the last job's tasks with their outcomes and
// its daemons; a daemon that dies and is started again is reported so.
func TestHostReportAfterJobsAndDaemonChanges(t *testing.T) {
	w := newWorld(t)
	h := w.withHost()
	w.deploy(claimsMeta, 1, "server")
	w.start("kv/0")
	w.waitState("kv/0", "running")
	var r *pb.HostReport
	w.waitFor("kv/0's report of its daemons' job", func() bool {
		r = w.hostReport("kv/0")
		return r.GetLastJob().GetJob() == "host-daemons" && r.GetDaemonsApplied() && len(r.GetDaemons()) == 2
	})
	dir := w.dir("kv/0")
	if c := r.Claims; !slices.Equal(c.Files, []string{dir + "/colour.conf", dir + "/fixed.conf"}) ||
		!slices.Equal(c.Daemons, []string{"painted", "plain"}) || len(c.Ports) != 0 || len(c.OpenedPorts) != 0 {
		t.Errorf("claims reported: %v", c)
	}
	if r.AppliedRevision != 1 {
		t.Errorf("applied revision reported: %d, want 1", r.AppliedRevision)
	}
	j := r.LastJob
	var tasks []string
	for _, tk := range j.Tasks {
		tasks = append(tasks, tk.Kind+" "+tk.Target+" "+tk.Outcome)
	}
	if want := []string{"run painted changed", "run plain changed"}; j.Run != 2 || j.Changed != 2 || j.Revision != 1 || !slices.Equal(tasks, want) || j.Failed != "" {
		t.Errorf("last job reported: %v (tasks %q), want 2 run, both changed: %q", j, tasks, want)
	}
	running := pids(h, "kv/0")
	for _, d := range r.Daemons {
		if d.State != "running" || d.Pid != int64(running[d.Name]) || d.Restarts != 0 || d.SinceUnixNano == 0 {
			t.Errorf("daemon reported: %v, want it running as pid %d", d, running[d.Name])
		}
	}

	// painted dies: the supervisor starts it again after its back-off,
	// and the report says so.
	if err := syscall.Kill(running["painted"], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	w.waitFor("kv/0's report of painted started again", func() bool {
		r = w.hostReport("kv/0")
		for _, d := range r.GetDaemons() {
			if d.Name == "painted" {
				return d.State == "running" && d.Restarts == 1 && d.Pid != int64(running["painted"]) && strings.Contains(d.LastExit, "killed")
			}
		}
		return false
	})
	if r.LastJob.GetJob() != "host-daemons" {
		t.Errorf("the last job reported after a daemon's restart: %v, want host-daemons still", r.LastJob)
	}
}

// TestOpenPortSurvivesARestart: ports a hook opened are the unit's from
// then on, kept across a restart of its agent, listed by opened-ports and
// reported with its claims; close-port closes one.
func TestOpenPortSurvivesARestart(t *testing.T) {
	w := newWorld(t)
	w.deploy(kvMeta, 1, "server")
	w.file("kv/0", "probe-install", "open-port 8080 && open-port 9000-9010/udp && open-port 8080/tcp && opened-ports")
	w.file("kv/0", "probe-start", "opened-ports --format json")
	w.start("kv/0")
	w.waitState("kv/0", "running")
	if got, want := w.lines("kv/0", "probe.log"), []string{"8080/tcp", "9000-9010/udp", `["8080/tcp","9000-9010/udp"]`}; !slices.Equal(got, want) {
		t.Fatalf("opened-ports said %q, want %q", got, want)
	}
	w.waitFor("kv/0's report of its opened ports", func() bool {
		return slices.Equal(w.hostReport("kv/0").GetClaims().GetOpenedPorts(), []string{"8080/tcp", "9000-9010/udp"})
	})

	w.stop("kv/0")
	w.file("kv/0", "probe-config-changed", "close-port 8080 && opened-ports")
	w.start("kv/0")
	w.setColour("blue")
	w.grant("kv", "kv/0")
	w.waitRevision("kv/0", w.target("kv"))
	if got, want := w.lines("kv/0", "probe.log"), []string{"8080/tcp", "9000-9010/udp", `["8080/tcp","9000-9010/udp"]`, "9000-9010/udp"}; !slices.Equal(got, want) {
		t.Errorf("opened-ports said %q after the restart, want %q", got, want)
	}
	w.waitFor("kv/0's report of its ports after close-port", func() bool {
		return slices.Equal(w.hostReport("kv/0").GetClaims().GetOpenedPorts(), []string{"9000-9010/udp"})
	})
}
