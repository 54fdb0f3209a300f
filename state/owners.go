package state

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"

	"github.com/lifelinehq/lifeline/internal/names"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// Ownership: which manifest created an entity (ctl apply), so that pruning
// destroys only what the manifest owns. An owner record lives apart from
// its entity, at owners/<kind>/<id>, with a reference owned/<manifest>/
// <kind>/<id> beside it (what a manifest owns is one prefix read); it
// carries the create revision of the entity it was written for.
//
// A claim commits only while its entity is unchanged since the claim read
// it alive (it compares the entity's mod revision), so no claim lands once
// the entity is dying or dead. The transaction that removes an entity
// reads its owner record with the entity and deletes it and its reference
// (removeOwnerOps): a service's removal (S3, and DestroyService's at
// once), a relation's, a machine's. An owner record thus names an entity
// that exists as the incarnation it was written for (checkOwners). Status
// shows an owner only from a record of the entity's own incarnation, and
// ClaimOwnership sweeps a manifest's records whose entity is gone and
// overwrites another incarnation's: cheap checks (the sweep is one read of
// the manifest's references) that keep a record no removal took harmless.
const (
	ownersPrefix = "owners/"
	ownedPrefix  = "owned/"
)

// The kinds of entities a manifest owns.
const (
	OwnService  = "service"
	OwnRelation = "relation"
	OwnMachine  = "machine"
)

// MaxOwnedPerManifest bounds the entities one manifest owns: a manifest
// has at most 10,000 resources, and a machine resource many machines.
const MaxOwnedPerManifest = 20000

// ownedPerTxn is how many entities one transaction claims: per entity a
// compare on its incarnation, a compare on the owner record read and two
// puts, beside the audit entry's operations.
const ownedPerTxn = (MaxTxnOps - auditOps) / 4

// OwnerKey is an entity's owner record.
func OwnerKey(kind, id string) string { return ownersPrefix + kind + "/" + id }

func ownedRef(manifest, kind, id string) string {
	return ownedPrefix + manifest + "/" + kind + "/" + id
}

func ownedManifestPrefix(manifest string) string { return ownedPrefix + manifest + "/" }

// ownedEntityKey is the key of the entity an owner record names.
func ownedEntityKey(kind, id string) (string, error) {
	switch kind {
	case OwnService:
		if err := checkServiceName(id); err != nil {
			return "", err
		}
		return ServiceKey(id), nil
	case OwnMachine:
		if err := checkMachineID(id); err != nil {
			return "", err
		}
		return MachineKey(id), nil
	case OwnRelation:
		n, err := strconv.ParseInt(id, 10, 64)
		if err != nil || n < 0 || strconv.FormatInt(n, 10) != id {
			return "", invalidf("invalid relation id %q", id)
		}
		return RelationKey(n), nil
	}
	return "", invalidf("invalid kind %q: want service, relation or machine", kind)
}

// entityAlive says whether an entity's record is alive.
func entityAlive(kind string, kv *mvccpb.KeyValue) (bool, error) {
	var life pb.Life
	switch kind {
	case OwnService:
		v := &pb.Service{}
		if err := proto.Unmarshal(kv.Value, v); err != nil {
			return false, fmt.Errorf("decode %s: %w", kv.Key, err)
		}
		life = v.Life
	case OwnMachine:
		v := &pb.Machine{}
		if err := proto.Unmarshal(kv.Value, v); err != nil {
			return false, fmt.Errorf("decode %s: %w", kv.Key, err)
		}
		life = v.Life
	case OwnRelation:
		v := &pb.Relation{}
		if err := proto.Unmarshal(kv.Value, v); err != nil {
			return false, fmt.Errorf("decode %s: %w", kv.Key, err)
		}
		life = v.Life
	}
	return life == pb.Life_LIFE_ALIVE, nil
}

// ClaimOwnership records manifest as the owner of entities, each created
// for one of its resources: each must exist and be alive and be owned by
// no other manifest (its own is overwritten, as is a stale record). The
// manifest's stale records are swept first. Entities are claimed in
// batches, each one transaction; on an error the batches before it stay
// claimed.
func (s *State) ClaimOwnership(ctx context.Context, manifest, user string, entities []*pb.OwnedEntity) error {
	if err := checkServiceName(manifest); err != nil {
		return invalidf("invalid manifest name %q", manifest)
	}
	if len(entities) > MaxOwnedPerManifest {
		return invalidf("%d entities to claim: at most %d", len(entities), MaxOwnedPerManifest)
	}
	seen := map[string]bool{}
	for _, e := range entities {
		if _, err := ownedEntityKey(e.Kind, e.Id); err != nil {
			return err
		}
		if err := checkServiceName(e.Resource); err != nil {
			return invalidf("invalid resource name %q", e.Resource)
		}
		if seen[e.Kind+"/"+e.Id] {
			return invalidf("%s %s named twice", e.Kind, e.Id)
		}
		seen[e.Kind+"/"+e.Id] = true
	}
	if err := s.sweepOwned(ctx, manifest); err != nil {
		return err
	}
	for start := 0; start < len(entities); start += ownedPerTxn {
		batch := entities[start:min(len(entities), start+ownedPerTxn)]
		if err := s.claimBatch(ctx, manifest, user, batch); err != nil {
			return err
		}
	}
	return nil
}

func (s *State) claimBatch(ctx context.Context, manifest, user string, batch []*pb.OwnedEntity) error {
	return s.apply(ctx, "claim ownership for manifest "+manifest, func(ctx context.Context) (*change, error) {
		gets := []getOp{getKeys(ownedManifestPrefix(manifest), 0)}
		for _, e := range batch {
			key, _ := ownedEntityKey(e.Kind, e.Id)
			gets = append(gets, get(key), get(OwnerKey(e.Kind, e.Id)))
		}
		r, err := s.read(ctx, gets...)
		if err != nil {
			return nil, err
		}
		owned := map[string]bool{}
		for _, kv := range r.all(0) {
			owned[string(kv.Key)] = true
		}
		c := &change{}
		now := time.Now().UnixNano()
		for i, e := range batch {
			ent, rec := r.one(1+2*i), r.one(2+2*i)
			if ent == nil {
				return nil, notFoundf("%s %s not found", e.Kind, e.Id)
			}
			alive, err := entityAlive(e.Kind, ent)
			if err != nil {
				return nil, err
			}
			if !alive {
				return nil, refused("", "%s %s is not alive: only an alive entity is claimed", e.Kind, e.Id)
			}
			if rec != nil {
				old := &pb.Owner{}
				if err := proto.Unmarshal(rec.Value, old); err != nil {
					return nil, fmt.Errorf("decode %s: %w", rec.Key, err)
				}
				if old.EntityCreateRevision == ent.CreateRevision && old.Manifest != manifest {
					return nil, refused("", "%s %s is owned by manifest %s", e.Kind, e.Id, old.Manifest)
				}
				if old.Manifest != manifest {
					c.del(ownedRef(old.Manifest, e.Kind, e.Id))
				}
			}
			ref := ownedRef(manifest, e.Kind, e.Id)
			if !owned[ref] {
				owned[ref] = true
			}
			// Unchanged since read alive: once it is dying, no claim
			// commits, and its removal deletes every record it has.
			c.ifMod(string(ent.Key), ent.ModRevision)
			c.ifMod(OwnerKey(e.Kind, e.Id), modOf(rec))
			c.put(OwnerKey(e.Kind, e.Id), &pb.Owner{Manifest: manifest, Resource: e.Resource, User: user,
				CreatedUnixNano: now, EntityCreateRevision: ent.CreateRevision})
			c.putRaw(ref, "")
		}
		if len(owned) > MaxOwnedPerManifest {
			return nil, refused("", "manifest %s would own %d entities: at most %d", manifest, len(owned), MaxOwnedPerManifest)
		}
		c.ifNoNewer(ownedManifestPrefix(manifest), r.rev)
		return c, nil
	})
}

// sweepOwned removes the manifest's stale owner records: those whose
// entity is gone or is another incarnation.
func (s *State) sweepOwned(ctx context.Context, manifest string) error {
	kvs, err := s.listAll(ctx, ownedManifestPrefix(manifest), true)
	if err != nil {
		return err
	}
	var stale [][2]string
	for _, kv := range kvs {
		kind, id, _ := strings.Cut(strings.TrimPrefix(string(kv.Key), ownedManifestPrefix(manifest)), "/")
		live, err := s.ownerLive(ctx, manifest, kind, id)
		if err != nil {
			return err
		}
		if !live {
			stale = append(stale, [2]string{kind, id})
		}
	}
	const perTxn = (MaxTxnOps - auditOps) / 3
	for start := 0; start < len(stale); start += perTxn {
		batch := stale[start:min(len(stale), start+perTxn)]
		err := s.apply(ctx, "sweep stale owner records of manifest "+manifest, func(ctx context.Context) (*change, error) {
			c := &change{}
			for _, e := range batch {
				rec, ent, err := s.readOwner(ctx, e[0], e[1])
				if err != nil {
					return nil, err
				}
				if ownerApplies(manifest, rec, ent) {
					continue // claimed again since the list was read
				}
				// Every claim writes the record: a claim between this read
				// and the commit fails the transaction, which reads again.
				c.ifMod(OwnerKey(e[0], e[1]), modOf(rec))
				c.del(ownedRef(manifest, e[0], e[1]))
				if o := decodeOwner(rec); o != nil && o.Manifest == manifest {
					c.del(string(rec.Key))
				}
			}
			return c, nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// removeOwnerOps adds to the change that removes an entity the deletion of
// its owner record rec (as read with the entity; nil when it has none) and
// of the record's reference. With compare, the change also asserts the
// record is as read: the removal of an alive entity (a claim may commit
// between its read and its commit) needs it; that of a dying or dead one,
// which no claim commits on, does not.
func removeOwnerOps(c *change, kind, id string, rec *mvccpb.KeyValue, compare bool) {
	if compare {
		c.ifMod(OwnerKey(kind, id), modOf(rec))
	}
	if rec == nil {
		return
	}
	c.del(string(rec.Key))
	if o := decodeOwner(rec); o != nil {
		c.del(ownedRef(o.Manifest, kind, id))
	}
}

// ownerLive says whether the manifest's owner record of an entity applies
// (ownerApplies).
func (s *State) ownerLive(ctx context.Context, manifest, kind, id string) (bool, error) {
	rec, ent, err := s.readOwner(ctx, kind, id)
	return ownerApplies(manifest, rec, ent), err
}

// readOwner reads an entity's owner record and its key (nil when absent).
func (s *State) readOwner(ctx context.Context, kind, id string) (rec, ent *mvccpb.KeyValue, err error) {
	key, err := ownedEntityKey(kind, id)
	if err != nil {
		return nil, nil, nil
	}
	r, err := s.read(ctx, get(OwnerKey(kind, id)), getKeyOnly(key))
	if err != nil {
		return nil, nil, err
	}
	return r.one(0), r.one(1), nil
}

// ownerApplies says whether an owner record applies: it names the
// manifest and the entity exists as the incarnation it was written for.
func ownerApplies(manifest string, rec, ent *mvccpb.KeyValue) bool {
	o := decodeOwner(rec)
	return o != nil && ent != nil && o.Manifest == manifest && o.EntityCreateRevision == ent.CreateRevision
}

// decodeOwner decodes an owner record; nil when absent or undecodable.
func decodeOwner(rec *mvccpb.KeyValue) *pb.Owner {
	if rec == nil {
		return nil
	}
	o := &pb.Owner{}
	if proto.Unmarshal(rec.Value, o) != nil {
		return nil
	}
	return o
}

// checkOwners checks the owner records and their references: each record
// decodes, names a valid manifest and resource, and has its reference;
// each reference has its record naming its manifest; no manifest has more
// than MaxOwnedPerManifest references; each record's entity exists, as
// the incarnation the record was written for when the snapshot has the
// create revisions.
func checkOwners(snap *Snapshot, bad func(string, ...any)) {
	perManifest := map[string]int{}
	for k, v := range snap.Values {
		switch {
		case strings.HasPrefix(k, ownersPrefix):
			kind, id, _ := strings.Cut(strings.TrimPrefix(k, ownersPrefix), "/")
			ent, err := ownedEntityKey(kind, id)
			if err != nil {
				bad("owner record %s: %v", k, err)
			}
			o := &pb.Owner{}
			if err := proto.Unmarshal(v, o); err != nil {
				bad("%s: undecodable value: %v", k, err)
				continue
			}
			if _, ok := snap.Values[ent]; err == nil && !ok {
				bad("owner record %s: its %s is gone", k, kind)
			} else if rev, ok := snap.Creates[ent]; ok && rev != o.EntityCreateRevision {
				bad("owner record %s was written for the %s created at revision %d, not the one created at %d", k, kind, o.EntityCreateRevision, rev)
			}
			if !names.ValidService(o.Manifest) || !names.ValidService(o.Resource) {
				bad("owner record %s names manifest %q, resource %q", k, o.Manifest, o.Resource)
			}
			if o.EntityCreateRevision <= 0 {
				bad("owner record %s has no entity revision", k)
			}
			if _, ok := snap.Values[ownedRef(o.Manifest, kind, id)]; !ok {
				bad("owner record %s has no reference from manifest %s", k, o.Manifest)
			}
		case strings.HasPrefix(k, ownedPrefix):
			manifest, kindID, _ := strings.Cut(strings.TrimPrefix(k, ownedPrefix), "/")
			perManifest[manifest]++
			o := &pb.Owner{}
			rec, ok := snap.Values[ownersPrefix+kindID]
			if !ok || proto.Unmarshal(rec, o) != nil || o.Manifest != manifest {
				bad("reference %s: no owner record of manifest %s", k, manifest)
			}
		}
	}
	for m, n := range perManifest {
		if n > MaxOwnedPerManifest {
			bad("manifest %s owns %d entities, over the limit of %d", m, n, MaxOwnedPerManifest)
		}
	}
}
