package machineagent

// deployer runs a principal's subordinates' agents on this machine.
type deployer struct {
	a         *Agent
	principal string
}

func (d deployer) Deploy(unit string) error {
	return d.a.startWorker(d.a.ctx, unit, d.principal, nil, false)
}

func (d deployer) Recall(unit string) error {
	d.a.stopWorker(unit, true)
	return nil
}

func (d deployer) Subordinates(units []string) {
	d.a.mu.Lock()
	d.a.subs[d.principal] = units
	d.a.mu.Unlock()
	select {
	case d.a.wake <- struct{}{}:
	default:
	}
}
