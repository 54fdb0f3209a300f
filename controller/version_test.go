package controller_test

import (
	"runtime"
	"testing"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// Version answers what the controller's binary is: a test binary is not
// stamped, so its version is devel, with the toolchain that built it.
func TestVersion(t *testing.T) {
	e := newEnv(t)
	viewer := pb.NewOperatorServiceClient(e.Dial(e.User("vic", pb.UserRole_USER_ROLE_VIEWER)))
	got, err := viewer.Version(e.ctx, &pb.VersionRequest{})
	if err != nil {
		t.Fatalf("Version as a viewer: %v", err)
	}
	if got.Version != "devel" || got.GoVersion != runtime.Version() || got.Platform != runtime.GOOS+"/"+runtime.GOARCH || got.Controller == "" {
		t.Errorf("Version = %v, want devel, %s, %s/%s and the controller's id", got, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	}
}
