package dashboard

import (
	"fmt"
	"io"
	"testing"

	"github.com/lifelinehq/lifeline/controller"
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
// page's first load, and of a push of the whole page to an open one
// (its first, and after its watch started again).
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
		v.setCanAct(true)
		buf, err := s.renderModel(&rowRenderer{pages: pages}, v)
		if err != nil {
			b.Fatal(err)
		}
		size = buf.Len()
		_, _ = io.Discard.Write(buf.Bytes())
	}
	b.ReportMetric(float64(size), "bytes/page")
	b.ReportMetric(float64((cputime.Process()-cpu0).Milliseconds())/float64(b.N), "cpu-ms/op")
}

// BenchmarkPushModel10k is an open model page's push of one unit's
// change at 10,000 units, once the unit is read: the unit patched into
// the model the stream holds, its service's status derived again, the
// view built, the rows that changed rendered and the patch written. The
// read itself is a Status call selecting the unit, which grows with what
// it selects and not with the model.
func BenchmarkPushModel10k(b *testing.B) {
	pages, err := parsePages()
	if err != nil {
		b.Fatal(err)
	}
	s := &Server{pages: pages}
	m := s.newModelStream(session{user: "olga", secret: "s"}, "")
	m.hold(syntheticStatus(10000))
	role := pb.UserRole_USER_ROLE_OPERATOR
	if _, _, _, err := m.event(role, true); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	var size, i int
	cpu0 := cputime.Process()
	for b.Loop() {
		i++
		svc := fmt.Sprintf("svc%d", i%20)
		name := fmt.Sprintf("%s/%d", svc, (i*7919)%500)
		u := &pb.UnitStatus{Name: name, Life: "alive", Machine: "0", Agent: "idle", Workload: "active", Message: fmt.Sprintf("probe %d.", i)}
		if i%2 == 0 {
			u.Agent, u.State = "error", "install-error"
		}
		m.units = map[string]bool{name: true}
		part := &pb.ModelStatus{Revision: 123456 + int64(i), Services: []*pb.ServiceStatus{{Name: svc, Units: []*pb.UnitStatus{u}}}}
		touched, ok := m.patch(part, []string{name})
		if !ok {
			b.Fatalf("patch %s: not held", name)
		}
		for _, t := range touched {
			held := m.st.Services[t]
			held.Status, held.Message = controller.ServiceWorkload(held.Units)
		}
		ev, data, _, err := m.event(role, false)
		if err != nil || ev != "rows" {
			b.Fatalf("push = %s, %v; want rows", ev, err)
		}
		size = len(data)
	}
	b.ReportMetric(float64(size), "bytes/push")
	b.ReportMetric(float64((cputime.Process()-cpu0).Milliseconds())/float64(b.N), "cpu-ms/op")
}
