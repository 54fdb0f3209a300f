package provisioner

import (
	"context"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// PassOver is a pass over machines as a caller saw them, which may be
// older than etcd (Run's view from its watch).
func (p *Provisioner) PassOver(ctx context.Context, machines []*pb.Machine) error {
	_, err := p.pass(ctx, machines)
	return err
}
