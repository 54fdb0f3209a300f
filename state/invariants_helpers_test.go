package state_test

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

func reID(t *testing.T, machine []byte, id string) []byte {
	t.Helper()
	m := &pb.Machine{}
	if err := proto.Unmarshal(machine, m); err != nil {
		t.Fatal(err)
	}
	m.Id = id
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func deadUnit(t *testing.T, unit []byte) []byte {
	t.Helper()
	u := &pb.Unit{}
	if err := proto.Unmarshal(unit, u); err != nil {
		t.Fatal(err)
	}
	u.Life = pb.Life_LIFE_DEAD
	b, err := proto.Marshal(u)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func containsLine(s, want string) bool {
	for _, line := range strings.Split(s, "\n") {
		if strings.Contains(line, want) {
			return true
		}
	}
	return false
}
