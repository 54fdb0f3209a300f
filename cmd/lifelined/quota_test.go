package main_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lifelinehq/lifeline/internal/embedetcd"
	"github.com/lifelinehq/lifeline/internal/pki"
	"github.com/lifelinehq/lifeline/internal/testing/e2etest"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// quota is the embedded member's quota in these tests: small, so that an
// attack that would fill the default 2 GiB in 80 s fills it in seconds.
const quota = 16 << 20

// attack is one unit's agent, with its real credential, rewriting its
// relation settings from 16 goroutines with 60 KiB values as fast as the
// controller answers, for at most a minute, until three quotas' worth is
// written or calls times that many calls are made, while another unit's agent on the same
// machine reads and reports its status every 100 ms. It returns what the
// flood's calls were answered and the other agent's probes.
func attack(t *testing.T, m *e2etest.ManualUnits, calls int) (e2etest.FloodResult, *e2etest.Latencies) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var probes e2etest.Latencies
	done := make(chan struct{})
	go func() { defer close(done); m.Probe(ctx, m.Units[1], 100*time.Millisecond, &probes) }()
	want := 3 * quota / (60 << 10)
	r := m.FloodSettings(ctx, m.Units[0], 16, 60<<10, want, calls*want)
	cancel()
	<-done
	n, p50, p99, worst, fails := probes.Summary()
	t.Logf("flood: %v", r)
	t.Logf("the other agent: %d probes, p50 %s, p99 %s, max %s, %d failed", n, p50, p99, worst, len(fails))
	return r, &probes
}

// storageMetrics reads the controller's view of etcd's space.
func storageMetrics(t *testing.T, metricsAddr string) (size, alarm float64) {
	t.Helper()
	size, alarm, err := tryStorageMetrics(metricsAddr)
	if err != nil {
		t.Fatal(err)
	}
	return size, alarm
}

// alarmGone says whether the controller at metricsAddr reports no NOSPACE
// alarm, for WaitFor (a controller still starting says no).
func alarmGone(metricsAddr string) func() (bool, string) {
	return func() (bool, string) {
		_, alarm, err := tryStorageMetrics(metricsAddr)
		if err != nil {
			return false, err.Error()
		}
		return alarm == 0, fmt.Sprintf("lifeline_etcd_nospace_alarm %v", alarm)
	}
}

func tryStorageMetrics(metricsAddr string) (size, alarm float64, err error) {
	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	page, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, 0, err
	}
	if size, err = e2etest.Metric(string(page), "lifeline_etcd_db_size_bytes"); err != nil {
		return 0, 0, err
	}
	alarm, err = e2etest.Metric(string(page), "lifeline_etcd_nospace_alarm")
	return size, alarm, err
}

// TestOneUnitCannotFillEtcd makes the attack that filled the embedded
// member's 2 GiB in 80 s and froze the model for good, against a real
// controller with a 16 MiB quota: the unit's credential runs out of
// budget and its calls are refused as ResourceExhausted with a sentence,
// the database stays below its quota with no alarm, the other agent's
// calls keep being answered, and the operator can still destroy.
func TestOneUnitCannotFillEtcd(t *testing.T) {
	dir := t.TempDir()
	metricsAddr, _ := startController(t, dir, "--etcd-quota-bytes", "16MiB")
	m := e2etest.AddManualUnits(t, filepath.Join(dir, "client.json"), 2)
	r, probes := attack(t, m, 1)
	if r.Refused == 0 || !strings.Contains(r.Refusal, "is over its budget of") {
		t.Errorf("the flood was never refused for its budget: %v", r)
	}
	if len(r.Other) > 0 {
		t.Errorf("the flood's calls had answers other than OK and ResourceExhausted: %v", r)
	}
	if _, _, _, _, fails := probes.Summary(); len(fails) > 0 {
		t.Errorf("the other agent's calls failed %d times during the flood, first: %v", len(fails), fails[0])
	}
	if size, alarm := storageMetrics(t, metricsAddr); alarm != 0 || size >= quota {
		t.Errorf("after the flood etcd's database is %.0f bytes of %d, NOSPACE alarm %v; want below the quota, no alarm", size, quota, alarm)
	}
	destroyAttacker(t, dir, m)
}

// TestCompactionKeepsUpWithoutBudgets makes the same attack with the
// budgets off: the member's compaction and defragmentation keep its
// database within the quota, and while it is near the quota the
// controller refuses the writes that would add to the model (the flood's
// and the other agent's reports) rather than let etcd fill and freeze;
// every call is answered, the other agent's reads among them, and the
// operator can still destroy.
func TestCompactionKeepsUpWithoutBudgets(t *testing.T) {
	dir := t.TempDir()
	metricsAddr, _ := startController(t, dir, "--etcd-quota-bytes", "16MiB",
		"--agent-writes-per-second", "0", "--agent-write-bytes-per-minute", "0")
	m := e2etest.AddManualUnits(t, filepath.Join(dir, "client.json"), 2)
	// The calls refused while compaction catches up are answered at
	// once: they must not use up the flood.
	r, probes := attack(t, m, 20)
	if r.OK*(60<<10) < 2*quota {
		t.Errorf("the flood wrote %d settings in a minute, want two quotas' worth at least for the test to mean anything: %v", r.OK, r)
	}
	if len(r.Other) > 0 {
		t.Errorf("the flood's calls had answers other than OK and ResourceExhausted: %v", r)
	}
	if r.Refused > 0 && !strings.Contains(r.Refusal, "etcd's database is nearly full") {
		t.Errorf("the flood was refused for another reason than the storage: %v", r)
	}
	_, _, _, _, fails := probes.Summary()
	for _, err := range fails {
		if status.Code(err) != codes.ResourceExhausted {
			t.Errorf("the other agent's call failed: %v", err)
			break
		}
	}
	// Within the next looks, the space is back.
	poll.Within(t, "etcd's database out of the quota's reserve, no alarm", time.Minute, func() (bool, string) {
		size, alarm := storageMetrics(t, metricsAddr)
		return alarm == 0 && size < quota-quota/10, ""
	})
	destroyAttacker(t, dir, m)
}

// destroyAttacker has the operator destroy the attacking unit.
func destroyAttacker(t *testing.T, dir string, m *e2etest.ManualUnits) {
	t.Helper()
	op := operatorOf(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := op.DestroyUnit(ctx, &pb.DestroyUnitRequest{Unit: m.Units[0], Force: true}); err != nil {
		t.Errorf("the operator's DestroyUnit of %s after the flood = %v, want it done", m.Units[0], err)
	}
}

// operatorOf dials the controller of dir's client config as the
// operator; the connection closes when the test ends.
func operatorOf(t *testing.T, dir string) pb.OperatorServiceClient {
	t.Helper()
	cfg, err := pki.ReadClientConfig(filepath.Join(dir, "client.json"))
	if err != nil {
		t.Fatal(err)
	}
	return operator(t, cfg)
}

// fillMember starts the controller's embedded member on its own, the
// controller stopped, and writes to it until it refuses a write for want
// of space (its NOSPACE alarm): 64 KiB versions of one key when history
// is set (what compaction frees), else 64 KiB keys of their own (what it
// cannot). Keys of their own are written again after a defragmentation
// that gave back enough of the file for the controller to disarm the
// alarm (how much the file's free pages hold varies with how etcd
// batched the writes), until one does not.
func fillMember(t *testing.T, dir string, history bool) {
	t.Helper()
	srv, err := embedetcd.Start(embedetcd.Config{Dir: filepath.Join(dir, "ctl", "etcd"), NoFsync: true, QuotaBytes: quota, CompactionRetention: "0"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	c, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// A bound for a stall: a loaded machine takes more than a minute.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	v := strings.Repeat("x", 64<<10)
	for i := range 4 * quota / len(v) {
		key := "/filler"
		if !history {
			key = fmt.Sprintf("/filler/%d", i)
		}
		_, err := c.Put(ctx, key, v)
		if errors.Is(err, rpctypes.ErrNoSpace) {
			if sp := srv.Space(); !sp.NoSpace {
				t.Fatalf("the member refused a write for want of space without its alarm: %+v", sp)
			}
			if history {
				return
			}
			if _, err := c.Defragment(ctx, srv.Endpoint()); err != nil {
				t.Fatal(err)
			}
			if sp := srv.Space(); sp.Size >= sp.Quota-sp.Quota/20 {
				return
			}
			members, err := c.MemberList(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.AlarmDisarm(ctx, &clientv3.AlarmMember{MemberID: members.Members[0].ID, Alarm: etcdserverpb.AlarmType_NOSPACE}); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Fatalf("four quotas' worth written and the member still takes writes")
}

// modelStatus asks the controller of dir for the model's status, waiting for
// it to answer.
func modelStatus(t *testing.T, dir string) *pb.ModelStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := operatorOf(t, dir).Status(ctx, &pb.StatusRequest{}, waitForReady()...)
	if err != nil {
		t.Fatalf("Status of the controller on a full member: %v", err)
	}
	return resp.Status
}

// TestControllerStartsOnAFullMember restarts a controller on an embedded
// member in NOSPACE, which made a controller exit 3 s after starting
// (store the model's CA: database space exceeded): it starts and serves
// the status, and where compaction and defragmentation free the space it
// disarms the alarm by itself, after which the operator destroys and adds
// again. Where they cannot (the model's own keys fill the quota) it
// serves the status with the alarm until restarted with a larger quota.
func TestControllerStartsOnAFullMember(t *testing.T) {
	t.Run("history fills it", func(t *testing.T) {
		dir := t.TempDir()
		_, cfg, stop := startStoppable(t, dir, 0, "--etcd-quota-bytes", "16MiB")
		m := e2etest.AddManualUnits(t, filepath.Join(dir, "client.json"), 2)
		stop()
		fillMember(t, dir, true)

		// Where the client config says it is.
		metricsAddr, _, stop := startStoppable(t, dir, 0, "--etcd-quota-bytes", "16MiB", "--api-addr", cfg.Controllers[0])
		if st := modelStatus(t, dir); len(st.Machines) != 1 {
			t.Errorf("status on a full member shows %d machines, want 1", len(st.Machines))
		}
		poll.Within(t, "the NOSPACE alarm disarmed", time.Minute, alarmGone(metricsAddr))
		if st := modelStatus(t, dir); len(st.Alarms) != 0 {
			t.Errorf("status alarms once disarmed = %q, want none", st.Alarms)
		}
		destroyAttacker(t, dir, m)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := operatorOf(t, dir).AddUnits(ctx, &pb.AddUnitsRequest{Service: "qcli", NumUnits: 1, To: m.Machine}); err != nil {
			t.Errorf("AddUnits once the space is back = %v, want it done", err)
		}
		log := stop()
		for _, want := range []string{"etcd's database is full (its NOSPACE alarm)", "disarmed etcd's NOSPACE alarm"} {
			if !strings.Contains(log, want) {
				t.Errorf("the controller's log does not say %q", want)
			}
		}
	})
	t.Run("the model fills it", func(t *testing.T) {
		dir := t.TempDir()
		_, cfg, stop := startStoppable(t, dir, 0, "--etcd-quota-bytes", "16MiB")
		m := e2etest.AddManualUnits(t, filepath.Join(dir, "client.json"), 2)
		stop()
		fillMember(t, dir, false)

		_, _, stop = startStoppable(t, dir, 0, "--etcd-quota-bytes", "16MiB", "--api-addr", cfg.Controllers[0])
		st := modelStatus(t, dir)
		if len(st.Alarms) != 1 || !strings.Contains(st.Alarms[0], "etcd's database is full (its NOSPACE alarm") {
			t.Errorf("status alarms on a member the model fills = %q, want the NOSPACE alarm", st.Alarms)
		}
		if len(st.Machines) != 1 {
			t.Errorf("status on a full member shows %d machines, want 1", len(st.Machines))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := operatorOf(t, dir).AddUnits(ctx, &pb.AddUnitsRequest{Service: "qcli", NumUnits: 1, To: m.Machine})
		if s, _ := status.FromError(err); s.Code() != codes.ResourceExhausted || !strings.Contains(s.Message(), "etcd's database is full") {
			t.Errorf("AddUnits on a full member = %v, want ResourceExhausted saying the database is full", err)
		}
		// etcd refuses the destroy's puts, and says so.
		_, err = operatorOf(t, dir).DestroyUnit(ctx, &pb.DestroyUnitRequest{Unit: m.Units[0]})
		if s, _ := status.FromError(err); s.Code() != codes.ResourceExhausted || !strings.Contains(s.Message(), "database space exceeded") {
			t.Errorf("DestroyUnit on a member the model fills = %v, want ResourceExhausted saying etcd's database is full", err)
		}
		stop()

		// Twice the quota: the keys fit with room to spare.
		metricsAddr, _, _ := startStoppable(t, dir, 0, "--etcd-quota-bytes", "32MiB", "--api-addr", cfg.Controllers[0])
		poll.Within(t, "the NOSPACE alarm disarmed under the larger quota", time.Minute, alarmGone(metricsAddr))
		destroyAttacker(t, dir, m)
	})
}
