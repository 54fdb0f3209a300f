package state

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// What the controllers of one model share through etcd:
//
//   - controller/ca-cert and controller/ca-key: the model's CA, written once
//     by the first controller (both in one transaction, if neither exists),
//     read by every later one, so that a client that trusts the CA may dial
//     any controller. The key is sealed with a key-encryption key that only
//     the controllers hold, in their data directories (package pki), so
//     that whoever reads the namespace or a backup of it cannot sign as the
//     controller. A model stored before keys were sealed holds it in clear
//     until a controller seals it (ReplaceCAKey).
//   - controller-joins/<id>: the controller join tokens that may still be
//     used (controllerjoin.go).
//   - controllers/<id>: a controller's advertised addresses, bound to a lease
//     it keeps alive, so the key lists exactly the live controllers.
//   - leader/workers/<lease>: the keys of etcd's election recipe
//     (client/v3/concurrency) for the controller that runs the singleton
//     workers, the oldest being the leader's.
const (
	caPrefix          = "controller/"
	caCertKey         = caPrefix + "ca-cert"
	caKeyKey          = caPrefix + "ca-key"
	controllersPrefix = "controllers/"
	leaderPrefix      = "leader/"
)

// LeaderElection names, relative to the namespace, the election of the
// controller that runs the singleton workers (package leader); its keys
// are under LeaderElection + "/".
const LeaderElection = leaderPrefix + "workers"

// StoredCA is the model's CA as stored in etcd.
type StoredCA struct {
	// Cert is the CA certificate (PEM).
	Cert []byte
	// Key is the CA's private key, sealed (package pki), or in clear in a
	// model stored before keys were sealed.
	Key []byte
	// KeyRevision is the mod revision of Key, which ReplaceCAKey compares.
	KeyRevision int64
}

// SharedCA stores certPEM and keyPEM (sealed: package pki) as the model's
// CA unless one is stored already, and returns the one stored: the first
// controller's CA is every controller's.
func (s *State) SharedCA(ctx context.Context, certPEM, keyPEM []byte) (StoredCA, error) {
	if len(certPEM) == 0 || len(keyPEM) == 0 {
		return StoredCA{}, invalidf("a CA needs a certificate and a key")
	}
	resp, err := s.kv.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(caCertKey), "=", 0), clientv3.Compare(clientv3.CreateRevision(caKeyKey), "=", 0)).
		Then(clientv3.OpPut(caCertKey, string(certPEM)), clientv3.OpPut(caKeyKey, string(keyPEM))).
		Else(clientv3.OpGet(caCertKey), clientv3.OpGet(caKeyKey)).
		Commit()
	if err != nil {
		return StoredCA{}, fmt.Errorf("store the model's CA: %w", err)
	}
	if resp.Succeeded {
		return StoredCA{Cert: certPEM, Key: keyPEM, KeyRevision: resp.Header.Revision}, nil
	}
	return storedCA(resp.Responses[0].GetResponseRange().Kvs, resp.Responses[1].GetResponseRange().Kvs)
}

// ModelCA returns the model's CA as stored; an error matching ErrNotFound
// when the model has none yet.
func (s *State) ModelCA(ctx context.Context) (StoredCA, error) {
	resp, err := s.kv.Txn(ctx).Then(clientv3.OpGet(caCertKey), clientv3.OpGet(caKeyKey)).Commit()
	if err != nil {
		return StoredCA{}, fmt.Errorf("read the model's CA: %w", err)
	}
	cert, key := resp.Responses[0].GetResponseRange().Kvs, resp.Responses[1].GetResponseRange().Kvs
	if len(cert) == 0 && len(key) == 0 {
		return StoredCA{}, notFoundf("the model has no CA yet")
	}
	return storedCA(cert, key)
}

func storedCA(cert, key []*mvccpb.KeyValue) (StoredCA, error) {
	if len(cert) == 0 || len(key) == 0 {
		return StoredCA{}, fmt.Errorf("the model's CA is stored incompletely (certificate %t, key %t): restore %s and %s",
			len(cert) > 0, len(key) > 0, caCertKey, caKeyKey)
	}
	return StoredCA{Cert: cert[0].Value, Key: key[0].Value, KeyRevision: key[0].ModRevision}, nil
}

// ReplaceCAKey stores keyPEM as the model's CA key in place of old.Key
// (sealing a key stored in clear, or sealing it anew) if the key is still
// old's (its revision) and the certificate old.Cert; ok says whether it
// did. When it did not, the CA stored now is returned, for the caller to
// decide again: two controllers sealing at once never overwrite each
// other's key, which only one of them could then open.
func (s *State) ReplaceCAKey(ctx context.Context, old StoredCA, keyPEM []byte) (StoredCA, bool, error) {
	if len(keyPEM) == 0 || old.KeyRevision == 0 {
		return StoredCA{}, false, invalidf("replacing the CA key needs the key and the revision of the one it replaces")
	}
	resp, err := s.kv.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(caKeyKey), "=", old.KeyRevision), clientv3.Compare(clientv3.Value(caCertKey), "=", string(old.Cert))).
		Then(clientv3.OpPut(caKeyKey, string(keyPEM))).
		Else(clientv3.OpGet(caCertKey), clientv3.OpGet(caKeyKey)).
		Commit()
	if err != nil {
		return StoredCA{}, false, fmt.Errorf("store the model's CA key: %w", err)
	}
	if resp.Succeeded {
		return StoredCA{Cert: old.Cert, Key: keyPEM, KeyRevision: resp.Header.Revision}, true, nil
	}
	now, err := storedCA(resp.Responses[0].GetResponseRange().Kvs, resp.Responses[1].GetResponseRange().Kvs)
	return now, false, err
}

// ControllerInfo is a live controller.
type ControllerInfo struct {
	ID        string   `json:"id"`
	Addresses []string `json:"addresses"`
	// Leader says whether it runs the singleton workers.
	Leader bool `json:"-"`
}

// RegisterController makes controller id, reachable at addrs, live until the
// returned Presence is closed or ttl after this process stops keeping it.
func (s *State) RegisterController(ctx context.Context, id string, addrs []string, ttl time.Duration) (*Presence, error) {
	if id == "" || strings.Contains(id, "/") {
		return nil, invalidf("invalid controller id %q", id)
	}
	v, err := json.Marshal(ControllerInfo{ID: id, Addresses: addrs})
	if err != nil {
		return nil, err
	}
	return s.leased(ctx, controllersPrefix+id, string(v), ttl)
}

// Controllers returns the live controllers, by id, marking the leader.
func (s *State) Controllers(ctx context.Context) ([]ControllerInfo, error) {
	resp, err := s.kv.Txn(ctx).Then(
		clientv3.OpGet(controllersPrefix, clientv3.WithPrefix()),
		clientv3.OpGet(LeaderElection+"/", clientv3.WithFirstCreate()...),
	).Commit()
	if err != nil {
		return nil, fmt.Errorf("list controllers: %w", err)
	}
	var leader []byte
	if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) > 0 {
		leader = kvs[0].Value
	}
	var out []ControllerInfo
	for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
		var c ControllerInfo
		if err := json.Unmarshal(kv.Value, &c); err != nil {
			return nil, fmt.Errorf("decode %s: %w", kv.Key, err)
		}
		c.Leader = leader != nil && bytes.Equal(leader, []byte(c.ID))
		out = append(out, c)
	}
	return out, nil
}

// ControllerAddresses returns the addresses of every live controller, the
// leader's first, each once.
func (s *State) ControllerAddresses(ctx context.Context) ([]string, error) {
	cs, err := s.Controllers(ctx)
	if err != nil {
		return nil, err
	}
	slices.SortStableFunc(cs, func(a, b ControllerInfo) int {
		switch {
		case a.Leader == b.Leader:
			return 0
		case a.Leader:
			return -1
		}
		return 1
	})
	var out []string
	for _, c := range cs {
		for _, a := range c.Addresses {
			if !slices.Contains(out, a) {
				out = append(out, a)
			}
		}
	}
	return out, nil
}
