package machineagent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/lifelinehq/lifeline/internal/hostclaims"
	"github.com/lifelinehq/lifeline/internal/pki"
)

// The machine's check of its units' host claims against one another
// (unitagent.ClaimsGate): before a unit's job takes claims other than those
// the host holds for it, its agent asks the gate, which decides with
// hostclaims.Resolve over every unit of the machine: the units asking
// within one window (passWindow) form one pass, each of them changed, from
// the claims the host holds for it to those it asks for; every other unit
// stands as it is, on the claims the host holds for it and, until its job
// ends, those a pass approved for it (the host holds some of each while
// the job runs). A unit kept has its claims approved at once, so that a
// later pass weighs them while its job runs.
//
// A unit's place in the order Resolve holds unchanged units back by is the
// order the gate first heard of it: the machine agent tells it each unit
// as it first starts its agent (the units of one listing by name), which
// is the order the units were assigned to the machine as far as the agent
// can tell (a unit record says nothing of when it was assigned). A unit
// held that did not ask (units holding conflicting claims from before the
// check, or taken with ctl resolved --no-retry) is logged; it runs on, and
// a change of its that still conflicts is refused. Its agent shows it in
// its host report all the same: Standing says the conflicts that hold it,
// weighed afresh over the claims the host holds, and Changed when to ask
// again (after every change of the record).
//
// The gate keeps, in claims.json in the agent's data directory (written
// whole, atomically, at each change of a unit's claims), each unit's order, the claims the
// host holds for it as its agent last told (unitagent.ClaimsGate.Holds)
// and those approved for its job in progress: a unit agent with a record
// of its host state tells it as it starts, but a unit that asks before
// another unit's agent has started again must not find that unit
// claiming nothing, nor must one whose agent lost its record. A unit goes
// from it when its files go (removed, forced out).

// ClaimsFile names the gate's record in the agent's data directory.
const ClaimsFile = "claims.json"

// passWindow is how long a pass waits after each ask for another to join
// it, and maxPassWait the longest it waits in all: the units of one
// deploy or rollout batch on a machine, which ask one after another as
// their agents get there, are weighed together, so that the rule picks
// among them.
const (
	passWindow  = 75 * time.Millisecond
	maxPassWait = time.Second
)

// maxClaimsFile bounds what the gate reads of its record: a unit's claims
// are bounded by the charm's (a few hundred entries), and a machine's
// units are few.
const maxClaimsFile = 64 << 20

// gateUnit is what the gate knows of one unit.
type gateUnit struct {
	Order int64 `json:"order"`
	// Held are the claims the host holds for the unit, as its agent last
	// told; Approved, those a pass approved for its job in progress.
	Held     *hostclaims.Claims `json:"held,omitempty"`
	Approved *hostclaims.Claims `json:"approved,omitempty"`
}

// current are the claims the unit stands on in a pass it does not ask in:
// those the host holds for it and, while a job approved for it may be
// under way, those too (the host holds some of each until the job ends).
func (u *gateUnit) current() *hostclaims.Claims {
	switch {
	case u.Approved == nil:
		return u.Held
	case u.Held == nil:
		return u.Approved
	}
	out := &hostclaims.Claims{
		Unit:     u.Held.Unit,
		Ports:    slices.Clone(u.Held.Ports),
		Files:    slices.Clone(u.Held.Files),
		Packages: slices.Clone(u.Held.Packages),
	}
	for _, p := range u.Approved.Ports {
		if !slices.Contains(out.Ports, p) {
			out.Ports = append(out.Ports, p)
		}
	}
	for _, f := range u.Approved.Files {
		if !slices.ContainsFunc(u.Held.Files, func(g hostclaims.File) bool {
			return g.Path == f.Path && g.Mode == f.Mode && bytes.Equal(g.Content, f.Content)
		}) {
			out.Files = append(out.Files, f)
		}
	}
	for _, p := range u.Approved.Packages {
		if !slices.Contains(out.Packages, p) {
			out.Packages = append(out.Packages, p)
		}
	}
	return out
}

type gateRecord struct {
	Next  int64                `json:"next"`
	Units map[string]*gateUnit `json:"units"`
}

// claimsGate is the machine agent's unitagent.ClaimsGate.
type claimsGate struct {
	path   string
	window time.Duration
	logger hclog.Logger

	mu  sync.Mutex
	rec gateRecord
	// pass collects the asks of the pass to come, nil when none waits.
	pass *gatePass
	// changed is closed, and replaced, when the record changes (Changed).
	changed chan struct{}
}

// gatePass is one pass: the asks that joined it, by unit, and once done
// is closed, its results.
type gatePass struct {
	asks map[string]*hostclaims.Claims
	// until is when the pass is decided, unless another ask joins it
	// before, and last the latest it may be, both under mu.
	until, last time.Time
	results     hostclaims.Resolution
	done        chan struct{}
}

// openGate reads the gate's record in dir, if any: an unreadable one is
// left for the unit agents to tell again, and logged.
func openGate(dir string, window time.Duration, logger hclog.Logger) *claimsGate {
	if window <= 0 {
		window = passWindow
	}
	g := &claimsGate{path: filepath.Join(dir, ClaimsFile), window: window, logger: logger,
		rec: gateRecord{Next: 1, Units: map[string]*gateUnit{}}}
	rec, err := readGateRecord(g.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		logger.Warn("cannot read the record of the units' claims: the units tell theirs again", "error", err)
	default:
		g.rec = rec
	}
	return g
}

func readGateRecord(path string) (gateRecord, error) {
	f, err := os.Open(path)
	if err != nil {
		return gateRecord{}, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxClaimsFile+1))
	if err != nil {
		return gateRecord{}, err
	}
	if len(b) > maxClaimsFile {
		return gateRecord{}, fmt.Errorf("%s: over %d bytes", path, maxClaimsFile)
	}
	var rec gateRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return gateRecord{}, fmt.Errorf("%s: %w", path, err)
	}
	if rec.Units == nil {
		rec.Units = map[string]*gateUnit{}
	}
	for name, u := range rec.Units {
		if u == nil {
			delete(rec.Units, name)
		} else if u.Order >= rec.Next {
			rec.Next = u.Order + 1
		}
	}
	return rec, nil
}

// save writes the record, under mu, and tells Changed's callers; a
// failure is logged: the units tell their claims again as their agents
// start.
func (g *claimsGate) save() {
	g.notify()
	b, err := json.Marshal(g.rec)
	if err == nil {
		err = pki.WriteFileAtomic(g.path, b, 0o600)
	}
	if err != nil {
		g.logger.Warn("cannot record the units' claims", "error", err)
	}
}

// notify tells Changed's callers that the record changed, under mu.
func (g *claimsGate) notify() {
	if g.changed != nil {
		close(g.changed)
		g.changed = nil
	}
}

// unit returns the unit's entry, made next in order if new, under mu; made
// says so.
func (g *claimsGate) unit(name string) (u *gateUnit, made bool) {
	if u := g.rec.Units[name]; u != nil {
		return u, false
	}
	u = &gateUnit{Order: g.rec.Next}
	g.rec.Next++
	g.rec.Units[name] = u
	return u, true
}

// see gives the unit its place in the order, if it has none: the machine
// agent calls it as it first starts the unit's agent. The place is
// written with the record's next change: a unit claims nothing until its
// agent tells the gate otherwise (Holds, Check), which writes the record,
// so that starting units that claim nothing writes nothing (a synced
// write a unit, ten thousand at a deploy of as many units). A place lost
// to a crash before then is made again as the agents start again, as for
// any unit the record lacks; it weighs only against units that claimed
// nothing either.
func (g *claimsGate) see(unit string) {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.unit(unit)
}

// forget drops the unit: its claims are gone from the host. The record is
// written again only when it held claims of the unit's: an entry left in
// the file claims nothing, and goes with the record's next change.
func (g *claimsGate) forget(unit string) {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	u, ok := g.rec.Units[unit]
	if !ok {
		return
	}
	delete(g.rec.Units, unit)
	if u.Held == nil && u.Approved == nil {
		g.notify()
		return
	}
	g.save()
}

// Holds records the claims the host holds for the unit; any approved for
// a job of its are over (the job ended, or its agent started again and
// asks again).
func (g *claimsGate) Holds(unit string, claims *hostclaims.Claims) {
	claims = conflictable(claims)
	g.mu.Lock()
	defer g.mu.Unlock()
	u, made := g.unit(unit)
	if !made && u.Approved == nil && sameJSON(u.Held, claims) {
		return
	}
	u.Held, u.Approved = claims, nil
	g.save()
}

// Check decides the unit's ask in the pass it joins. The first ask of a
// pass waits until no other has joined for the window (maxPassWait at
// most, whatever its context: the others wait on it, and the wait is
// short), then resolves the pass for all.
func (g *claimsGate) Check(ctx context.Context, unit string, claims *hostclaims.Claims) (hostclaims.UnitResult, error) {
	claims = conflictable(claims)
	now := time.Now()
	g.mu.Lock()
	p := g.pass
	first := p == nil
	if first {
		p = &gatePass{asks: map[string]*hostclaims.Claims{}, done: make(chan struct{}), last: now.Add(maxPassWait)}
		g.pass = p
	}
	p.asks[unit] = claims
	p.until = now.Add(g.window)
	if p.until.After(p.last) {
		p.until = p.last
	}
	g.mu.Unlock()
	if first {
		for {
			g.mu.Lock()
			wait := time.Until(p.until)
			if wait <= 0 {
				g.pass = nil
				g.resolve(p)
				g.mu.Unlock()
				break
			}
			g.mu.Unlock()
			t := time.NewTimer(wait)
			<-t.C
		}
		close(p.done)
	} else {
		select {
		case <-p.done:
		case <-ctx.Done():
			return hostclaims.UnitResult{}, ctx.Err()
		}
	}
	res, ok := p.results.Result(unit)
	if !ok {
		return hostclaims.UnitResult{}, fmt.Errorf("claims of %s: not weighed", unit)
	}
	return res, nil
}

// resolve decides pass p, under mu, and approves the claims of the units
// it keeps.
func (g *claimsGate) resolve(p *gatePass) {
	units := make([]hostclaims.UnitRevisions, 0, len(g.rec.Units)+len(p.asks))
	changed := false
	for name := range p.asks {
		_, made := g.unit(name)
		changed = changed || made
	}
	for name, u := range g.rec.Units {
		ur := hostclaims.UnitRevisions{Unit: name, Order: u.Order, Current: withUnit(u.current(), name)}
		if c, ok := p.asks[name]; ok {
			ur.Current, ur.Changed, ur.Previous = withUnit(c, name), true, withUnit(u.Held, name)
		}
		units = append(units, ur)
	}
	p.results = hostclaims.Resolve(units)
	for _, r := range p.results.Units {
		c, asked := p.asks[r.Unit]
		switch {
		case asked && r.Outcome == hostclaims.Kept:
			if c == nil {
				c = &hostclaims.Claims{} // approved to hold nothing
			}
			g.rec.Units[r.Unit].Approved, changed = c, true
		case asked && g.rec.Units[r.Unit].Approved != nil:
			// Refused, its job does not run: what a pass approved for it
			// before is not taken either.
			g.rec.Units[r.Unit].Approved, changed = nil, true
		}
		if r.Outcome != hostclaims.Kept {
			g.logger.Warn("host claims in conflict", "unit", r.Unit, "outcome", r.Outcome.String(),
				"conflict", r.Conflicts[0].String(), "asked", asked)
		}
	}
	if changed {
		g.save()
	}
}

// Changed returns a channel closed at the next change of the claims the
// gate records.
func (g *claimsGate) Changed() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.changed == nil {
		g.changed = make(chan struct{})
	}
	return g.changed
}

// Standing returns the conflicts that hold the unit back while it asks
// for nothing: hostclaims.Resolve over the claims every unit stands on,
// none changed, holds the later of two units in conflict. Each reads
// "held: port 8080/tcp is claimed by kv/0"; none when it is not held.
func (g *claimsGate) Standing(unit string) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.rec.Units[unit] == nil {
		return nil
	}
	units := make([]hostclaims.UnitRevisions, 0, len(g.rec.Units))
	for name, u := range g.rec.Units {
		units = append(units, hostclaims.UnitRevisions{Unit: name, Order: u.Order, Current: withUnit(u.current(), name)})
	}
	r, ok := hostclaims.Resolve(units).Result(unit)
	if !ok || r.Outcome != hostclaims.Held {
		return nil
	}
	out := make([]string, 0, len(r.Conflicts))
	for _, c := range r.Conflicts {
		out = append(out, "held: "+c.String())
	}
	return out
}

// conflictable returns the part of claims that may conflict: its ports,
// files and packages (daemons never do), which is all the gate keeps.
func conflictable(c *hostclaims.Claims) *hostclaims.Claims {
	if c == nil || len(c.Ports)+len(c.Files)+len(c.Packages) == 0 {
		return nil
	}
	return &hostclaims.Claims{Unit: c.Unit, Ports: c.Ports, Files: c.Files, Packages: c.Packages}
}

// withUnit returns c naming unit as its claimant, which conflicts name.
func withUnit(c *hostclaims.Claims, unit string) *hostclaims.Claims {
	if c == nil || c.Unit == unit {
		return c
	}
	out := *c
	out.Unit = unit
	return &out
}

func sameJSON(a, b *hostclaims.Claims) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(x) == string(y)
}
