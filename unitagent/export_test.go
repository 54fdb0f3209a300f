package unitagent

// LoadState reads the local state in a unit's data directory as its agent
// does when it starts, without changing anything, and returns the state
// machine's state ("new" when there is none yet) and the members of each
// relation with the settings version last delivered. It fails when the
// state on disk is not a consistent whole.
func LoadState(dir string) (string, map[int64]map[string]int64, error) {
	l, err := newStateStore(dir).load()
	if err != nil {
		return "", nil, err
	}
	members := map[int64]map[string]int64{}
	for id, lr := range l.Relations {
		members[id] = lr.Members
	}
	return l.State, members, nil
}
