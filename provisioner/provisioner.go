package provisioner

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	"github.com/lifelinehq/lifeline/internal/names"
	"github.com/lifelinehq/lifeline/internal/pki"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/provisioner/provider"
	"github.com/lifelinehq/lifeline/state"
)

// Config configures a Provisioner.
type Config struct {
	State    *state.State
	Provider provider.Provider
	// Controllers and CACert go into each machine agent's config.
	Controllers []string
	CACert      []byte
	// LiveControllers, when set, lists the controllers live now, which an
	// agent's config names instead of Controllers (when it lists any).
	LiveControllers func(context.Context) ([]string, error)
	Logger          hclog.Logger
	// Resync is how often the provisioner looks again even without
	// changes, to restart agents whose instances stopped (10 s when zero).
	Resync time.Duration
}

// Provisioner keeps instances in line with machines.
type Provisioner struct {
	cfg    Config
	logger hclog.Logger
	// restarted records that the first pass has run, which restarts the
	// agents of instances found stopped (the host rebooted, say). Later
	// passes leave a stopped agent alone: its machine shows lost until an
	// operator acts, as a vanished host would.
	restarted bool
}

// New returns a provisioner.
func New(cfg Config) (*Provisioner, error) {
	if cfg.State == nil || cfg.Provider == nil {
		return nil, errors.New("provisioner: needs a state and a provider")
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.Resync == 0 {
		cfg.Resync = 10 * time.Second
	}
	return &Provisioner{cfg: cfg, logger: cfg.Logger.Named("provisioner")}, nil
}

// Run provisions until ctx ends. It keeps the model's machines from its
// watch of them and looks at those that changed after every change, and
// at all of them after the watch's listing and every Resync: it once
// listed every machine from etcd for each change, then looked at every
// machine it kept, and a destroy of 1,000 machines made each of their
// changes a look at all of them (the provisioner's passes were a twentieth
// of what the controller allocated destroying the scale harness's model).
func (p *Provisioner) Run(ctx context.Context) error {
	changes := p.cfg.State.Watch(ctx, state.MachineKey(""), 0)
	t := time.NewTicker(p.cfg.Resync)
	defer t.Stop()
	rm := newRemover(p, maxRemovals)
	defer rm.wait()
	var machines map[string]*pb.Machine // nil until the watch's listing
	changed := map[string]bool{}        // since the last pass
	all := true                         // the next pass looks at every machine
	for {
		select {
		case <-ctx.Done():
			return nil
		case b, ok := <-changes:
			if !ok {
				return nil
			}
			// This batch and any that came during the last pass.
			for more := true; more; {
				var err error
				if machines, err = applyMachines(machines, b, changed); err != nil {
					p.logger.Warn("cannot follow the machines", "error", err)
				}
				all = all || b.Reset
				select {
				case b, more = <-changes:
				default:
					more = false
				}
			}
		case <-t.C:
			all = true
		}
		if machines == nil {
			continue
		}
		var look []*pb.Machine
		if all {
			look = slices.Collect(maps.Values(machines))
		} else {
			for id := range changed {
				if m, ok := machines[id]; ok {
					look = append(look, m)
				}
			}
		}
		dead, err := p.pass(ctx, look, all)
		if err != nil && ctx.Err() == nil {
			p.logger.Warn("provisioning pass failed", "error", err)
		}
		clear(changed)
		all = false
		// Removed beside the passes: a pass that waited for its removals
		// made the machines set dead meanwhile wait for the next, one
		// after another, at 16 a second while 10,000 units went.
		rm.start(ctx, dead)
	}
}

// applyMachines applies a batch of the machines' watch to machines, and
// adds the ids of those it changed to changed.
func applyMachines(machines map[string]*pb.Machine, b state.WatchBatch, changed map[string]bool) (map[string]*pb.Machine, error) {
	if b.Reset || machines == nil {
		machines = map[string]*pb.Machine{}
	}
	var errs []error
	prefix := state.MachineKey("")
	for _, e := range b.Events {
		id := strings.TrimPrefix(e.Key, prefix)
		changed[id] = true
		if e.Type == state.EventDelete {
			delete(machines, id)
			continue
		}
		m := &pb.Machine{}
		if err := proto.Unmarshal(e.Value, m); err != nil {
			errs = append(errs, fmt.Errorf("decode %s: %w", e.Key, err))
			continue
		}
		machines[id] = m
	}
	return machines, errors.Join(errs...)
}

// Pass looks at every machine once, as etcd lists them now: instances for
// alive machines without a running one, and removal for dead ones, which
// it waits for.
func (p *Provisioner) Pass(ctx context.Context) error {
	machines, err := p.cfg.State.Machines(ctx)
	if err != nil {
		return err
	}
	dead, err := p.pass(ctx, machines, true)
	rm := newRemover(p, maxRemovals)
	rm.start(ctx, dead)
	return errors.Join(err, rm.wait())
}

// maxRemovals bounds the dead machines removed at once: one after
// another, the last of 1,000 machines set dead together waited for each
// of the others' removals.
const maxRemovals = 16

// pass is Pass of machines but for the removals: it returns the dead
// machines, to be removed. When machines are all the model's (all), it
// also stops the instances of machines the model does not have.
func (p *Provisioner) pass(ctx context.Context, machines []*pb.Machine, all bool) ([]*pb.Machine, error) {
	// The provisioner's writes go ahead of the agents' queued ones: they
	// are few (a machine started, a dead one removed), and each is what an
	// operator, or a machine's agent, waits on. Queued, the removals of
	// 1,000 dead machines would wait for the last of 10,000 units to go.
	ctx = state.WithPriority(ctx)
	st := p.cfg.State
	insts, err := p.cfg.Provider.Instances(ctx)
	if err != nil {
		return nil, fmt.Errorf("list instances: %w", err)
	}
	running := map[string]provider.Instance{}   // every instance, by id
	byMachine := map[string]provider.Instance{} // and by machine
	for _, in := range insts {
		running[in.ID] = in
		byMachine[in.MachineID] = in
	}
	known := map[string]bool{} // machine ids
	var errs []error
	var dead []*pb.Machine
	for _, m := range machines {
		known[m.Id] = true
		switch m.Life {
		case pb.Life_LIFE_ALIVE:
			if m.Manual || p.settled(m, running) {
				continue
			}
			// Run's view comes from its watch, which can be behind this
			// provisioner's own writes (an instance recorded a moment
			// ago): act on the machine as etcd has it now.
			fresh, err := st.Machine(ctx, m.Id)
			if errors.Is(err, state.ErrNotFound) {
				continue
			}
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if m = fresh; m.Life != pb.Life_LIFE_ALIVE || p.settled(m, running) {
				continue
			}
			if in, ok := byMachine[m.Id]; ok && in.Running && m.InstanceId == "" {
				// Started by a controller that died before recording it:
				// take it back rather than start a second agent.
				if err := p.cfg.State.SetMachineInstance(ctx, m.Id, in.ID, in.Address); err != nil && !errors.Is(err, state.ErrRefused) {
					errs = append(errs, err)
				} else {
					p.logger.Info("instance taken back", "machine", m.Id, "instance", in.ID)
				}
				continue
			}
			if err := p.start(ctx, m); err != nil && !errors.Is(err, provider.ErrManual) {
				errs = append(errs, err)
			}
		case pb.Life_LIFE_DEAD:
			dead = append(dead, m)
		}
	}
	p.restarted = true
	if !all {
		return dead, errors.Join(errs...)
	}
	// Instances of machines the model no longer has are stopped.
	for id, in := range running {
		if known[in.MachineID] {
			continue
		}
		// Not in the view; maybe only not yet (see above).
		if _, err := st.Machine(ctx, in.MachineID); !errors.Is(err, state.ErrNotFound) {
			if err != nil {
				errs = append(errs, err)
			}
			continue
		}
		p.logger.Info("stopping an instance no machine has", "instance", id)
		if err := p.cfg.Provider.Stop(ctx, in.ID); err != nil {
			errs = append(errs, err)
		}
	}
	return dead, errors.Join(errs...)
}

// settled says machine m has its instance, and that instance needs
// nothing: its agent runs, or it stopped after the first pass (the machine
// shows lost until an operator acts).
func (p *Provisioner) settled(m *pb.Machine, running map[string]provider.Instance) bool {
	in, ok := running[m.InstanceId]
	return m.InstanceId != "" && ok && (in.Running || p.restarted)
}

// remover stops the instances of dead machines and removes them, a few at
// once, beside whoever hands it the machines.
type remover struct {
	p     *Provisioner
	turns chan struct{}
	wg    sync.WaitGroup
	mu    sync.Mutex
	// busy holds the machines being removed: a view that still shows
	// one dead hands it over again.
	busy map[string]bool
	errs []error
}

func newRemover(p *Provisioner, atOnce int) *remover {
	return &remover{p: p, turns: make(chan struct{}, atOnce), busy: map[string]bool{}}
}

// removalsAtOnce is how many dead machines handed over together a
// removal takes: their instances are stopped, then the machines removed
// in one transaction (state.RemoveMachines). A machine that fails there
// is removed alone, and tried again (remove).
const removalsAtOnce = 16

// start removes the dead machines not being removed already, a batch of
// up to removalsAtOnce at a time. It does not wait for them.
func (r *remover) start(ctx context.Context, dead []*pb.Machine) {
	var fresh []*pb.Machine
	r.mu.Lock()
	for _, m := range dead {
		if !r.busy[m.Id] {
			r.busy[m.Id] = true
			fresh = append(fresh, m)
		}
	}
	r.mu.Unlock()
	for len(fresh) > 0 {
		batch := fresh[:min(len(fresh), removalsAtOnce)]
		fresh = fresh[len(batch):]
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			for _, m := range r.removeBatch(ctx, batch) {
				r.wg.Add(1)
				go func() {
					defer r.wg.Done()
					r.ended(ctx, m, r.remove(ctx, m))
				}()
			}
		}()
	}
}

// removeBatch stops the instances of dead machines and removes them
// together, in its turn, and returns those it did not remove; the others
// are ended.
func (r *remover) removeBatch(ctx context.Context, batch []*pb.Machine) (failed []*pb.Machine) {
	select {
	case r.turns <- struct{}{}:
	case <-ctx.Done():
		for _, m := range batch {
			r.ended(ctx, m, ctx.Err())
		}
		return nil
	}
	defer func() { <-r.turns }()
	ctx = state.WithPriority(ctx) // as a pass's writes go (pass)
	// The instances are stopped side by side (a provider's stop may take
	// its time), then the machines removed together. A manual machine has
	// none to stop.
	stopErrs := make([]error, len(batch))
	var wg sync.WaitGroup
	for i, m := range batch {
		if m.InstanceId == "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			stopErrs[i] = r.p.stopInstance(ctx, m)
		}()
	}
	wg.Wait()
	var stopped []*pb.Machine
	for i, m := range batch {
		if stopErrs[i] != nil {
			failed = append(failed, m)
			continue
		}
		stopped = append(stopped, m)
	}
	ids := make([]string, len(stopped))
	for i, m := range stopped {
		ids[i] = m.Id
	}
	for i, err := range r.p.cfg.State.RemoveMachines(ctx, ids) {
		if err != nil && !errors.Is(err, state.ErrNotFound) {
			failed = append(failed, stopped[i])
			continue
		}
		r.p.logger.Info("machine removed", "machine", stopped[i].Id)
		r.ended(ctx, stopped[i], nil)
	}
	return failed
}

// ended records how the removal of machine m ended.
func (r *remover) ended(ctx context.Context, m *pb.Machine, err error) {
	r.mu.Lock()
	delete(r.busy, m.Id)
	if err != nil {
		r.errs = append(r.errs, err)
	}
	r.mu.Unlock()
	if err != nil && ctx.Err() == nil {
		r.p.logger.Warn("cannot remove dead machine", "machine", m.Id, "error", err)
	}
}

// removalTries is how many times a removal is tried, the pause between
// them doubling from removalPause, before it waits for the next look at
// every machine (Resync). The machine, dead in the watch's view, may not
// be dead yet to a read made at once: etcd sends a write to its watchers a
// moment before reads see it. A dead machine stays dead, so a removal
// refused for that succeeds when tried again.
const (
	removalTries = 6
	removalPause = 50 * time.Millisecond
)

// remove removes dead machine m in its turn, trying again after a
// failure.
func (r *remover) remove(ctx context.Context, m *pb.Machine) error {
	pause := removalPause
	for try := 1; ; try++ {
		select {
		case r.turns <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		err := r.p.removeDead(ctx, m)
		<-r.turns
		if err == nil || try == removalTries {
			return err
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		pause *= 2
	}
}

// wait waits for the removals under way and returns what failed.
func (r *remover) wait() error {
	r.wg.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	return errors.Join(r.errs...)
}

// removeDead stops dead machine m's instance and removes the machine (or
// finds it gone).
func (p *Provisioner) removeDead(ctx context.Context, m *pb.Machine) error {
	ctx = state.WithPriority(ctx) // as a pass's writes go (pass)
	if err := p.stopInstance(ctx, m); err != nil {
		return err
	}
	if err := p.cfg.State.RemoveMachine(ctx, m.Id); err != nil && !errors.Is(err, state.ErrNotFound) {
		return err
	}
	p.logger.Info("machine removed", "machine", m.Id)
	return nil
}

// stopInstance stops dead machine m's instance, if it has one.
func (p *Provisioner) stopInstance(ctx context.Context, m *pb.Machine) error {
	if m.InstanceId == "" {
		return nil
	}
	if err := p.cfg.Provider.Stop(ctx, m.InstanceId); err != nil {
		return fmt.Errorf("stop instance %s of machine %s: %w", m.InstanceId, m.Id, err)
	}
	p.logger.Info("instance stopped", "machine", m.Id, "instance", m.InstanceId)
	return nil
}

// start gives machine m a credential and an instance running its agent.
func (p *Provisioner) start(ctx context.Context, m *pb.Machine) error {
	tag := names.MachineTag(m.Id)
	cred, hash, err := pki.NewCredential(tag)
	if err != nil {
		return err
	}
	if err := p.cfg.State.SetCredential(ctx, tag, hash); err != nil {
		return fmt.Errorf("credential of machine %s: %w", m.Id, err)
	}
	controllers := p.cfg.Controllers
	if p.cfg.LiveControllers != nil {
		if live, err := p.cfg.LiveControllers(ctx); err != nil {
			p.logger.Warn("cannot list the live controllers: the agent gets the configured ones", "machine", m.Id, "error", err)
		} else if len(live) > 0 {
			controllers = live
		}
	}
	in, err := p.cfg.Provider.Start(ctx, provider.MachineSpec{ID: m.Id, Agent: pki.ClientConfig{
		Controllers: controllers, CACert: string(p.cfg.CACert), Tag: cred.Tag, Secret: cred.Secret,
	}})
	if err != nil {
		return fmt.Errorf("start instance of machine %s: %w", m.Id, err)
	}
	if err := p.cfg.State.SetMachineInstance(ctx, m.Id, in.ID, in.Address); err != nil {
		if errors.Is(err, state.ErrRefused) || errors.Is(err, state.ErrNotFound) {
			// Destroyed meanwhile: the next pass stops what was started.
			p.logger.Info("machine went while its instance started", "machine", m.Id)
			return nil
		}
		return err
	}
	if m.InstanceId == "" {
		p.logger.Info("instance started", "machine", m.Id, "instance", in.ID, "address", in.Address)
	} else {
		p.logger.Warn("instance was not running: started again", "machine", m.Id, "instance", in.ID)
	}
	return nil
}
