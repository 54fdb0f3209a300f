package hostexec

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"sync"
)

// Packages counts the machine's package claims across its units, in a
// record file, so that a package is installed for its first claimant and
// removed only when its last goes, and then only if Lifeline installed
// it: a package present before its first claim is never removed.
//
// The record is written before the package manager acts (install) and
// before and after it (remove), each time atomically, so a crash at any
// point leaves a record that a retry of the same call completes: a
// claim recorded is never lost, and a removal half done is finished by
// querying first, never by removing twice.
type Packages struct {
	mgr  PackageManager
	path string
	mu   sync.Mutex // serializes the calls, each a read-modify-write of the record
}

// PackagesFile is the record's name in the directory NewPackages is given.
const PackagesFile = "packages.json"

// NewPackages returns the package claims recorded in dir (made when
// first written), acted on with mgr.
func NewPackages(dir string, mgr PackageManager) *Packages {
	return &Packages{mgr: mgr, path: filepath.Join(dir, PackagesFile)}
}

type packagesRecord struct {
	Packages map[string]*packageClaim `json:"packages"`
}

type packageClaim struct {
	// Claimants maps each unit claiming the package to its version pattern.
	Claimants map[string]string `json:"claimants"`
	// Ours: the package was absent when first claimed, so Lifeline
	// installed it and removes it after its last claimant.
	Ours bool `json:"ours"`
	// Removing: its last claimant went and its removal is under way.
	Removing bool `json:"removing,omitempty"`
}

func (p *Packages) load() (*packagesRecord, error) {
	rec := &packagesRecord{}
	if _, err := readRecord(p.path, rec); err != nil {
		return nil, err
	}
	if rec.Packages == nil {
		rec.Packages = map[string]*packageClaim{}
	}
	return rec, nil
}

// Claim records unit's claim of pkgs and installs those missing or at a
// version their pattern does not match; it reports whether it installed
// any. A pattern a glob matches is checked after the install: a manager
// whose candidate does not match fails the claim (which stays recorded,
// so that a retry tries again).
func (p *Packages) Claim(ctx context.Context, unit string, pkgs []Package) (changed bool, err error) {
	if len(pkgs) > maxPackages {
		return false, fmt.Errorf("claim of %d packages: at most %d", len(pkgs), maxPackages)
	}
	want := map[string]Package{}
	for _, pkg := range pkgs {
		if err := pkg.Validate(); err != nil {
			return false, err
		}
		if prev, ok := want[pkg.Name]; ok && prev.Version != pkg.Version {
			return false, fmt.Errorf("package %s claimed twice, at %q and %q", pkg.Name, prev.Version, pkg.Version)
		}
		want[pkg.Name] = pkg
	}
	if len(want) == 0 {
		return false, nil
	}
	names := sortedNames(pkgs)
	p.mu.Lock()
	defer p.mu.Unlock()
	rec, err := p.load()
	if err != nil {
		return false, err
	}
	installed, err := p.mgr.Query(ctx, names)
	if err != nil {
		return false, fmt.Errorf("query packages: %w", err)
	}
	var missing []Package
	for _, n := range names {
		c := rec.Packages[n]
		if c == nil {
			c = &packageClaim{Claimants: map[string]string{}, Ours: installed[n] == ""}
			rec.Packages[n] = c
		}
		if c.Claimants == nil {
			c.Claimants = map[string]string{}
		}
		// A claim during an unfinished removal keeps the package Lifeline's.
		c.Removing = false
		c.Claimants[unit] = want[n].Version
		if !want[n].Matches(installed[n]) {
			missing = append(missing, want[n].request())
		}
	}
	if err := writeRecord(p.path, rec); err != nil {
		return false, fmt.Errorf("record package claims: %w", err)
	}
	if len(missing) == 0 {
		return false, nil
	}
	if err := p.mgr.Install(ctx, missing); err != nil {
		return false, fmt.Errorf("install packages: %w", err)
	}
	after, err := p.mgr.Query(ctx, sortedNames(missing))
	if err != nil {
		return true, fmt.Errorf("query packages: %w", err)
	}
	for _, m := range missing {
		if w := want[m.Name]; !w.Matches(after[m.Name]) {
			return true, fmt.Errorf("package %s: installed %q, want %q", m.Name, after[m.Name], w.Version)
		}
	}
	return true, nil
}

// Release drops unit's claims of names; a package whose last claimant
// goes is removed if Lifeline installed it. It reports whether it
// removed any. Removals left unfinished by an earlier crash are finished
// too.
func (p *Packages) Release(ctx context.Context, unit string, names []string) (changed bool, err error) {
	for _, n := range names {
		if err := validatePackageName(n); err != nil {
			return false, err
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	rec, err := p.load()
	if err != nil {
		return false, err
	}
	dirty := false
	for _, n := range names {
		c := rec.Packages[n]
		if c == nil {
			continue
		}
		if _, ok := c.Claimants[unit]; !ok {
			continue
		}
		delete(c.Claimants, unit)
		dirty = true
		if len(c.Claimants) == 0 {
			if c.Ours {
				c.Removing = true
			} else {
				delete(rec.Packages, n)
			}
		}
	}
	var removing []string
	for n, c := range rec.Packages {
		if c.Removing {
			removing = append(removing, n)
		}
	}
	if dirty {
		if err := writeRecord(p.path, rec); err != nil {
			return false, fmt.Errorf("record package claims: %w", err)
		}
	}
	if len(removing) == 0 {
		return false, nil
	}
	sort.Strings(removing)
	installed, err := p.mgr.Query(ctx, removing)
	if err != nil {
		return false, fmt.Errorf("query packages: %w", err)
	}
	var present []string
	for _, n := range removing {
		if installed[n] != "" {
			present = append(present, n)
		}
	}
	if len(present) > 0 {
		if err := p.mgr.Remove(ctx, present); err != nil {
			return false, fmt.Errorf("remove packages: %w", err)
		}
	}
	for _, n := range removing {
		delete(rec.Packages, n)
	}
	if err := writeRecord(p.path, rec); err != nil {
		return len(present) > 0, fmt.Errorf("record package claims: %w", err)
	}
	return len(present) > 0, nil
}

// Claimed returns the packages unit claims, each with its version pattern.
func (p *Packages) Claimed(unit string) (map[string]string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	rec, err := p.load()
	if err != nil {
		return nil, err
	}
	got := map[string]string{}
	for n, c := range rec.Packages {
		if v, ok := c.Claimants[unit]; ok {
			got[n] = v
		}
	}
	return got, nil
}
