package state

import (
	"sort"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/lifelinehq/lifeline/internal/names"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// maxAuditEntryBytes bounds an entry's record (boundEntry keeps it below).
const maxAuditEntryBytes = 8 << 10

// checkUsers checks the users and their registrations and credentials:
// each user's record is of its key and has a role; a user has a pending
// registration exactly when it has not registered, and a credential only
// once it has; while there are users, one of them is a registered admin
// (O1); there are at most MaxUsers.
func checkUsers(snap *Snapshot, bad func(string, ...any)) {
	users := map[string]*pb.User{}
	admins := 0
	for k, v := range snap.Values {
		if !strings.HasPrefix(k, usersPrefix) {
			continue
		}
		name := strings.TrimPrefix(k, usersPrefix)
		u := &pb.User{}
		if err := proto.Unmarshal(v, u); err != nil {
			bad("%s: undecodable value: %v", k, err)
			continue
		}
		users[name] = u
		if u.Name != name || !names.ValidUser(name) {
			bad("user key %s holds user %q", k, u.Name)
		}
		if checkRole(u.Role) != nil {
			bad("user %s has no valid role (%v)", name, u.Role)
		}
		if u.CreatedUnixNano == 0 {
			bad("user %s has no creation time", name)
		}
		_, pending := snap.Values[RegistrationKey(name)]
		if pending == u.Registered {
			bad("user %s: registered %v, pending registration %v: want exactly one", name, u.Registered, pending)
		}
		if _, ok := snap.Values[credentialKey(names.UserTag(name))]; ok && !u.Registered {
			bad("user %s has a credential but has not registered", name)
		}
		if u.Registered && u.Role == pb.UserRole_USER_ROLE_ADMIN {
			admins++
		}
	}
	if len(users) > 0 && admins == 0 {
		bad("O1: %d users and no registered admin among them", len(users))
	}
	if len(users) > MaxUsers {
		bad("%d users, over the limit of %d", len(users), MaxUsers)
	}
	for k, v := range snap.Values {
		if !strings.HasPrefix(k, registrationsPrefix) {
			continue
		}
		name := strings.TrimPrefix(k, registrationsPrefix)
		if users[name] == nil {
			bad("registration %s of user %s, who does not exist", k, name)
		}
		reg := &pb.Registration{}
		switch err := proto.Unmarshal(v, reg); {
		case err != nil:
			bad("%s: undecodable value: %v", k, err)
		case reg.SecretHash == "" || reg.ExpiresUnixNano == 0:
			bad("registration %s has no secret hash or no expiry", k)
		}
	}
}

// checkAudit checks the audit log: every entry is at the key of its seq,
// at or below seq/audit, within its size, names its call, and the entries
// left are numbered without gaps up to seq/audit (O3: pruning deletes the
// oldest only). A refused call's entry (not changed, not pending) holds a
// code other than OK.
func checkAudit(snap *Snapshot, bad func(string, ...any)) {
	var last int64
	if v, ok := snap.Values[seqAudit]; ok {
		n, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil {
			bad("%s: corrupt sequence %q", seqAudit, v)
		}
		last = n
	}
	var seqs []int64
	for k, v := range snap.Values {
		if !strings.HasPrefix(k, auditPrefix) {
			continue
		}
		seq, err := parseAuditKey(k)
		if err != nil {
			bad("%v", err)
			continue
		}
		seqs = append(seqs, seq)
		if len(v) > maxAuditEntryBytes {
			bad("audit entry %d is %d bytes, over %d", seq, len(v), maxAuditEntryBytes)
		}
		e := &pb.AuditEntry{}
		if err := proto.Unmarshal(v, e); err != nil {
			bad("%s: undecodable value: %v", k, err)
			continue
		}
		switch {
		case e.Seq != seq:
			bad("audit key %s holds entry %d", k, e.Seq)
		case seq > last:
			bad("audit entry %d is past its sequence %d", seq, last)
		case e.Rpc == "" || e.UnixNano == 0:
			bad("audit entry %d names no call or no time", seq)
		case !e.Changed && e.Pending:
			bad("audit entry %d of a refused call is pending", seq)
		case !e.Changed && e.Code == 0:
			bad("audit entry %d records a call that neither changed anything nor was refused", seq)
		}
	}
	if len(seqs) == 0 {
		return
	}
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	if lo, hi := seqs[0], seqs[len(seqs)-1]; hi != last || hi-lo+1 != int64(len(seqs)) {
		bad("audit log holds %d entries from %d to %d, its sequence at %d: not every entry from the oldest on", len(seqs), lo, hi, last)
	}
}
