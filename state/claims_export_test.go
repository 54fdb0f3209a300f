package state

import pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"

// StaticConflict is staticConflict for the external tests: the conflict
// as a refusal says it, with "%s" for the other unit, or "".
func StaticConflict(a, b *pb.StaticClaims) string {
	what, detail := staticConflict(a, b)
	if what == "" {
		return ""
	}
	return what + " is claimed by %s" + detail
}
