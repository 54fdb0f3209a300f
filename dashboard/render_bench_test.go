package dashboard

import (
	"fmt"
	"io"
	"testing"

	"github.com/lifelinehq/lifeline/internal/testing/cputime"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// syntheticStatus is a model of units units in services of 500, on
// machines of 10 each, a few in error and some dying, as Status returns
// it.
func syntheticStatus(units int) *pb.ModelStatus {
	st := &pb.ModelStatus{Revision: 123456}
	for m := range (units + 9) / 10 {
		ms := &pb.MachineStatus{Id: fmt.Sprint(m), Life: "alive", Agent: "started", Address: fmt.Sprintf("10.0.%d.%d", m/250, m%250)}
		st.Machines = append(st.Machines, ms)
	}
	for s := 0; s*500 < units; s++ {
		svc := &pb.ServiceStatus{Name: fmt.Sprintf("svc%d", s), Charm: "kv", Revision: 3, Life: "alive", Status: "active"}
		for i := 0; i < 500 && s*500+i < units; i++ {
			n := s*500 + i
			u := &pb.UnitStatus{Name: fmt.Sprintf("%s/%d", svc.Name, i), Life: "alive", Machine: fmt.Sprint(n / 10),
				Agent: "idle", Workload: "active", Message: "serving on port 7070"}
			switch {
			case n%97 == 0:
				u.Agent, u.State, u.Message = "error", "config-changed-error", `hook failed: "config-changed" (retry 2 of 5 in 5s)`
			case n%53 == 0:
				u.Life, u.WaitingFor = "dying", []string{"its agent to run stop and remove", "leaving relation db"}
			}
			svc.Units = append(svc.Units, u)
			st.Machines[n/10].Units = append(st.Machines[n/10].Units, u.Name)
		}
		st.Services = append(st.Services, svc)
		if s > 0 {
			st.Relations = append(st.Relations, &pb.RelationStatus{Id: int64(s), Key: fmt.Sprintf("svc%d:db svc0:server", s), Life: "alive", Scope: "global"})
		}
	}
	return st
}

// BenchmarkRenderModel10k renders the model page's tables for 10,000
// units, from the status as Status returns it: the server's part of a
// page's first load and of every push to an open page.
func BenchmarkRenderModel10k(b *testing.B) {
	pages, err := parsePages()
	if err != nil {
		b.Fatal(err)
	}
	s := &Server{pages: pages}
	st := syntheticStatus(10000)
	b.ReportAllocs()
	var size int
	// CPU time as well as wall time: on a loaded machine the wall time
	// counts the waits for a core.
	cpu0 := cputime.Process()
	for b.Loop() {
		v := buildView(st, "")
		v.CanAct = true
		buf, err := s.renderModel(v)
		if err != nil {
			b.Fatal(err)
		}
		size = buf.Len()
		_, _ = io.Discard.Write(buf.Bytes())
	}
	b.ReportMetric(float64(size), "bytes/page")
	b.ReportMetric(float64((cputime.Process()-cpu0).Milliseconds())/float64(b.N), "cpu-ms/op")
}
