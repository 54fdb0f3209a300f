package controller

import (
	"testing"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// Every OperatorService method has a row in operatorAccess: a method
// added without one fails here (and is refused to everyone meanwhile).
func TestEveryOperatorMethodHasARole(t *testing.T) {
	var methods []string
	for _, m := range pb.OperatorService_ServiceDesc.Methods {
		methods = append(methods, m.MethodName)
	}
	for _, s := range pb.OperatorService_ServiceDesc.Streams {
		methods = append(methods, s.StreamName)
	}
	for _, m := range methods {
		if acc, ok := operatorAccess(m); !ok || acc.role == 0 {
			t.Errorf("operatorAccess(%s) = %v, %v; want a row with a role", m, acc, ok)
		}
	}
	if len(methods) < 20 {
		t.Errorf("OperatorService has %d methods, want every one of them: %v", len(methods), methods)
	}
}
