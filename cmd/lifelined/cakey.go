package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lifelinehq/lifeline/internal/apiclient"
	"github.com/lifelinehq/lifeline/internal/pki"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// The model's CA, which every controller of the model serves with. Its
// certificate and its key, sealed with a key-encryption key (KEK), are in
// etcd; each controller keeps the CA and the KEK in its data directory.
// The KEK never goes into etcd: a controller joining the model receives
// it from another, once, for a join token (ctl add-controller).

// caSetup finds the model's CA for a starting controller.
type caSetup struct {
	st *state.State
	// dir is the data directory's pki directory.
	dir string
	// joinToken is where to read a controller join token ("-": stdin),
	// when the controller has no KEK that opens the stored CA key; empty
	// for none.
	joinToken string
	stdin     io.Reader
	// reseal makes a new KEK and seals the CA key with it, from the CA in
	// dir, when no KEK this controller has opens the stored one.
	reseal bool
	// join asks the controllers a token names for the KEK (joinModel
	// when nil).
	join   func(ctx context.Context, j pki.ControllerJoin, stored state.StoredCA) (pki.KEK, error)
	logger hclog.Logger
}

// maxSealAttempts bounds how often the controller reads the stored CA again
// after another controller changed its key meanwhile.
const maxSealAttempts = 8

// errNeedJoin is the one line a controller that cannot read the model's
// CA key stops with.
var errNeedJoin = errors.New("this controller cannot read the model's CA key, which only its controllers can open: " +
	"run `ctl add-controller` and start this one with --join-file FILE (FILE holding the token it prints)")

// run returns the model's CA and the KEK that opens the stored key (zero
// when this controller holds none). A controller that starts a model
// stores its CA, the key sealed with a KEK it makes; one that finds the
// key stored in clear (a model older than sealing) seals it; one that
// joins reads the key with the KEK its join token gets it.
func (c *caSetup) run(ctx context.Context) (*pki.CA, pki.KEK, error) {
	if c.join == nil {
		c.join = joinModel
	}
	local, err := pki.LoadCA(c.dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, pki.KEK{}, err
	}
	kek, haveKEK, err := pki.LoadKEK(c.dir)
	if err != nil {
		return nil, pki.KEK{}, err
	}
	stored, err := c.st.ModelCA(ctx)
	switch {
	case errors.Is(err, state.ErrNotFound) && c.joinToken != "":
		return nil, pki.KEK{}, errors.New("the model has no CA yet, so there is nothing to join: check --etcd-endpoints and --namespace")
	case errors.Is(err, state.ErrNotFound):
		return c.first(ctx, local, kek, haveKEK)
	case err != nil:
		return nil, pki.KEK{}, err
	}
	return c.fromStored(ctx, stored, local, kek, haveKEK)
}

// first stores this controller's CA (made now if its data directory holds
// none) as the model's, its key sealed with its KEK (made now if it has
// none, and saved before the sealed key is stored), unless another
// controller stores one first.
func (c *caSetup) first(ctx context.Context, local *pki.CA, kek pki.KEK, haveKEK bool) (*pki.CA, pki.KEK, error) {
	if local == nil {
		ca, created, err := pki.LoadOrCreateCA(c.dir)
		if err != nil {
			return nil, pki.KEK{}, err
		}
		if created {
			c.logger.Info("created the model's CA", "dir", c.dir)
		}
		local = ca
	}
	made := false
	if !haveKEK {
		var err error
		if kek, err = c.newKEK(); err != nil {
			return nil, pki.KEK{}, err
		}
		made = true
	}
	sealed, err := local.SealKey(kek)
	if err != nil {
		return nil, pki.KEK{}, err
	}
	stored, err := c.st.SharedCA(ctx, local.CertPEM(), sealed)
	if err != nil {
		return nil, pki.KEK{}, err
	}
	if bytes.Equal(stored.Key, sealed) {
		c.logger.Info("stored the model's CA in etcd, its key sealed with this controller's key-encryption key")
		return local, kek, nil
	}
	// Another controller stored its CA first.
	if made {
		if err := pki.RemoveKEK(c.dir); err != nil {
			return nil, pki.KEK{}, err
		}
		kek, haveKEK = pki.KEK{}, false
	}
	return c.fromStored(ctx, stored, local, kek, haveKEK)
}

// fromStored takes the model's CA as stored: it seals a key stored in clear,
// then finds a KEK that opens the key (its own, or one a join token gets
// it), and the CA (its own when it is the model's, else the one it opens).
func (c *caSetup) fromStored(ctx context.Context, stored state.StoredCA, local *pki.CA, kek pki.KEK, haveKEK bool) (*pki.CA, pki.KEK, error) {
	for attempt := 0; !pki.IsSealedKey(stored.Key); attempt++ {
		if attempt == maxSealAttempts {
			return nil, pki.KEK{}, fmt.Errorf("seal the model's CA key: it changed %d times while this controller tried", attempt)
		}
		var err error
		if stored, local, kek, haveKEK, err = c.sealClear(ctx, stored, local, kek, haveKEK); err != nil {
			return nil, pki.KEK{}, err
		}
	}
	opened, err := c.open(stored, kek, haveKEK)
	if err != nil {
		return nil, pki.KEK{}, err
	}
	if opened == nil && c.joinToken != "" {
		if kek, err = c.useToken(ctx, stored); err != nil {
			return nil, pki.KEK{}, err
		}
		if opened, err = pki.OpenCA(stored.Cert, stored.Key, kek); err != nil {
			return nil, pki.KEK{}, err
		}
		c.logger.Info("joined the model's controllers with a join token: kept the key-encryption key of its CA key", "dir", c.dir)
	} else if opened != nil && c.joinToken != "" {
		c.logger.Info("the data directory holds the key-encryption key of the model's CA key already: --join-file is not used")
	}
	isLocal := sameCert(local, stored.Cert)
	switch {
	case c.reseal && opened != nil:
		c.logger.Info("--reseal-ca-key: this controller's key-encryption key opens the model's CA key: nothing to seal anew")
	case c.reseal && !isLocal:
		return nil, pki.KEK{}, errors.New("--reseal-ca-key needs the model's CA in this data directory, and it holds another or none")
	case c.reseal:
		return c.resealKey(ctx, stored, local)
	}
	switch {
	case isLocal:
		if opened == nil {
			c.logger.Warn("this controller has the model's CA but no key-encryption key that opens the copy in etcd: " +
				"it serves, but cannot hand the key to controllers that join; give it the key with `ctl add-controller` and --join-file, " +
				"or, if no controller has it any more, restart this one with --reseal-ca-key")
		}
		return local, kekIf(opened != nil, kek), nil
	case opened == nil:
		return nil, pki.KEK{}, errNeedJoin
	}
	if err := c.keepCA(opened, local); err != nil {
		return nil, pki.KEK{}, err
	}
	return opened, kek, nil
}

func kekIf(ok bool, k pki.KEK) pki.KEK {
	if ok {
		return k
	}
	return pki.KEK{}
}

// sealClear seals a CA key stored in clear (a model stored before keys
// were sealed) with this controller's KEK, made and saved now if it has
// none, in a transaction that asserts the key is still the one read: of
// controllers sealing at once, one succeeds and the others read its
// sealed key, so none overwrites a key another sealed. The CA read in
// clear is the model's: it is kept in the data directory first, unless it
// is there already, so that a controller that loses the race serves with
// it all the same. It returns the CA stored now, the data directory's CA,
// and the KEK it holds.
func (c *caSetup) sealClear(ctx context.Context, stored state.StoredCA, local *pki.CA, kek pki.KEK, haveKEK bool) (state.StoredCA, *pki.CA, pki.KEK, bool, error) {
	ca, err := pki.ParseCA(stored.Cert, stored.Key)
	if err != nil {
		return stored, local, kek, haveKEK, fmt.Errorf("the model's CA stored in etcd: %w", err)
	}
	if !sameCert(local, stored.Cert) {
		if err := c.keepCA(ca, local); err != nil {
			return stored, local, kek, haveKEK, err
		}
		local = ca
	}
	made := false
	if !haveKEK {
		if kek, err = c.newKEK(); err != nil {
			return stored, local, kek, haveKEK, err
		}
		made = true
	}
	sealed, err := ca.SealKey(kek)
	if err != nil {
		return stored, local, kek, haveKEK, err
	}
	now, ok, err := c.st.ReplaceCAKey(ctx, stored, sealed)
	if err != nil {
		return stored, local, kek, haveKEK, err
	}
	if ok {
		c.logger.Info("sealed the model's CA key, stored in clear in etcd until now, with this controller's key-encryption key")
		return now, local, kek, true, nil
	}
	if made {
		// Another sealed it first: this key seals nothing.
		if err := pki.RemoveKEK(c.dir); err != nil {
			return now, local, kek, haveKEK, err
		}
		return now, local, pki.KEK{}, false, nil
	}
	return now, local, kek, haveKEK, nil
}

// sameCert says whether ca is the CA of certPEM.
func sameCert(ca *pki.CA, certPEM []byte) bool {
	return ca != nil && bytes.Equal(bytes.TrimSpace(ca.CertPEM()), bytes.TrimSpace(certPEM))
}

// keepCA writes the model's CA into the data directory, in place of old
// (nil when the directory held none).
func (c *caSetup) keepCA(ca, old *pki.CA) error {
	if err := pki.SaveCA(c.dir, ca); err != nil {
		return err
	}
	if old == nil {
		c.logger.Info("joined the model: using its CA", "dir", c.dir)
	} else {
		c.logger.Warn("this data directory's CA is not the model's: replaced by the model's (clients that trusted the old one need the model's CA)", "dir", c.dir)
	}
	return nil
}

// open opens the stored CA key with this controller's KEK: nil when it has
// none, or one that does not open it.
func (c *caSetup) open(stored state.StoredCA, kek pki.KEK, haveKEK bool) (*pki.CA, error) {
	if !haveKEK {
		return nil, nil
	}
	ca, err := pki.OpenCA(stored.Cert, stored.Key, kek)
	switch {
	case errors.Is(err, pki.ErrWrongKEK):
		c.logger.Warn("this data directory's key-encryption key does not open the model's CA key (it was sealed again, or the key is another model's)")
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("the model's CA stored in etcd: %w", err)
	}
	return ca, nil
}

// useToken reads the join token and asks the controllers it names for the
// KEK, which it saves in the data directory.
func (c *caSetup) useToken(ctx context.Context, stored state.StoredCA) (pki.KEK, error) {
	text, err := c.readToken()
	if err != nil {
		return pki.KEK{}, err
	}
	j, err := pki.DecodeControllerJoin(text)
	if err != nil {
		return pki.KEK{}, fmt.Errorf("--join-file: %w", err)
	}
	if !bytes.Equal(bytes.TrimSpace([]byte(j.CACert)), bytes.TrimSpace(stored.Cert)) {
		return pki.KEK{}, errors.New("the join token is another model's: its CA is not the one stored in etcd under --namespace")
	}
	if time.Now().After(j.Expires) {
		return pki.KEK{}, fmt.Errorf("the join token expired at %s: make another with ctl add-controller", j.Expires.Format(time.RFC3339))
	}
	kek, err := c.join(ctx, j, stored)
	if err != nil {
		return pki.KEK{}, err
	}
	if _, err := pki.OpenCA(stored.Cert, stored.Key, kek); err != nil {
		return pki.KEK{}, fmt.Errorf("the key-encryption key the join gave: %w", err)
	}
	if err := pki.SaveKEK(c.dir, kek); err != nil {
		return pki.KEK{}, err
	}
	return kek, nil
}

// maxTokenBytes bounds what is read of a join token's file.
const maxTokenBytes = 64 << 10

func (c *caSetup) readToken() (string, error) {
	var r io.Reader = c.stdin
	if c.joinToken != "-" {
		f, err := os.Open(c.joinToken)
		if err != nil {
			return "", fmt.Errorf("--join-file: %w", err)
		}
		defer f.Close()
		r = f
	}
	data, err := io.ReadAll(io.LimitReader(r, maxTokenBytes))
	if err != nil {
		return "", fmt.Errorf("--join-file: %w", err)
	}
	return strings.TrimSpace(string(data)), nil
}

// resealKey makes a new KEK and seals the CA key of this data directory
// with it in place of the stored one, which no KEK this controller holds
// opens: for when none of the model's controllers holds the KEK any more.
// A controller that holds the old KEK serves on, but cannot hand it to a
// joining controller until it is given the new one.
func (c *caSetup) resealKey(ctx context.Context, stored state.StoredCA, local *pki.CA) (*pki.CA, pki.KEK, error) {
	kek, err := c.newKEK()
	if err != nil {
		return nil, pki.KEK{}, err
	}
	sealed, err := local.SealKey(kek)
	if err != nil {
		return nil, pki.KEK{}, err
	}
	if _, ok, err := c.st.ReplaceCAKey(ctx, stored, sealed); err != nil {
		return nil, pki.KEK{}, err
	} else if !ok {
		return nil, pki.KEK{}, errors.New("--reseal-ca-key: the model's CA key changed meanwhile: start this controller again")
	}
	c.logger.Warn("sealed the model's CA key anew with a new key-encryption key (--reseal-ca-key): " +
		"controllers holding the old one cannot hand it to joining controllers until they join again with a token")
	return local, kek, nil
}

// newKEK makes a KEK and saves it in the data directory: before the key
// it seals is stored, so that a crash between the two loses nothing.
func (c *caSetup) newKEK() (pki.KEK, error) {
	kek, err := pki.NewKEK()
	if err != nil {
		return pki.KEK{}, err
	}
	if err := pki.SaveKEK(c.dir, kek); err != nil {
		return pki.KEK{}, err
	}
	return kek, nil
}

// joinTimeout bounds asking one controller for the KEK.
const joinTimeout = 30 * time.Second

// joinModel presents the join token to the controllers it names, in turn,
// trusting only the CA it carries, until one answers the KEK, and checks
// that the KEK opens the stored CA key.
func joinModel(ctx context.Context, j pki.ControllerJoin, stored state.StoredCA) (pki.KEK, error) {
	var failures []string
	for _, addr := range j.Controllers {
		kek, err := joinAt(ctx, j, addr)
		switch {
		case err == nil:
			if _, err := pki.OpenCA(stored.Cert, stored.Key, kek); err != nil {
				return pki.KEK{}, fmt.Errorf("the controller at %s answered a key-encryption key that does not open the model's CA key: %w", addr, err)
			}
			return kek, nil
		case status.Code(err) == codes.Unauthenticated:
			return pki.KEK{}, fmt.Errorf("the join token was refused: %s", status.Convert(err).Message())
		}
		failures = append(failures, fmt.Sprintf("%s: %s", addr, status.Convert(err).Message()))
	}
	return pki.KEK{}, fmt.Errorf("no controller of the join token gave the key-encryption key: %s", strings.Join(failures, "; "))
}

func joinAt(ctx context.Context, j pki.ControllerJoin, addr string) (pki.KEK, error) {
	conn, err := apiclient.Dial(apiclient.Config{Addresses: []string{addr}, CACert: []byte(j.CACert)})
	if err != nil {
		return pki.KEK{}, err
	}
	defer conn.Close()
	cctx, cancel := context.WithTimeout(ctx, joinTimeout)
	defer cancel()
	resp, err := pb.NewControllerJoinServiceClient(conn).JoinController(cctx, &pb.JoinControllerRequest{TokenId: j.ID, Secret: j.Secret})
	if err != nil {
		return pki.KEK{}, err
	}
	return pki.KEKFromBytes(resp.Kek)
}
