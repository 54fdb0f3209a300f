package machineagent_test

import (
	"context"
	"github.com/lifelinehq/lifeline/internal/testing/poll"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lifelinehq/lifeline/internal/testing/controllertest"
	"github.com/lifelinehq/lifeline/internal/testing/statetest"
	"github.com/lifelinehq/lifeline/machineagent"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// TestReplacedUnitCredential: a running unit's credential is issued again
// behind its agent's back, with its machine's credential, as anyone
// holding that credential can; its watch stream then breaks (the
// controller restarts), and a change of its configuration follows. The
// unit agent's subscriptions, made again with the credential replaced, are
// refused: its machine agent has a new credential issued, the unit agent
// goes on with it, and the change reaches it. When no new credential can
// be had, the unit shows unauthenticated, saying why, until one can.
func TestReplacedUnitCredential(t *testing.T) {
	for _, c := range []struct {
		name string
		// refuse makes IssueUnitCredentials fail after the unit's first
		// credential, until the unit shows unauthenticated.
		refuse bool
	}{
		{name: "issued again"},
		{name: "cannot be issued again", refuse: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := controllertest.New(t, controllertest.Options{Cleaner: true})
			// Units move to a new revision holding a permit.
			statetest.Roll(t, env.State)
			op := env.Operator()
			env.Upload(op, "testdata/conf")
			ms, err := env.State.AddMachines(env.Ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			m := ms[0].Id
			if _, err := op.Deploy(env.Ctx, &pb.DeployRequest{Charm: "conf", NumUnits: 1, To: m}); err != nil {
				t.Fatal(err)
			}
			api := &issueGate{credCounter: credCounter{AgentServiceClient: env.Agent("machine-" + m)}}
			dir := runMachine(t, env, m, api)
			greetings := filepath.Join(dir, "units", "conf-0", "greetings")
			greeted := func(word string) func() bool {
				return func() bool {
					b, _ := os.ReadFile(greetings)
					return strings.Contains(string(b), word)
				}
			}
			poll.Until(t, "config-changed to run with the default greeting", greeted("hello"))
			unit := func() *pb.UnitStatus {
				st, err := op.Status(env.Ctx, &pb.StatusRequest{})
				if err != nil {
					t.Fatal(err)
				}
				return st.Status.Services[0].Units[0]
			}
			poll.Until(t, "conf/0 idle", func() bool { return unit().Agent == "idle" })

			// The attack: the unit's credential issued again, as the
			// machine; the agent's stream breaks.
			if _, err := api.AgentServiceClient.IssueUnitCredentials(env.Ctx, &pb.IssueUnitCredentialsRequest{Units: []string{"conf/0"}}); err != nil {
				t.Fatal(err)
			}
			api.refuse.Store(c.refuse)
			env.Stop()
			env.Start()
			op = env.Operator() // on a connection to the controller started again
			if _, err := op.SetConfig(env.Ctx, &pb.SetConfigRequest{Service: "conf", Set: map[string]string{"greeting": "bonjour"}}); err != nil {
				t.Fatal(err)
			}
			if c.refuse {
				poll.Until(t, "conf/0 unauthenticated", func() bool { return unit().Agent == "unauthenticated" })
				u := unit()
				if want := "cannot have a new one issued: too many credentials"; !strings.Contains(u.Message, want) || u.State != "running" {
					t.Errorf("conf/0 = agent %s, state %s, message %q; want its state running and a message with %q", u.Agent, u.State, u.Message, want)
				}
				if greeted("bonjour")() {
					t.Error("the change reached conf/0 without a credential the controller accepts")
				}
				api.refuse.Store(false)
			}
			poll.Until(t, "the change to reach conf/0", greeted("bonjour"))
			poll.Until(t, "conf/0 idle again", func() bool { return unit().Agent == "idle" })
			if n, refused := api.issued.Load(), api.refused.Load(); n != 2 {
				t.Errorf("the machine agent had %d credentials issued for conf/0 (and %d refused), want 2: at start, and once it was refused", n, refused)
			}
		})
	}
}

// issueGate is a machine agent's real client whose IssueUnitCredentials
// refuses, as a controller over its budget would, while refuse is set.
type issueGate struct {
	credCounter
	refuse  atomic.Bool
	refused atomic.Int32
}

func (g *issueGate) IssueUnitCredentials(ctx context.Context, in *pb.IssueUnitCredentialsRequest, opts ...grpc.CallOption) (*pb.IssueUnitCredentialsResponse, error) {
	if g.refuse.Load() {
		g.refused.Add(1)
		return nil, status.Error(codes.ResourceExhausted, "too many credentials")
	}
	return g.credCounter.IssueUnitCredentials(ctx, in, opts...)
}

// runMachine runs machine m's agent with api until the test ends, and
// returns its data directory.
func runMachine(t *testing.T, env *controllertest.Env, m string, api machineagent.API) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ll-m-") // short: the hook tool socket is in it
	if err != nil {
		t.Fatal(err)
	}
	a, err := machineagent.New(machineagent.Config{
		MachineID: m, DataDir: dir, Address: "127.0.0.1", API: api, DialUnit: dialUnits(env),
		Lifelined: lifelined, Logger: hclog.NewNullLogger(),
	})
	if err != nil {
		os.RemoveAll(dir)
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		os.RemoveAll(dir)
	})
	return dir
}
