package faults

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/lifelinehq/lifeline/internal/apiclient"
	"github.com/lifelinehq/lifeline/internal/charm"
	"github.com/lifelinehq/lifeline/internal/pki"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// TestFuzzOperatorAPI sends random well-formed requests, with random
// names and values mixed with names the model has, to every
// OperatorService RPC from several clients at once: the controller does
// not panic, answers none of them with Internal or Unknown (an error it
// did not expect), still answers afterwards, and the invariants held at
// every revision. The controller runs the manual provider, so that the
// machines the requests add start nothing.
func TestFuzzOperatorAPI(t *testing.T) {
	skipWhenSoaking(t)
	runFuzzOperatorAPI(t, currentSizes())
}

func runFuzzOperatorAPI(t *testing.T, sz sizes) {
	r := newRun(t, "random well-formed requests to every OperatorService RPC", sz)
	r.size("clients", sz.fuzzClients)
	r.size("seconds", int(sz.fuzzFor.Seconds()))
	f := newFixture(t, fixtureOptions{monitor: true, coalesce: sz.monitorCoalesce(), provider: "manual"})
	f.startController(t)
	cfg, err := pki.ReadClientConfig(f.Config)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := apiclient.Dial(apiclient.FromClientConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	op := pb.NewOperatorServiceClient(conn)
	charms := packCharms(t)

	seed := *seedFlag
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("fuzz seed %d", seed)
	fz := &fuzzer{op: op, charms: charms, codes: map[string]map[codes.Code]int{}, ownHash: pki.HashSecret(cfg.Secret),
		pool: map[string][]string{"service": {"fnode", "fsrv", "fsub"}, "unit": {"fnode/0"}, "machine": {"0"}, "charm": {"fnode", "fsrv", "fsub"}, "user": {"admin"}}}
	deadline := time.Now().Add(sz.fuzzFor)
	hardDeadline := deadline.Add(2 * time.Minute)
	var wg sync.WaitGroup
	for i := range sz.fuzzClients {
		rnd := rand.New(rand.NewPCG(seed, uint64(i)))
		wg.Go(func() {
			// Past the deadline, until every RPC has been called (within
			// a bound): a slow machine makes few calls in the time.
			for time.Now().Before(deadline) || time.Now().Before(hardDeadline) && len(fz.missed()) > 0 {
				fz.call(rnd)
			}
		})
	}
	wg.Wait()
	r.inject("random requests sent")
	fz.report(t, r)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := op.Status(ctx, &pb.StatusRequest{}); err != nil {
		t.Errorf("after the fuzzing, Status: %v", err)
	} else {
		r.checked("the controller still answers Status")
	}
	f.checkModel(t, r)
	f.checkNoPanic(t, r)
}

// packCharms packs the test charms, and a few made-up ones with random
// names and endpoints.
func packCharms(t *testing.T) [][]byte {
	t.Helper()
	var out [][]byte
	pack := func(dir string) {
		var buf bytes.Buffer
		if _, err := charm.Pack(dir, &buf); err != nil {
			t.Fatalf("pack %s: %v", dir, err)
		}
		out = append(out, buf.Bytes())
	}
	for _, name := range []string{"fnode", "fsrv", "fsub"} {
		pack(testCharm(name))
	}
	// The demo kv charm has actions, for the operations' RPCs.
	pack(demoCharm("kv"))
	dir := t.TempDir()
	for i, meta := range []string{
		"name: fz-a\nsummary: s\nprovides:\n  db: fault-db\n  web: http\nrequires:\n  cache: kv\npeers:\n  ring: fz-ring\n",
		"name: fz-b\nsummary: s\nrequires:\n  db: fault-db\n  up: http\n",
		"name: fz-sub\nsummary: s\nsubordinate: true\nrequires:\n  host:\n    interface: lifeline-info\n    scope: container\n",
	} {
		d := filepath.Join(dir, strconv.Itoa(i))
		if err := os.MkdirAll(filepath.Join(d, "hooks"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "metadata.yaml"), []byte(meta), 0o644); err != nil {
			t.Fatal(err)
		}
		opts := "options:\n  n:\n    type: int\n    default: 1\n  s:\n    type: string\n  b:\n    type: boolean\n  f:\n    type: float\n"
		if err := os.WriteFile(filepath.Join(d, "config.yaml"), []byte(opts), 0o644); err != nil {
			t.Fatal(err)
		}
		pack(d)
	}
	return out
}

// fuzzer makes random requests and counts how they were answered.
type fuzzer struct {
	op     pb.OperatorServiceClient
	charms [][]byte
	// ownHash is the hash of the fuzzer's own secret: the one
	// credential it may rotate to and go on calling.
	ownHash string

	fresh atomic.Int64 // numbers new service names

	mu    sync.Mutex
	pool  map[string][]string // names the model has had, by kind
	codes map[string]map[codes.Code]int
	bad   []string // requests answered Internal or Unknown
}

func (fz *fuzzer) remember(kind string, names ...string) {
	fz.mu.Lock()
	defer fz.mu.Unlock()
	for _, n := range names {
		if len(fz.pool[kind]) < 200 && !contains(fz.pool[kind], n) {
			fz.pool[kind] = append(fz.pool[kind], n)
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func (fz *fuzzer) known(rnd *rand.Rand, kind string) string {
	fz.mu.Lock()
	defer fz.mu.Unlock()
	list := fz.pool[kind]
	if len(list) == 0 {
		return ""
	}
	return list[rnd.IntN(len(list))]
}

// selectors are a status's names of kind: none, a few, or more than the
// controller takes.
func (fz *fuzzer) selectors(rnd *rand.Rand, kind string) []string {
	n := rnd.IntN(3)
	if rnd.IntN(10) == 0 {
		n = 101
	}
	out := make([]string, n)
	for i := range out {
		out[i] = fz.name(rnd, kind)
	}
	return out
}

// name is a name of kind: one the model has had, or made up.
func (fz *fuzzer) name(rnd *rand.Rand, kind string) string {
	if rnd.IntN(2) == 0 {
		return fz.known(rnd, kind)
	}
	return randomString(rnd)
}

// randomString is a made-up string: name-like, unit-like, numeric, empty,
// long, path-like, or of arbitrary characters.
func randomString(rnd *rand.Rand) string {
	const lower = "abcdefghijklmnopqrstuvwxyz"
	word := func(n int) string {
		var b strings.Builder
		for range n {
			b.WriteByte(lower[rnd.IntN(len(lower))])
		}
		return b.String()
	}
	switch rnd.IntN(12) {
	case 0:
		return ""
	case 1:
		return word(1 + rnd.IntN(12))
	case 2:
		return word(1+rnd.IntN(6)) + "-" + word(1+rnd.IntN(6)) + strconv.Itoa(rnd.IntN(10))
	case 3:
		return word(1+rnd.IntN(6)) + "/" + strconv.Itoa(rnd.IntN(20)-2)
	case 4:
		return []string{"0", "-1", "007", "1e3", "99999999999999999999", "4294967296", " 1", "1 "}[rnd.IntN(8)]
	case 5:
		return strings.Repeat(word(1), 100+rnd.IntN(5000))
	case 6:
		return []string{"../x", "a/b/c", "/", "a//b", "a/", "/a", ".", "..", "a:b", "a:b:c", ":", "a b", "a\tb", "a\x00b", "A", "fnode/0/0", "fnode:db"}[rnd.IntN(17)]
	case 7:
		return word(2) + string(rune(0x80+rnd.IntN(0x2000)))
	default:
		var b strings.Builder
		for range rnd.IntN(30) {
			switch rnd.IntN(4) {
			case 0:
				b.WriteRune(rune(rnd.IntN(0x80)))
			case 1:
				b.WriteRune(rune(0x80 + rnd.IntN(0xD000)))
			case 2:
				b.WriteRune(rune(0x10000 + rnd.IntN(0x10000)))
			default:
				b.WriteByte(lower[rnd.IntN(len(lower))])
			}
		}
		return b.String()
	}
}

// count is a number of units or machines: small mostly, sometimes at the
// edges (the controller refuses over 1000 at once, so exactly 1000, which
// it would take, is never sent).
func count32(rnd *rand.Rand) int32 {
	if rnd.IntN(4) == 0 {
		return []int32{math.MinInt32, -1000, -1, 0, 1001, 5000, math.MaxInt32}[rnd.IntN(7)]
	}
	return int32(rnd.IntN(4))
}

func int64Edge(rnd *rand.Rand) int64 {
	if rnd.IntN(3) == 0 {
		return []int64{math.MinInt64, -1, 0, 1, 1 << 40, math.MaxInt64}[rnd.IntN(6)]
	}
	return rnd.Int64N(100000) - 100
}

func (fz *fuzzer) settings(rnd *rand.Rand) map[string]string {
	out := map[string]string{}
	for range rnd.IntN(4) {
		key := []string{"fail-percent", "marker", "n", "s", "b", "f"}[rnd.IntN(6)]
		if rnd.IntN(3) == 0 {
			key = randomString(rnd)
		}
		val := []string{"0", "1", "-5", "true", "false", "1.5", "x", "", "NaN", "1e400", "99999999999999999999"}[rnd.IntN(11)]
		if rnd.IntN(3) == 0 {
			val = randomString(rnd)
		}
		out[key] = val
	}
	return out
}

func (fz *fuzzer) endpoints(rnd *rand.Rand) []string {
	n := 2
	if rnd.IntN(5) == 0 {
		n = rnd.IntN(5)
	}
	var out []string
	for range n {
		ep := fz.name(rnd, "service")
		if rnd.IntN(2) == 0 {
			ep = fz.known(rnd, "service")
		}
		if rnd.IntN(2) == 0 {
			ep += ":" + []string{"db", "host", "ring", "web", "cache", "up", "lifeline-info", randomString(rnd)}[rnd.IntN(8)]
		}
		out = append(out, ep)
	}
	return out
}

// call makes one random request and counts its answer.
func (fz *fuzzer) call(rnd *rand.Rand) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var (
		rpc string
		req proto.Message
		err error
	)
	switch rnd.IntN(24) {
	case 0:
		rpc, req = "Status", &pb.StatusRequest{}
		switch rnd.IntN(3) {
		case 0:
			req = &pb.StatusRequest{Services: fz.selectors(rnd, "service"), Units: fz.selectors(rnd, "unit"), Machines: fz.selectors(rnd, "machine")}
		case 1:
			// The controllers alone; with a selector now and then, refused.
			req = &pb.StatusRequest{ControllersOnly: true}
			if rnd.IntN(4) == 0 {
				req.(*pb.StatusRequest).Services = fz.selectors(rnd, "service")
			}
		}
		_, err = fz.op.Status(ctx, req.(*pb.StatusRequest))
	case 1:
		rpc = "WatchStatus"
		in := &pb.WatchStatusRequest{IntervalMs: int64Edge(rnd)}
		if rnd.IntN(2) == 0 {
			in.Services, in.Units, in.Machines = fz.selectors(rnd, "service"), fz.selectors(rnd, "unit"), fz.selectors(rnd, "machine")
		}
		req = in
		err = fz.watchStatus(ctx, in)
	case 2, 3:
		rpc = "UploadCharm"
		req, err = fz.upload(ctx, rnd)
	case 4:
		rpc = "Deploy"
		in := &pb.DeployRequest{Charm: fz.name(rnd, "charm"), Service: fz.name(rnd, "service"), NumUnits: count32(rnd), Config: fz.settings(rnd)}
		switch rnd.IntN(4) {
		case 0:
			in.Revision = int64Edge(rnd)
		case 1:
			in.To = fz.name(rnd, "machine")
		}
		if rnd.IntN(2) == 0 {
			// A deploy that may well be taken: a charm the model has, a
			// new service, a few units, settings of the right types.
			in.Charm = fz.known(rnd, "charm")
			in.Service = fmt.Sprintf("s%d", fz.fresh.Add(1))
			in.NumUnits = int32(rnd.IntN(4))
			in.Config = map[string]string{}
			if rnd.IntN(2) == 0 {
				in.Config["marker"] = randomString(rnd)
			}
		}
		if rnd.IntN(3) == 0 {
			in.Service = ""
		}
		req = in
		var resp *pb.DeployResponse
		if resp, err = fz.op.Deploy(ctx, in); err == nil {
			fz.remember("service", resp.GetService().GetName())
			for _, u := range resp.Units {
				fz.remember("unit", u.Name)
				fz.remember("machine", u.MachineId)
			}
		}
	case 5:
		rpc = "AddUnits"
		in := &pb.AddUnitsRequest{Service: fz.name(rnd, "service"), NumUnits: count32(rnd)}
		if rnd.IntN(2) == 0 {
			in.Service, in.NumUnits = fz.known(rnd, "service"), 1+int32(rnd.IntN(3))
		}
		if rnd.IntN(3) == 0 {
			in.To = fz.name(rnd, "machine")
		}
		req = in
		var resp *pb.AddUnitsResponse
		if resp, err = fz.op.AddUnits(ctx, in); err == nil {
			for _, u := range resp.Units {
				fz.remember("unit", u.Name)
				fz.remember("machine", u.MachineId)
			}
		}
	case 6:
		if rnd.IntN(3) == 0 {
			rpc = "IssueJoinToken"
			in := &pb.IssueJoinTokenRequest{Machine: fz.name(rnd, "machine")}
			if rnd.IntN(2) == 0 {
				in.TtlMs = int64Edge(rnd)
			}
			req = in
			_, err = fz.op.IssueJoinToken(ctx, in)
			break
		}
		rpc = "AddMachines"
		in := &pb.AddMachinesRequest{NumMachines: count32(rnd), Manual: rnd.IntN(2) == 0}
		if rnd.IntN(3) == 0 {
			in.JoinTokenTtlMs = int64Edge(rnd)
		}
		req = in
		var resp *pb.AddMachinesResponse
		if resp, err = fz.op.AddMachines(ctx, in); err == nil {
			for _, m := range resp.Machines {
				fz.remember("machine", m.Id)
			}
		}
	case 7:
		rpc = "AddRelation"
		in := &pb.AddRelationRequest{Endpoints: fz.endpoints(rnd)}
		req = in
		_, err = fz.op.AddRelation(ctx, in)
	case 8:
		rpc = "DestroyRelation"
		in := &pb.DestroyRelationRequest{Endpoints: fz.endpoints(rnd)}
		req = in
		_, err = fz.op.DestroyRelation(ctx, in)
	case 9:
		rpc = "DestroyUnit"
		in := &pb.DestroyUnitRequest{Unit: fz.name(rnd, "unit"), Force: rnd.IntN(2) == 0}
		if rnd.IntN(2) == 0 {
			w := int64Edge(rnd)
			in.MaxWaitMs = &w
		}
		req = in
		_, err = fz.op.DestroyUnit(ctx, in)
	case 10:
		rpc = "DestroyMachine"
		in := &pb.DestroyMachineRequest{Machine: fz.name(rnd, "machine"), Force: rnd.IntN(2) == 0}
		if rnd.IntN(2) == 0 {
			w := int64Edge(rnd)
			in.MaxWaitMs = &w
		}
		req = in
		_, err = fz.op.DestroyMachine(ctx, in)
	case 11:
		rpc = "DestroyService"
		in := &pb.DestroyServiceRequest{Service: fz.name(rnd, "service")}
		req = in
		_, err = fz.op.DestroyService(ctx, in)
	case 12:
		rpc = "Resolved"
		in := &pb.ResolvedRequest{Unit: fz.name(rnd, "unit"), NoRetry: rnd.IntN(2) == 0}
		req = in
		_, err = fz.op.Resolved(ctx, in)
	case 13:
		if rnd.IntN(2) == 0 {
			rpc = "GetConfig"
			in := &pb.GetConfigRequest{Service: fz.name(rnd, "service")}
			req = in
			_, err = fz.op.GetConfig(ctx, in)
		} else {
			rpc = "SetConfig"
			in := &pb.SetConfigRequest{Service: fz.name(rnd, "service"), Set: fz.settings(rnd)}
			for range rnd.IntN(3) {
				in.Unset = append(in.Unset, []string{"marker", "fail-percent", "n", randomString(rnd)}[rnd.IntN(4)])
			}
			req = in
			_, err = fz.op.SetConfig(ctx, in)
		}
	case 16:
		rpc = "AddController"
		in := &pb.AddControllerRequest{ValidForMs: int64Edge(rnd)}
		req = in
		_, err = fz.op.AddController(ctx, in)
	case 14:
		rpc = "ShowStatusLog"
		in := &pb.ShowStatusLogRequest{Unit: fz.name(rnd, "unit"), Limit: int32(int64Edge(rnd))}
		req = in
		_, err = fz.op.ShowStatusLog(ctx, in)
	case 15:
		rpc = "DestroyMachines"
		in := &pb.DestroyMachinesRequest{Force: rnd.IntN(2) == 0}
		for range rnd.IntN(6) {
			in.Machines = append(in.Machines, fz.name(rnd, "machine"))
		}
		if rnd.IntN(2) == 0 {
			w := int64Edge(rnd)
			in.MaxWaitMs = &w
		}
		req = in
		var resp *pb.DestroyMachinesResponse
		resp, err = fz.op.DestroyMachines(ctx, in)
		// Each machine's answer counts as a call's would.
		for _, r := range resp.GetResults() {
			if c := codes.Code(r.GetCode()); c == codes.Internal || c == codes.Unknown {
				err = status.Error(c, r.GetMessage())
			}
		}
	case 17:
		rpc = "Barrier"
		in := &pb.BarrierRequest{AtLeast: int64Edge(rnd)}
		if rnd.IntN(2) == 0 {
			in.AtLeast = 0
		}
		req = in
		_, err = fz.op.Barrier(ctx, in)
	case 18:
		rpc, req, err = fz.userCall(ctx, rnd)
	case 19:
		rpc = "Audit"
		in := &pb.AuditRequest{User: fz.name(rnd, "user"), Limit: int32(int64Edge(rnd))}
		switch rnd.IntN(4) {
		case 0:
			in.Entity = fz.name(rnd, []string{"service", "unit", "machine"}[rnd.IntN(3)])
		case 1:
			in.SinceUnixNano = int64Edge(rnd)
		case 2:
			in.User = ""
		}
		if rnd.IntN(3) == 0 {
			in.Rpc = []string{"Deploy", "resolved", randomString(rnd)}[rnd.IntN(3)]
		}
		req = in
		err = fz.audit(ctx, in)
	case 20, 21:
		rpc, req, err = fz.operationCall(ctx, rnd)
	case 22:
		rpc, req, err = fz.revisionCall(ctx, rnd)
	case 23:
		rpc, req, err = fz.showCall(ctx, rnd)
	}
	code := status.Code(err)
	fz.mu.Lock()
	defer fz.mu.Unlock()
	if fz.codes[rpc] == nil {
		fz.codes[rpc] = map[codes.Code]int{}
	}
	fz.codes[rpc][code]++
	if code == codes.Internal || code == codes.Unknown {
		text := prototext.Format(req)
		if len(text) > 300 {
			text = text[:300] + "..."
		}
		fz.bad = append(fz.bad, fmt.Sprintf("%s(%s): %v", rpc, text, err))
	}
}

func (fz *fuzzer) watchStatus(ctx context.Context, in *pb.WatchStatusRequest) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	stream, err := fz.op.WatchStatus(ctx, in)
	if err != nil {
		return err
	}
	_, err = stream.Recv()
	return err
}

// upload sends a charm: one of the packed ones, or random bytes, with a
// header true or false, chunks as declared or not.
func (fz *fuzzer) upload(ctx context.Context, rnd *rand.Rand) (proto.Message, error) {
	data := fz.charms[rnd.IntN(len(fz.charms))]
	if rnd.IntN(4) == 0 {
		data = make([]byte, rnd.IntN(4096))
		for i := range data {
			data[i] = byte(rnd.IntN(256))
		}
	}
	sum := sha256.Sum256(data)
	h := &pb.UploadCharmHeader{Size: int64(len(data)), Sha256: hex.EncodeToString(sum[:])}
	switch rnd.IntN(6) {
	case 0:
		h.Size = int64Edge(rnd)
	case 1:
		h.Sha256 = randomString(rnd)
	case 2:
		h.Sha256 = ""
	}
	stream, err := fz.op.UploadCharm(ctx)
	if err != nil {
		return h, err
	}
	if rnd.IntN(10) != 0 { // sometimes no header at all
		if err := stream.Send(&pb.UploadCharmRequest{Part: &pb.UploadCharmRequest_Header{Header: h}}); err != nil {
			_, err = stream.CloseAndRecv()
			return h, err
		}
	}
	for len(data) > 0 {
		n := min(len(data), 1+rnd.IntN(64<<10))
		if err := stream.Send(&pb.UploadCharmRequest{Part: &pb.UploadCharmRequest_Chunk{Chunk: data[:n]}}); err != nil {
			break
		}
		data = data[n:]
	}
	if rnd.IntN(10) == 0 { // a header again, after the chunks
		_ = stream.Send(&pb.UploadCharmRequest{Part: &pb.UploadCharmRequest_Header{Header: h}})
	}
	resp, err := stream.CloseAndRecv()
	if err == nil {
		fz.remember("charm", resp.GetCharm().GetName())
	}
	return h, err
}

// report records the answers and fails the test on Internal or Unknown
// ones.
// missed lists the RPCs of the service, as its descriptor lists them,
// that the fuzzer has yet to call.
func (fz *fuzzer) missed() []string {
	fz.mu.Lock()
	defer fz.mu.Unlock()
	return fz.missedLocked()
}

func (fz *fuzzer) missedLocked() []string {
	var missed []string
	desc := pb.OperatorService_ServiceDesc
	for _, m := range desc.Methods {
		if fz.codes[m.MethodName] == nil {
			missed = append(missed, m.MethodName)
		}
	}
	for _, st := range desc.Streams {
		if fz.codes[st.StreamName] == nil {
			missed = append(missed, st.StreamName)
		}
	}
	return missed
}

func (fz *fuzzer) report(t *testing.T, r *run) {
	t.Helper()
	fz.mu.Lock()
	defer fz.mu.Unlock()
	var rpcs []string
	total := 0
	for rpc := range fz.codes {
		rpcs = append(rpcs, rpc)
	}
	sort.Strings(rpcs)
	byCode := map[codes.Code]int{}
	for _, rpc := range rpcs {
		n := 0
		var parts []string
		for code, k := range fz.codes[rpc] {
			n += k
			byCode[code] += k
			parts = append(parts, fmt.Sprintf("%s %d", code, k))
		}
		sort.Strings(parts)
		total += n
		r.count("calls: "+rpc, n)
		t.Logf("%s: %d calls: %s", rpc, n, strings.Join(parts, ", "))
	}
	for code, k := range byCode {
		r.count("answers: "+code.String(), k)
	}
	r.count("calls", total)
	// Every RPC of the service, as its descriptor lists them, is called.
	missed := fz.missedLocked()
	desc := pb.OperatorService_ServiceDesc
	if n := len(desc.Methods) + len(desc.Streams); len(missed) > 0 || len(rpcs) != n {
		t.Errorf("the fuzzer called %d of the %d RPCs (%v), never %v", len(rpcs), n, rpcs, missed)
	}
	for i, b := range fz.bad {
		if i == 10 {
			t.Errorf("... and %d more", len(fz.bad)-10)
			break
		}
		t.Errorf("answered with an unexpected error: %s", b)
	}
	if len(fz.bad) == 0 {
		r.checked("no request answered Internal or Unknown")
	}
}
