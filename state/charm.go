package state

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/lifelinehq/lifeline/internal/names"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// Charms are stored as a record per revision, charms/<name>/<revision>, and
// their archives content-addressed in chunks, charmblobs/<sha256>/<n>, so
// that no etcd request exceeds its size limit (1.5 MiB by default).
// charmshas/<name>/<sha256> names the revision an archive already has.
const (
	charmsPrefix     = "charms/"
	charmBlobsPrefix = "charmblobs/"
	charmShasPrefix  = "charmshas/"

	// charmChunk is the size of one stored piece of an archive.
	charmChunk = 1 << 20
)

// DefaultCharmStoreLimit is how many bytes of charm archives a State
// stores unless its Config says otherwise: a quarter of etcd's default
// quota, sixteen of the largest charms.
const DefaultCharmStoreLimit = 512 << 20

// CharmKey is the key of a charm revision.
func CharmKey(name string, rev int64) string {
	return charmsPrefix + name + "/" + strconv.FormatInt(rev, 10)
}

func charmChunkKey(sha string, i int) string {
	return fmt.Sprintf("%s%s/%06d", charmBlobsPrefix, sha, i)
}
func charmShaKey(name, sha string) string { return charmShasPrefix + name + "/" + sha }
func seqCharmKey(name string) string      { return seqPrefix + "charm/" + name }

// AddCharm stores a charm's archive and record under the next revision of
// its name (the first is 1), and returns the record. The same archive uploaded again gets
// the revision it already has. The caller has parsed and validated the
// charm; c describes it (its revision and chunk count are set here). An
// archive that would take the store past its limit
// (Config.CharmStoreLimit) is refused as ErrFull.
func (s *State) AddCharm(ctx context.Context, c *pb.Charm, archive []byte) (*pb.Charm, error) {
	if !names.ValidService(c.GetName()) {
		return nil, invalidf("invalid charm name %q", c.GetName())
	}
	sum := sha256.Sum256(archive)
	sha := hex.EncodeToString(sum[:])
	if c.Sha256 != "" && c.Sha256 != sha {
		return nil, invalidf("charm %s: archive sha256 is %s, not %s as declared", c.Name, sha, c.Sha256)
	}
	if existing, err := s.charmBySha(ctx, c.Name, sha); err == nil || !isNotFound(err) {
		return existing, err
	}
	if n := proto.Size(c); n > MaxCharmRecordBytes {
		return nil, tooLarge(fmt.Sprintf("the record of charm %s (its metadata and config options)", c.Name), n, MaxCharmRecordBytes)
	}
	if n := (len(archive) + charmChunk - 1) / charmChunk; n > maxCharmChunks {
		return nil, tooLarge(fmt.Sprintf("the archive of charm %s", c.Name), len(archive), maxCharmChunks*charmChunk)
	}
	if err := s.charmRoom(ctx, c.Name, int64(len(archive))); err != nil {
		return nil, err
	}
	rec, err := s.storeCharm(ctx, c, archive, sha)
	if err != nil {
		// What this upload wrote is removed, unless a record names it
		// (the same archive uploaded at once by someone else).
		s.dropArchive(ctx, c.Name, sha)
		return nil, err
	}
	return s.Charm(ctx, c.Name, rec.Revision)
}

// maxCharmChunks bounds an archive's chunks: the record's transaction
// asserts each is there.
const maxCharmChunks = 48

// storeCharm writes the archive's chunks, each its own small write, then
// the record, in a transaction that asserts every chunk is there: an
// archive whose record never lands is garbage (dropArchive, the
// CharmCollector), never a dangling reference.
func (s *State) storeCharm(ctx context.Context, c *pb.Charm, archive []byte, sha string) (*pb.Charm, error) {
	chunks := 0
	for off := 0; off < len(archive) || chunks == 0; off += charmChunk {
		end := min(off+charmChunk, len(archive))
		if _, err := s.kv.Put(ctx, charmChunkKey(sha, chunks), string(archive[off:end])); err != nil {
			return nil, fmt.Errorf("store charm %s: %w", c.Name, err)
		}
		chunks++
	}
	rec := protoClone(c)
	rec.Sha256, rec.Size, rec.Chunks = sha, int64(len(archive)), int32(chunks)
	err := s.apply(ctx, "add charm "+c.Name, func(ctx context.Context) (*change, error) {
		r, err := s.read(ctx, get(seqCharmKey(c.Name)), get(charmShaKey(c.Name, sha)))
		if err != nil {
			return nil, err
		}
		if kv := r.one(1); kv != nil {
			rev, _ := strconv.ParseInt(string(kv.Value), 10, 64)
			rec.Revision = rev
			return nil, errNothingToDo
		}
		last, seqRev, err := seqValue(r.one(0))
		if err != nil {
			return nil, err
		}
		// Revisions count from 1; the sequence holds the last one given.
		next := last + 1
		rec.Revision = next
		ch := &change{}
		ch.ifMod(seqCharmKey(c.Name), seqRev)
		ch.ifAbsent(charmShaKey(c.Name, sha))
		for i := range chunks {
			ch.ifExists(charmChunkKey(sha, i))
		}
		ch.putRaw(seqCharmKey(c.Name), strconv.FormatInt(next, 10))
		ch.put(CharmKey(c.Name, next), rec)
		ch.putRaw(charmShaKey(c.Name, sha), strconv.FormatInt(next, 10))
		return ch, nil
	})
	return rec, err
}

// dropArchive removes the chunks of an upload of charm name that failed,
// unless a revision of the charm names them. A transaction that only
// deletes works even when etcd refuses puts (its NOSPACE alarm), the
// likeliest reason for the upload to have failed. It has a few seconds of
// its own, the upload's context perhaps ended; should it fail too, the
// CharmCollector removes the chunks later.
func (s *State) dropArchive(ctx context.Context, name, sha string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	c := &change{}
	c.ifAbsent(charmShaKey(name, sha))
	c.delPrefix(charmBlobsPrefix + sha + "/")
	if _, err := s.commitOnce(ctx, "remove the archive of a failed upload of charm "+name, c); err != nil {
		s.cfg.Logger.Warn("cannot remove the archive of a failed charm upload: the charm collector will", "charm", name, "sha256", sha, "error", err)
	}
}

// charmRoom refuses an archive of n bytes that would take the store past
// its limit.
func (s *State) charmRoom(ctx context.Context, name string, n int64) error {
	limit := s.cfg.CharmStoreLimit
	if limit < 0 {
		return nil
	}
	held, err := s.CharmStoreBytes(ctx)
	if err != nil {
		return err
	}
	if held+n > limit {
		return fullf("the charm store holds %s of its %s limit: charm %s's archive of %s does not fit (remove the services of charms no longer needed, whose revisions then go, or raise --charm-store-limit)",
			sizeString(held), sizeString(limit), name, sizeString(n))
	}
	return nil
}

// CharmStoreBytes is what the stored charm revisions' archives take.
func (s *State) CharmStoreBytes(ctx context.Context) (int64, error) {
	kvs, err := s.listAll(ctx, charmsPrefix, false)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, kv := range kvs {
		c, err := decode[pb.Charm](kv)
		if err != nil {
			return 0, err
		}
		n += c.v.Size
	}
	return n, nil
}

func (s *State) charmBySha(ctx context.Context, name, sha string) (*pb.Charm, error) {
	r, err := s.read(ctx, get(charmShaKey(name, sha)))
	if err != nil {
		return nil, err
	}
	kv := r.one(0)
	if kv == nil {
		return nil, notFoundf("charm %s has no revision with sha256 %s", name, sha)
	}
	rev, err := strconv.ParseInt(string(kv.Value), 10, 64)
	if err != nil {
		return nil, invalidf("corrupt charm index %s", kv.Key)
	}
	return s.Charm(ctx, name, rev)
}

// Charm returns revision rev of the named charm; revision 0 is the latest.
func (s *State) Charm(ctx context.Context, name string, rev int64) (*pb.Charm, error) {
	if rev == 0 {
		r, err := s.read(ctx, get(seqCharmKey(name)))
		if err != nil {
			return nil, err
		}
		if rev, _, err = seqValue(r.one(0)); err != nil {
			return nil, err
		}
		if rev == 0 {
			return nil, notFoundf("charm %s not found: upload it first", name)
		}
	}
	r, err := s.read(ctx, get(CharmKey(name, rev)))
	if err != nil {
		return nil, err
	}
	c, err := decode[pb.Charm](r.one(0))
	if err != nil {
		return nil, err
	}
	if c == nil {
		return nil, notFoundf("charm %s revision %d not found", name, rev)
	}
	return c.v, nil
}

// CharmArchive returns the archive of a stored charm revision.
func (s *State) CharmArchive(ctx context.Context, c *pb.Charm) ([]byte, error) {
	out := make([]byte, 0, c.Size)
	for i := 0; i < int(c.Chunks); i++ {
		resp, err := s.kv.Get(ctx, charmChunkKey(c.Sha256, i))
		if err != nil {
			return nil, err
		}
		if len(resp.Kvs) == 0 {
			return nil, notFoundf("charm %s revision %d: archive chunk %d is missing", c.Name, c.Revision, i)
		}
		out = append(out, resp.Kvs[0].Value...)
	}
	if int64(len(out)) != c.Size {
		return nil, invalidf("charm %s revision %d: archive is %d bytes, want %d", c.Name, c.Revision, len(out), c.Size)
	}
	return out, nil
}

func isNotFound(err error) bool { return err != nil && errors.Is(err, ErrNotFound) }
