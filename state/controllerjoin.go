package state

import (
	"context"
	"encoding/pem"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// The controller join tokens that may still be used are stored at
// controller-joins/<id>: the hash of the token's secret and its expiry
// (pb.ControllerJoin), never the secret. Using a token deletes its record
// in a transaction that asserts it unchanged, so a token works once; each
// record is bound to a lease of its own that ends a minute after the token
// expires, so that etcd removes the tokens nobody used. The expiry in the
// record is what counts: a lease's countdown starts again when etcd's
// leader changes.
const controllerJoinsPrefix = "controller-joins/"

// controllerJoinLinger is how long after its expiry a token's record stays.
const controllerJoinLinger = time.Minute

func controllerJoinKey(id string) string { return controllerJoinsPrefix + id }

// validControllerJoinID says whether id may name a controller join token:
// 16 lowercase hex digits (pki.NewControllerJoin makes them).
func validControllerJoinID(id string) bool {
	if len(id) != 16 {
		return false
	}
	return strings.Trim(id, "0123456789abcdef") == ""
}

// AddControllerJoin stores the record of controller join token id.
func (s *State) AddControllerJoin(ctx context.Context, id string, j *pb.ControllerJoin) error {
	switch {
	case !validControllerJoinID(id):
		return invalidf("invalid controller join token id %q", id)
	case j.GetSecretHash() == "":
		return invalidf("controller join token %s has no secret hash", id)
	case j.GetExpiresUnixNano() <= 0:
		return invalidf("controller join token %s has no expiry", id)
	}
	ttl := time.Until(time.Unix(0, j.ExpiresUnixNano)) + controllerJoinLinger
	grant, err := s.lease.Grant(ctx, max(int64(ttl/time.Second), int64(controllerJoinLinger/time.Second)))
	if err != nil {
		return fmt.Errorf("store controller join token %s: %w", id, err)
	}
	key := controllerJoinKey(id)
	// Through apply, so that an operator's AddController writes its
	// audit entry in the same transaction.
	err = s.apply(ctx, "store controller join token "+id, func(ctx context.Context) (*change, error) {
		r, err := s.read(ctx, getKeyOnly(key))
		if err != nil {
			return nil, err
		}
		if r.one(0) != nil {
			return nil, existsf("controller join token %s exists already", id)
		}
		c := &change{}
		c.ifAbsent(key)
		c.putLeased(key, j, int64(grant.ID))
		return c, nil
	})
	if err != nil {
		_, _ = s.lease.Revoke(ctx, grant.ID)
		return err
	}
	return nil
}

// UseControllerJoin uses controller join token id, once: accept judges its
// record (the secret presented, the expiry) and, when it returns nil, the
// record is deleted in a transaction that asserts it is still there as
// read. Of several callers using one token at once, one at most gets nil.
// An error of accept is returned as it is, the record left in place. A
// token never issued, used already or gone after its expiry is an error
// matching ErrNotFound.
func (s *State) UseControllerJoin(ctx context.Context, id string, accept func(*pb.ControllerJoin) error) error {
	if !validControllerJoinID(id) {
		return invalidf("invalid controller join token id %q", id)
	}
	key := controllerJoinKey(id)
	resp, err := s.kv.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("read controller join token %s: %w", id, err)
	}
	if len(resp.Kvs) == 0 {
		return notFoundf("no controller join token %s: it was never issued, was used already, or expired", id)
	}
	kv := resp.Kvs[0]
	j := &pb.ControllerJoin{}
	if err := proto.Unmarshal(kv.Value, j); err != nil {
		return fmt.Errorf("decode %s: %w", key, err)
	}
	if err := accept(j); err != nil {
		return err
	}
	txn, err := s.kv.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)).
		Then(clientv3.OpDelete(key)).
		Commit()
	if err != nil {
		return fmt.Errorf("use controller join token %s: %w", id, err)
	}
	if !txn.Succeeded {
		// Records are never rewritten: it is gone, used by another.
		return notFoundf("controller join token %s was used already", id)
	}
	return nil
}

// checkCA checks the model's CA in a snapshot: whole, its key not in
// clear.
func checkCA(snap *Snapshot, bad func(string, ...any)) {
	cert, hasCert := snap.Values[caCertKey]
	key, hasKey := snap.Values[caKeyKey]
	switch {
	case hasCert != hasKey:
		bad("the model's CA is stored incompletely (%s %t, %s %t)", caCertKey, hasCert, caKeyKey, hasKey)
	case hasKey && len(cert) == 0:
		bad("%s is empty", caCertKey)
	case hasKey && clearKeyPEM(key):
		bad("%s holds the CA's private key in clear: whoever reads etcd may sign as the controller", caKeyKey)
	}
}

// checkControllerJoin checks the record k of a controller join token.
func checkControllerJoin(k string, v []byte, bad func(string, ...any)) {
	j := &pb.ControllerJoin{}
	switch err := proto.Unmarshal(v, j); {
	case !validControllerJoinID(strings.TrimPrefix(k, controllerJoinsPrefix)):
		bad("%s: invalid controller join token id", k)
	case err != nil:
		bad("%s: undecodable value: %v", k, err)
	case j.SecretHash == "" || j.ExpiresUnixNano <= 0:
		bad("%s: a controller join token without a secret hash or expiry", k)
	}
}

// clearKeyPEM says whether data starts with a PEM block of a private key
// in clear ("PRIVATE KEY", "EC PRIVATE KEY", ...). A sealed key's block
// type does not end so.
func clearKeyPEM(data []byte) bool {
	block, _ := pem.Decode(data)
	return block != nil && strings.HasSuffix(block.Type, "PRIVATE KEY")
}
