package state

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// CharmCollector removes what the charm store no longer needs: the
// revisions no service uses and no kept service revision names (a
// rollback may return to it), but the latest of each charm, which a
// deploy takes by default, with their archives, and the archives no revision
// names (what an upload that failed, and could not clean up after itself,
// left). Every charm revision ever uploaded stayed in etcd before, and an
// operator uploading charms in a loop could fill it.
//
// A pass reads the services and the store at one revision and removes
// what the pass before found unneeded too, a while ago: a deploy reads its
// charm's record before it adds the service, and an upload writes its
// archive before the record, each a moment before the other write the
// pass would see. Each removal is a transaction asserting that no service
// and no service revision changed since the pass read (a charm
// revision's), or that no revision was
// added (an archive's), so that a service added meanwhile keeps its
// charm; a removal whose comparisons fail waits for the next pass.
// Like the cleaner, it runs in the controller elected to run the
// singleton workers, and is safe run twice.
type CharmCollector struct {
	st    *State
	every time.Duration
	// seen are what the last pass found unneeded: "rev/<name>/<rev>" and
	// "blob/<sha256>".
	seen map[string]bool
}

// DefaultCharmCollectEvery is how often a CharmCollector looks unless told.
const DefaultCharmCollectEvery = time.Minute

// NewCharmCollector returns a collector that looks every every
// (DefaultCharmCollectEvery when zero).
func NewCharmCollector(st *State, every time.Duration) *CharmCollector {
	if every == 0 {
		every = DefaultCharmCollectEvery
	}
	return &CharmCollector{st: st, every: every}
}

// Run makes a pass every interval until ctx ends; it returns nil then.
func (c *CharmCollector) Run(ctx context.Context) error {
	t := time.NewTicker(c.every)
	defer t.Stop()
	for {
		if n, err := c.Pass(ctx); err != nil && ctx.Err() == nil {
			c.st.cfg.Logger.Warn("charm collector: pass failed", "error", err)
		} else if n > 0 {
			c.st.cfg.Logger.Info("charm collector: removed charm revisions and archives no longer needed", "removed", n)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// charmGarbage is what one pass found unneeded, as read at rev.
type charmGarbage struct {
	rev       int64
	revisions map[string]*record[*pb.Charm] // by "rev/<name>/<rev>"
	archives  map[string]string             // sha256 by "blob/<sha256>"
}

// Pass looks once and removes what the pass before found unneeded too;
// it returns how many revisions and archives it removed.
func (c *CharmCollector) Pass(ctx context.Context) (int, error) {
	g, err := c.st.charmGarbage(ctx)
	if err != nil {
		return 0, err
	}
	removed := 0
	for k, rec := range g.revisions {
		if !c.seen[k] {
			continue
		}
		ok, err := c.st.removeCharmRevision(ctx, rec, g.rev)
		if err != nil {
			return removed, err
		}
		if ok {
			removed++
		}
	}
	for k, sha := range g.archives {
		if !c.seen[k] {
			continue
		}
		ok, err := c.st.removeArchive(ctx, sha, g.rev)
		if err != nil {
			return removed, err
		}
		if ok {
			removed++
		}
	}
	c.seen = map[string]bool{}
	for k := range g.revisions {
		c.seen[k] = true
	}
	for k := range g.archives {
		c.seen[k] = true
	}
	return removed, nil
}

// charmGarbage reads the services and the charm store at one revision
// and says what no service needs.
func (s *State) charmGarbage(ctx context.Context) (*charmGarbage, error) {
	services, rev, err := s.listRevAt(ctx, servicesPrefix, false, 0)
	if err != nil {
		return nil, err
	}
	used := map[string]bool{}
	for _, kv := range services {
		svc, err := decode[pb.Service](kv)
		if err != nil {
			return nil, err
		}
		if ref := svc.v.GetCharm(); ref != nil {
			used[ref.Name+"/"+strconv.FormatInt(ref.Revision, 10)] = true
		}
	}
	specs, err := s.listRev(ctx, revisionsPrefix, false, rev)
	if err != nil {
		return nil, err
	}
	for _, kv := range specs {
		r, err := decode[pb.Revision](kv)
		if err != nil {
			return nil, err
		}
		if ref := r.v.GetSpec().GetCharm(); ref != nil {
			used[ref.Name+"/"+strconv.FormatInt(ref.Revision, 10)] = true
		}
	}
	seqs, err := s.listRev(ctx, seqPrefix+"charm/", false, rev)
	if err != nil {
		return nil, err
	}
	latest := map[string]string{}
	for _, kv := range seqs {
		latest[strings.TrimPrefix(string(kv.Key), seqPrefix+"charm/")] = string(kv.Value)
	}
	charms, err := s.listRev(ctx, charmsPrefix, false, rev)
	if err != nil {
		return nil, err
	}
	g := &charmGarbage{rev: rev, revisions: map[string]*record[*pb.Charm]{}, archives: map[string]string{}}
	named := map[string]bool{} // archives a revision names
	for _, kv := range charms {
		ch, err := decode[pb.Charm](kv)
		if err != nil {
			return nil, err
		}
		named[ch.v.Sha256] = true
		id := ch.v.Name + "/" + strconv.FormatInt(ch.v.Revision, 10)
		if used[id] || latest[ch.v.Name] == strconv.FormatInt(ch.v.Revision, 10) {
			continue
		}
		g.revisions["rev/"+id] = ch
	}
	blobs, err := s.listRev(ctx, charmBlobsPrefix, true, rev)
	if err != nil {
		return nil, err
	}
	for _, kv := range blobs {
		sha, _, _ := strings.Cut(strings.TrimPrefix(string(kv.Key), charmBlobsPrefix), "/")
		if !named[sha] {
			g.archives["blob/"+sha] = sha
		}
	}
	return g, nil
}

// removeCharmRevision removes a charm revision, its index and its archive,
// if no service changed since rev (when the pass found no service using
// it) and the record is as read. It says whether it did.
func (s *State) removeCharmRevision(ctx context.Context, rec *record[*pb.Charm], rev int64) (bool, error) {
	c := &change{}
	c.ifNoNewer(servicesPrefix, rev)
	c.ifNoNewer(revisionsPrefix, rev)
	c.ifMod(rec.key, rec.mod)
	c.del(rec.key)
	c.del(charmShaKey(rec.v.Name, rec.v.Sha256))
	c.delPrefix(charmBlobsPrefix + rec.v.Sha256 + "/")
	return s.commitOnce(ctx, "remove charm "+rec.v.Name+" revision "+strconv.FormatInt(rec.v.Revision, 10), c)
}

// removeArchive removes an archive no revision names, if no revision was
// added since rev. It says whether it did.
func (s *State) removeArchive(ctx context.Context, sha string, rev int64) (bool, error) {
	c := &change{}
	c.ifNoNewer(charmShasPrefix, rev)
	c.delPrefix(charmBlobsPrefix + sha + "/")
	return s.commitOnce(ctx, "remove charm archive "+sha, c)
}

// commitOnce commits c in a write slot, once: a change whose comparisons
// fail was decided on a read something has since changed, and is left
// for the next pass to decide again. It says whether c was committed.
func (s *State) commitOnce(ctx context.Context, what string, c *change) (bool, error) {
	ctx, release, err := s.hold(ctx)
	if err != nil {
		return false, fmt.Errorf("%s: %w", what, err)
	}
	defer release()
	ok, err := s.commit(ctx, c)
	if err != nil {
		return false, fmt.Errorf("%s: %w", what, err)
	}
	return ok, nil
}
