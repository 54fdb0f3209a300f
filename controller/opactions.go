package controller

import (
	"fmt"
	"sync"

	"github.com/lifelinehq/lifeline/internal/charm"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// maxCachedActions bounds the charms whose parsed actions the controller
// keeps.
const maxCachedActions = 64

// actionsCache keeps the actions parsed from charms' stored actions.yaml,
// by the charm archive's sha256: a charm revision's record never changes,
// and parsing compiles every action's schema. The oldest parsed goes
// first once it is full. Its zero value is ready.
type actionsCache struct {
	mu    sync.Mutex
	bySha map[string]*charm.Actions
	order []string // shas, oldest first
}

// get returns the actions of the charm rec.
func (c *actionsCache) get(rec *pb.Charm) (*charm.Actions, error) {
	c.mu.Lock()
	a, ok := c.bySha[rec.Sha256]
	c.mu.Unlock()
	if ok {
		return a, nil
	}
	a, err := charm.ParseActions(rec.ActionsYaml)
	if err != nil {
		// Checked when the charm was uploaded: the record is not what
		// was stored then.
		return nil, fmt.Errorf("charm %s revision %d: its stored actions.yaml: %v", rec.Name, rec.Revision, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.bySha == nil {
		c.bySha = map[string]*charm.Actions{}
	}
	if _, ok := c.bySha[rec.Sha256]; !ok {
		if len(c.order) >= maxCachedActions {
			delete(c.bySha, c.order[0])
			c.order = c.order[1:]
		}
		c.bySha[rec.Sha256] = a
		c.order = append(c.order, rec.Sha256)
	}
	return c.bySha[rec.Sha256], nil
}
