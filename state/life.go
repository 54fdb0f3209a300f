package state

import (
	"context"
	"strings"

	"google.golang.org/protobuf/proto"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// lifeName is the lowercase name of a life: "alive", "dying", "dead".
func lifeName(l pb.Life) string {
	return strings.ToLower(strings.TrimPrefix(l.String(), "LIFE_"))
}

// LifeName is the lowercase name of a life, as ctl shows it.
func LifeName(l pb.Life) string { return lifeName(l) }

func protoClone[T proto.Message](m T) T { return proto.Clone(m).(T) }

// listDecoded decodes every value under the prefix.
func listDecoded[T any, P interface {
	*T
	proto.Message
}](ctx context.Context, s *State, prefix string) ([]P, error) {
	kvs, err := s.listAll(ctx, prefix, false)
	if err != nil {
		return nil, err
	}
	out := make([]P, 0, len(kvs))
	for _, kv := range kvs {
		rec, err := decode[T, P](kv)
		if err != nil {
			return nil, err
		}
		out = append(out, rec.v)
	}
	return out, nil
}
