package main

import (
	"fmt"
	"io"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/lifelinehq/lifeline/internal/testing/cputime"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// benchStatus is a status as the controller answers it for the scale
// harness's model: units of kv on 1,000 machines, each in scope of its
// relation to app's one unit, idle and active.
func benchStatus(units int) *pb.ModelStatus {
	const machines = 1000
	st := &pb.ModelStatus{Revision: 1234567}
	for m := range machines {
		st.Machines = append(st.Machines, &pb.MachineStatus{Id: fmt.Sprint(m), Life: "alive", Agent: "started",
			Address: fmt.Sprintf("10.0.%d.%d", m/250, m%250), Since: 1764700000000000000})
	}
	kv := &pb.ServiceStatus{Name: "kv", Charm: "kv", Revision: 1, Life: "alive", Status: "active", SpecRevision: 1}
	rel := &pb.RelationStatus{Id: 1, Key: "app:db kv:server", Life: "alive", Scope: "global"}
	for i := range units {
		u := &pb.UnitStatus{Name: fmt.Sprintf("kv/%d", i), Life: "alive", Machine: fmt.Sprint(i % machines),
			Agent: "idle", Workload: "active", Message: "serving on 10.0.0.1:8080", Revision: 1,
			AgentSince: 1764700000000000000 + int64(i), WorkloadSince: 1764700000000000000 + int64(i)}
		kv.Units = append(kv.Units, u)
		st.Machines[i%machines].Units = append(st.Machines[i%machines].Units, u.Name)
		rel.Units = append(rel.Units, u.Name)
	}
	st.Services = append(st.Services, kv)
	st.Relations = append(st.Relations, rel)
	return st
}

// BenchmarkStatusJSON times what ctl status --format json does with the
// controller's answer at 100,000 units: decode it, build the document,
// write it.
func BenchmarkStatusJSON(b *testing.B) {
	wire, err := proto.Marshal(benchStatus(100_000))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(len(wire)), "wire-bytes")
	cpu0 := cputime.Process()
	for b.Loop() {
		st := &pb.ModelStatus{}
		if err := proto.Unmarshal(wire, st); err != nil {
			b.Fatal(err)
		}
		if err := renderStatusWith(io.Discard, st, formatJSON, statusLook{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((cputime.Process()-cpu0).Milliseconds())/float64(b.N), "cpu-ms/op")
}
