package leader

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/hashicorp/go-hclog"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// stopGrace bounds how long Run waits, once its context ends, for the
// candidate to leave the election.
const stopGrace = 5 * time.Second

// Config configures a candidate.
type Config struct {
	// Client reaches the etcd cluster; the caller keeps it.
	Client *clientv3.Client
	// Election names the election: its full key (namespace included),
	// under which each candidate's key is Election + "/" + its lease.
	Election string
	// ID names this candidate; Leader reports it.
	ID string
	// TTL is the session's lease: how long after this process stops
	// keeping it another candidate takes over. 10 s when zero.
	TTL    time.Duration
	Logger hclog.Logger
}

// Run campaigns and runs work whenever elected, until ctx ends. work must
// return soon after its context ends; an error it returns is logged and
// the candidate campaigns again after a back-off.
func Run(ctx context.Context, cfg Config, work func(context.Context) error) error {
	if cfg.Client == nil || cfg.Election == "" || cfg.ID == "" {
		return errors.New("leader: needs a client, an election and an id")
	}
	if cfg.TTL == 0 {
		cfg.TTL = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	leaveStale(ctx, cfg)
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 500 * time.Millisecond
	bo.MaxInterval = 10 * time.Second
	bo.MaxElapsedTime = 0
	for ctx.Err() == nil {
		type result struct {
			led bool
			err error
		}
		done := make(chan result, 1)
		go func() {
			led, err := term(ctx, cfg, work)
			done <- result{led, err}
		}()
		var r result
		select {
		case r = <-done:
		case <-ctx.Done():
			// The work stops with ctx; leaving the election needs etcd,
			// which may be gone: wait for it a while, not for ever.
			select {
			case r = <-done:
			case <-time.After(stopGrace):
				cfg.Logger.Warn("could not leave the election in time: its lease lapses on its own", "ttl", cfg.TTL)
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		led, err := r.led, r.err
		if led && err == nil {
			bo.Reset()
		}
		wait := bo.NextBackOff()
		if err != nil {
			cfg.Logger.Warn("leadership ended", "error", err, "retry_in", wait.Round(time.Millisecond))
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
	return nil
}

// leaveStale takes out of the election the candidacies under this
// candidate's ID that a run of it before left behind: a controller killed
// and started again found its own candidacy of before still there until
// that lease lapsed (the TTL), and waited that long to lead again, its
// provisioner and cleaner with it, while its agents already reported to
// it. Only the process holding the ID's data campaigns under it, so such a
// candidacy is a dead run's. Done once, as the candidate starts: two
// processes given the same ID by mistake still take turns, as any two
// candidates do. A failure is logged; the old lease then lapses on its own.
func leaveStale(ctx context.Context, cfg Config) {
	resp, err := cfg.Client.Get(ctx, cfg.Election+"/", clientv3.WithPrefix())
	if err != nil {
		cfg.Logger.Warn("cannot look for an earlier run's candidacy: it lapses on its own", "error", err, "ttl", cfg.TTL)
		return
	}
	for _, kv := range resp.Kvs {
		if string(kv.Value) != cfg.ID || kv.Lease == 0 {
			continue
		}
		if _, err := cfg.Client.Revoke(ctx, clientv3.LeaseID(kv.Lease)); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			cfg.Logger.Warn("cannot end an earlier run's candidacy: it lapses on its own", "key", string(kv.Key), "error", err)
			continue
		}
		cfg.Logger.Info("ended the candidacy an earlier run of this controller left", "key", string(kv.Key))
	}
}

// term is one session: campaign, and lead until the session or ctx ends.
// led says whether it was elected.
func term(ctx context.Context, cfg Config, work func(context.Context) error) (led bool, err error) {
	secs := max(int(cfg.TTL/time.Second), 1)
	// The lease is granted under ctx (an unreachable etcd must not hold up
	// a stop), but kept alive under a context of its own, so that the
	// session outlives ctx long enough to resign and revoke it.
	lease, err := cfg.Client.Grant(ctx, int64(secs))
	if err != nil {
		return false, fmt.Errorf("election lease: %w", err)
	}
	sctx, scancel := context.WithCancel(context.WithoutCancel(ctx))
	defer scancel()
	sess, err := concurrency.NewSession(cfg.Client, concurrency.WithLease(lease.ID), concurrency.WithContext(sctx))
	if err != nil {
		return false, fmt.Errorf("election session: %w", err)
	}
	defer sess.Close() // revokes the lease: leaves the election at once
	// The term ends with the session: a candidate that lost its lease no
	// longer campaigns nor leads.
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-sess.Done():
			cancel()
		case <-tctx.Done():
		}
	}()
	e := concurrency.NewElection(sess, cfg.Election)
	if err := e.Campaign(tctx, cfg.ID); err != nil {
		if ctx.Err() != nil {
			return false, nil
		}
		return false, fmt.Errorf("campaign: %w", err)
	}
	cfg.Logger.Info("elected to run the singleton workers", "id", cfg.ID)
	werr := work(tctx)
	lost := sessionLost(sess)
	rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer rcancel()
	if !lost {
		if err := e.Resign(rctx); err != nil {
			cfg.Logger.Debug("resign", "error", err)
		}
	}
	switch {
	case ctx.Err() != nil:
		cfg.Logger.Info("resigned: stopping", "id", cfg.ID)
		return true, nil
	case lost:
		return true, errors.New("election session lost (etcd unreachable for its TTL)")
	case werr != nil:
		return true, fmt.Errorf("singleton workers: %w", werr)
	}
	return true, errors.New("singleton workers stopped")
}

func sessionLost(s *concurrency.Session) bool {
	select {
	case <-s.Done():
		return true
	default:
		return false
	}
}

// Leader returns the id of the candidate leading the named election, or ""
// when none is.
func Leader(ctx context.Context, c *clientv3.Client, election string) (string, error) {
	resp, err := c.Get(ctx, election+"/", clientv3.WithFirstCreate()...)
	if err != nil {
		return "", err
	}
	if len(resp.Kvs) == 0 {
		return "", nil
	}
	return string(resp.Kvs[0].Value), nil
}
