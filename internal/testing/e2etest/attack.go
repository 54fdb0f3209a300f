package e2etest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lifelinehq/lifeline/internal/apiclient"
	"github.com/lifelinehq/lifeline/internal/charm"
	"github.com/lifelinehq/lifeline/internal/pki"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// ManualUnits are agents' credentials for the tests of what one agent can
// do to a controller: a manual machine added to the model (its credential
// from its join token, as its agent would have it) and units of a service
// on it, each with the credential the machine's agent asks for, each in
// the scope of a relation, as a unit agent would be once started. No agent
// process runs: the test calls as them.
type ManualUnits struct {
	// Machine is the manual machine's id, and Units the units on it.
	Machine string
	Units   []string
	// Relation is the relation whose scope the units are in.
	Relation int64

	conn  *grpc.ClientConn
	creds map[string]pki.Credential // by unit; the machine's under ""
}

// AddManualUnits adds the charms qsrv (provides db) and qcli (requires
// db), related, and n units of qcli on a new manual machine, through the
// controller the client config at configPath names; the connection closes
// when the test ends.
func AddManualUnits(t testing.TB, configPath string, n int) *ManualUnits {
	t.Helper()
	cfg, err := pki.ReadClientConfig(configPath)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := apiclient.Dial(apiclient.FromClientConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ac := apiclient.FromClientConfig(cfg)
	ac.Credential = pki.Credential{}
	conn, err := apiclient.Dial(ac)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	op := pb.NewOperatorServiceClient(admin)
	for name, meta := range map[string]string{
		"qsrv": "name: qsrv\nsummary: serves db\nprovides:\n  db: qdb\n",
		"qcli": "name: qcli\nsummary: uses db\nrequires:\n  db: qdb\n",
	} {
		if err := uploadCharm(ctx, op, t.TempDir(), meta); err != nil {
			t.Fatalf("upload %s: %v", name, err)
		}
		if _, err := op.Deploy(ctx, &pb.DeployRequest{Charm: name}); err != nil {
			t.Fatalf("deploy %s: %v", name, err)
		}
	}
	rel, err := op.AddRelation(ctx, &pb.AddRelationRequest{Endpoints: []string{"qcli:db", "qsrv:db"}})
	if err != nil {
		t.Fatalf("relate qcli and qsrv: %v", err)
	}
	ms, err := op.AddMachines(ctx, &pb.AddMachinesRequest{NumMachines: 1, Manual: true})
	if err != nil {
		t.Fatalf("add a manual machine: %v", err)
	}
	joined, err := JoinMachine(ctx, ms.JoinTokens[0])
	if err != nil {
		t.Fatal(err)
	}
	m := &ManualUnits{Machine: ms.Machines[0].Id, Relation: rel.Relation.Id, conn: conn,
		creds: map[string]pki.Credential{"": {Tag: joined.Tag, Secret: joined.Secret}}}
	us, err := op.AddUnits(ctx, &pb.AddUnitsRequest{Service: "qcli", NumUnits: int32(n), To: m.Machine})
	if err != nil {
		t.Fatalf("add %d units to machine %s: %v", n, m.Machine, err)
	}
	for _, u := range us.Units {
		m.Units = append(m.Units, u.Name)
	}
	issued, err := m.MachineAgent().IssueUnitCredentials(ctx, &pb.IssueUnitCredentialsRequest{Units: m.Units})
	if err != nil {
		t.Fatalf("issue the units' credentials as machine %s: %v", m.Machine, err)
	}
	for _, c := range issued.Credentials {
		m.creds[c.Unit] = pki.Credential{Tag: c.Tag, Secret: c.Secret}
	}
	for _, u := range m.Units {
		if _, err := m.Agent(u).EnterScope(ctx, &pb.EnterScopeRequest{Relation: m.Relation, Unit: u}); err != nil {
			t.Fatalf("%s enters relation %d: %v", u, m.Relation, err)
		}
	}
	return m
}

// uploadCharm packs a charm of one metadata.yaml in dir and uploads it.
func uploadCharm(ctx context.Context, op pb.OperatorServiceClient, dir, meta string) error {
	if err := os.WriteFile(filepath.Join(dir, "metadata.yaml"), []byte(meta), 0o644); err != nil {
		return err
	}
	var buf bytes.Buffer
	info, err := charm.Pack(dir, &buf)
	if err != nil {
		return err
	}
	stream, err := op.UploadCharm(ctx)
	if err != nil {
		return err
	}
	if err := stream.Send(&pb.UploadCharmRequest{Part: &pb.UploadCharmRequest_Header{Header: &pb.UploadCharmHeader{Size: int64(buf.Len()), Sha256: info.SHA256}}}); err != nil {
		return err
	}
	if err := stream.Send(&pb.UploadCharmRequest{Part: &pb.UploadCharmRequest_Chunk{Chunk: buf.Bytes()}}); err != nil {
		return err
	}
	_, err = stream.CloseAndRecv()
	return err
}

// MachineAgent calls as the machine's agent.
func (m *ManualUnits) MachineAgent() pb.AgentServiceClient {
	return pb.NewAgentServiceClient(apiclient.As(m.conn, m.creds[""]))
}

// Agent calls as the unit's agent.
func (m *ManualUnits) Agent(unit string) pb.AgentServiceClient {
	return pb.NewAgentServiceClient(apiclient.As(m.conn, m.creds[unit]))
}

// FloodResult is what a flood's calls were answered.
type FloodResult struct {
	// Calls counts the calls made, OK those done, Refused those answered
	// ResourceExhausted, whose first sentence is Refusal, Aborted those
	// that conflicted with the flood's other writers too often; Other
	// counts the rest by code.
	Calls, OK, Refused, Aborted int
	Refusal                     string
	Other                       map[codes.Code]int
	// FirstOther is the first of the other answers.
	FirstOther error
}

func (r FloodResult) String() string {
	var other []string
	for c, n := range r.Other {
		other = append(other, fmt.Sprintf("%s %d", c, n))
	}
	sort.Strings(other)
	return fmt.Sprintf("%d calls: %d OK, %d refused (%q), %d aborted, other: %s (first: %v)", r.Calls, r.OK, r.Refused, r.Refusal, r.Aborted, strings.Join(other, ", "), r.FirstOther)
}

// Add returns what r and o were answered together.
func (r FloodResult) Add(o FloodResult) FloodResult {
	out := FloodResult{Calls: r.Calls + o.Calls, OK: r.OK + o.OK, Refused: r.Refused + o.Refused, Aborted: r.Aborted + o.Aborted,
		Refusal: r.Refusal, Other: map[codes.Code]int{}, FirstOther: r.FirstOther}
	if out.Refusal == "" {
		out.Refusal = o.Refusal
	}
	if out.FirstOther == nil {
		out.FirstOther = o.FirstOther
	}
	for _, m := range []map[codes.Code]int{r.Other, o.Other} {
		for c, n := range m {
			out.Other[c] += n
		}
	}
	return out
}

// FloodSettings has writers goroutines rewrite unit's settings in its
// relation with size-byte values, each call a new value, as fast as the
// controller answers, until ctx ends, want calls have been taken or max
// calls are made. A refused call is answered at once, so a flood that
// must write a given amount (whatever the controller refuses on the way)
// sets max well above want. Each call has a minute to be answered,
// whatever is left of ctx.
func (m *ManualUnits) FloodSettings(ctx context.Context, unit string, writers, size, want, max int) FloodResult {
	c := m.Agent(unit)
	var mu sync.Mutex
	r := FloodResult{Other: map[codes.Code]int{}}
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				mu.Lock()
				if r.Calls >= max || r.OK >= want || ctx.Err() != nil {
					mu.Unlock()
					return
				}
				r.Calls++
				mu.Unlock()
				v := fmt.Sprintf("%d-%d-", w, i) + strings.Repeat("x", size)
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
				_, err := c.UpdateSettings(cctx, &pb.UpdateSettingsRequest{Unit: unit, Updates: []*pb.SettingsUpdate{{
					Relation: m.Relation, Set: map[string]string{"blob": v},
				}}})
				cancel()
				mu.Lock()
				switch code := status.Code(err); {
				case err == nil:
					r.OK++
				case code == codes.ResourceExhausted:
					r.Refused++
					if r.Refusal == "" {
						r.Refusal = status.Convert(err).Message()
					}
				case code == codes.Aborted:
					// The flood's writers conflict with each other
					// over the one key, past the State's retries.
					r.Aborted++
				default:
					r.Other[code]++
					if r.FirstOther == nil {
						r.FirstOther = err
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return r
}

// Latencies are the durations of a prober's calls.
type Latencies struct {
	mu    sync.Mutex
	took  []time.Duration
	fails []error
}

// Probe calls as unit every interval until ctx ends, a read and a status
// report each time, recording how long each pair took and any failure.
func (m *ManualUnits) Probe(ctx context.Context, unit string, interval time.Duration, l *Latencies) {
	c := m.Agent(unit)
	t := time.NewTicker(interval)
	defer t.Stop()
	for i := 0; ; i++ {
		start := time.Now()
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := c.GetUnit(cctx, &pb.GetUnitRequest{Unit: unit})
		if err == nil {
			_, err = c.SetUnitStatus(cctx, &pb.SetUnitStatusRequest{Unit: unit, Kind: pb.UnitStatusKind_UNIT_STATUS_KIND_WORKLOAD,
				Status: &pb.Status{Status: "active", Message: fmt.Sprintf("probe %d", i)}})
		}
		cancel()
		if ctx.Err() != nil {
			return
		}
		l.mu.Lock()
		l.took = append(l.took, time.Since(start))
		if err != nil {
			l.fails = append(l.fails, err)
		}
		l.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Summary returns the number of probes, their p50, p99 and max, and the
// failures.
func (l *Latencies) Summary() (n int, p50, p99, maxTook time.Duration, fails []error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	took := append([]time.Duration(nil), l.took...)
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	if len(took) == 0 {
		return 0, 0, 0, 0, l.fails
	}
	at := func(q float64) time.Duration { return took[min(len(took)-1, int(q*float64(len(took))))] }
	return len(took), at(0.5), at(0.99), took[len(took)-1], append([]error(nil), l.fails...)
}

// errNoMetric says a metric is not on the page.
var errNoMetric = errors.New("no such metric")

// Metric returns the value of the sample named exactly (name and labels)
// on a Prometheus text page.
func Metric(page, sample string) (float64, error) {
	for _, line := range strings.Split(page, "\n") {
		if rest, ok := strings.CutPrefix(line, sample+" "); ok {
			var v float64
			if _, err := fmt.Sscan(rest, &v); err != nil {
				return 0, fmt.Errorf("metric %s: %q: %w", sample, rest, err)
			}
			return v, nil
		}
	}
	return 0, fmt.Errorf("%s: %w", sample, errNoMetric)
}
