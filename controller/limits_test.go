package controller_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
	"github.com/lifelinehq/lifeline/state"
)

// TestOversizedValuesAreInvalid sends values past each size limit through
// the API, as an operator or an agent could: every one is refused as
// InvalidArgument with a sentence naming the limit, before etcd, whose
// own refusal of a request over 1.5 MiB said nothing of what was too
// large and reached the caller as Internal. Nothing is written.
func TestOversizedValuesAreInvalid(t *testing.T) {
	m := newAgentModel(t)
	op := m.admin()
	upload(t, m.ctx, op, "testdata/kv")
	must(t, "Deploy kv2", deployErr(m, op, "kv2", nil))
	big := strings.Repeat("x", 3<<20)
	before := m.snapshot()

	tests := []struct {
		name string
		call func() error
		want string
	}{
		{"SetConfig of 3 MiB", func() error {
			_, err := op.SetConfig(m.ctx, &pb.SetConfigRequest{Service: "kv2", Set: map[string]string{"name": big}})
			return err
		}, "the configuration of service kv2 would be 3.0 MiB: at most 512 KiB"},
		{"Deploy with a config of 3 MiB", func() error {
			return deployErr(m, op, "kv3", map[string]string{"name": big})
		}, "the configuration of service kv3 would be 3.0 MiB: at most 512 KiB"},
		{"settings grown past their limit, 40 KiB a call", func() error {
			// Each call is within what one update may carry; together
			// they would grow the record without end.
			c := m.as("unit-app/0")
			for i := range 40 {
				_, err := c.UpdateSettings(m.ctx, &pb.UpdateSettingsRequest{Unit: "app/0", Updates: []*pb.SettingsUpdate{{
					Relation: m.global, Set: map[string]string{fmt.Sprintf("k%d", i): strings.Repeat("y", 40<<10)},
				}}})
				if err != nil {
					return err
				}
			}
			return nil
		}, fmt.Sprintf("the settings of unit app/0 in relation %d would be", m.global)},
		{"a charm whose config.yaml aliases expand past the limit", func() error {
			data, sha := aliasedCharm(t)
			_, err := uploadBytes(m.ctx, op, data, sha)
			return err
		}, "config.yaml: options.o"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if s, _ := status.FromError(err); s.Code() != codes.InvalidArgument || !strings.Contains(s.Message(), tt.want) {
				t.Fatalf("%s = %v, want InvalidArgument saying %q", tt.name, err, tt.want)
			}
		})
	}
	// The settings that fitted were written, and app/0's credential, and
	// the operator's refusals went into the audit log, as every refusal
	// does; nothing else was.
	after := m.snapshot()
	for k, v := range after.Values {
		if strings.HasPrefix(k, state.AuditPrefix) || k == state.AuditSeqKey {
			continue
		}
		if w, ok := before.Values[k]; (!ok || !bytes.Equal(v, w)) && k != fmt.Sprintf("settings/%d/app/0", m.global) && k != "credentials/unit-app/0" {
			t.Errorf("an oversized value changed %s", k)
		}
	}
}

func deployErr(m *agentModel, op pb.OperatorServiceClient, name string, cfg map[string]string) error {
	_, err := op.Deploy(m.ctx, &pb.DeployRequest{Charm: "kv", Service: name, Config: cfg})
	return err
}

// aliasedCharm packs a kv charm with a config.yaml whose hundred options
// each default, through a YAML alias, to one 60 KiB string: an archive of
// a kilobyte or so whose options, written out, are 6 MiB. It is packed by
// hand: charm.Pack refuses such a charm, as the controller must.
func aliasedCharm(t *testing.T) ([]byte, string) {
	t.Helper()
	var cfg strings.Builder
	fmt.Fprintf(&cfg, "long: &l %q\noptions:\n", strings.Repeat("a", 60<<10))
	for i := range 100 {
		fmt.Fprintf(&cfg, "  o%d: {default: *l}\n", i)
	}
	meta, err := os.ReadFile("testdata/kv/metadata.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, f := range []struct {
		name string
		data []byte
	}{{"metadata.yaml", meta}, {"config.yaml", []byte(cfg.String())}} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.data)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(f.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if buf.Len() > 2<<10 {
		t.Fatalf("the aliased charm packs to %d bytes, want a kilobyte or so", buf.Len())
	}
	sum := sha256.Sum256(buf.Bytes())
	return buf.Bytes(), hex.EncodeToString(sum[:])
}
