package provisioner

import (
	"context"
	"errors"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// PassOver is a pass over machines as a caller saw them, which may be
// older than etcd (Run's view from its watch), with its removals.
func (p *Provisioner) PassOver(ctx context.Context, machines []*pb.Machine) error {
	dead, err := p.pass(ctx, machines, true)
	rm := newRemover(p, maxRemovals)
	rm.start(ctx, dead)
	return errors.Join(err, rm.wait())
}
