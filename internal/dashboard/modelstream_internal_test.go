package dashboard

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/lifelinehq/lifeline/controller"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// A stream patches units into the model it holds without changing the
// Status answer it holds, which other streams may hold too.
func TestModelStreamPatchLeavesTheAnswer(t *testing.T) {
	answer := syntheticStatus(1000)
	before := proto.Clone(answer)
	m := (&Server{}).newModelStream(session{user: "olga"}, "")
	m.hold(answer)
	u := &pb.UnitStatus{Name: "svc1/7", Life: "alive", Machine: "50", Agent: "error", Workload: "active", Message: "broken"}
	m.units = map[string]bool{u.Name: true}
	touched, ok := m.patch(&pb.ModelStatus{Revision: answer.Revision + 1, Services: []*pb.ServiceStatus{{Name: "svc1", Units: []*pb.UnitStatus{u}}}}, []string{u.Name})
	if !ok || len(touched) != 1 {
		t.Fatalf("patch(svc1/7) = %v, %v; want svc1's service touched", touched, ok)
	}
	svc := m.st.Services[touched[0]]
	svc.Status, svc.Message = controller.ServiceWorkload(svc.Units)
	if got := m.st.Services[1].Units[7]; got != u || svc.Status != "error" || svc.Message != "svc1/7: broken" || svc.Charm != "kv" || m.st.Revision != answer.Revision+1 {
		t.Errorf("held svc1 = %s %q, unit 7 %v, revision %d; want the patch in", svc.Status, svc.Message, got, m.st.Revision)
	}
	if !proto.Equal(answer, before) {
		t.Errorf("patch changed the Status answer held")
	}
}
