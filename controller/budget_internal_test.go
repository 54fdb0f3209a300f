package controller

import (
	"testing"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// TestEveryMethodHasAKind checks that callKinds says what every method of
// the API does, so that a new method is budgeted and guarded on purpose.
func TestEveryMethodHasAKind(t *testing.T) {
	n := 0
	for _, sd := range []struct {
		name    string
		methods []string
	}{
		{pb.AgentService_ServiceDesc.ServiceName, methodNames(pb.AgentService_ServiceDesc.Methods, pb.AgentService_ServiceDesc.Streams)},
		{pb.OperatorService_ServiceDesc.ServiceName, methodNames(pb.OperatorService_ServiceDesc.Methods, pb.OperatorService_ServiceDesc.Streams)},
		{pb.MachineJoinService_ServiceDesc.ServiceName, methodNames(pb.MachineJoinService_ServiceDesc.Methods, pb.MachineJoinService_ServiceDesc.Streams)},
		{pb.ControllerJoinService_ServiceDesc.ServiceName, methodNames(pb.ControllerJoinService_ServiceDesc.Methods, pb.ControllerJoinService_ServiceDesc.Streams)},
		{pb.RegistrationService_ServiceDesc.ServiceName, methodNames(pb.RegistrationService_ServiceDesc.Methods, pb.RegistrationService_ServiceDesc.Streams)},
		{healthpb.Health_ServiceDesc.ServiceName, methodNames(healthpb.Health_ServiceDesc.Methods, healthpb.Health_ServiceDesc.Streams)},
	} {
		for _, m := range sd.methods {
			full := "/" + sd.name + "/" + m
			if _, ok := callKinds[full]; !ok {
				t.Errorf("callKinds lacks %s", full)
			}
			n++
		}
	}
	if n != len(callKinds) {
		t.Errorf("callKinds has %d methods, the services %d", len(callKinds), n)
	}
}

func methodNames(unary []grpc.MethodDesc, streams []grpc.StreamDesc) []string {
	var out []string
	for _, m := range unary {
		out = append(out, m.MethodName)
	}
	for _, s := range streams {
		out = append(out, s.StreamName)
	}
	return out
}
