package controllertest

import (
	"bytes"

	"github.com/lifelinehq/lifeline/internal/charm"
	pb "github.com/lifelinehq/lifeline/proto/lifeline/v1"
)

// Upload packs a charm directory and uploads it through op.
func (e *Env) Upload(op pb.OperatorServiceClient, dir string) *pb.Charm {
	e.T.Helper()
	var buf bytes.Buffer
	info, err := charm.Pack(dir, &buf)
	if err != nil {
		e.T.Fatal(err)
	}
	stream, err := op.UploadCharm(e.Ctx)
	if err != nil {
		e.T.Fatal(err)
	}
	data := buf.Bytes()
	if err := stream.Send(&pb.UploadCharmRequest{Part: &pb.UploadCharmRequest_Header{Header: &pb.UploadCharmHeader{Size: int64(len(data)), Sha256: info.SHA256}}}); err != nil {
		e.T.Fatal(err)
	}
	for off := 0; off < len(data); off += 1 << 20 {
		if err := stream.Send(&pb.UploadCharmRequest{Part: &pb.UploadCharmRequest_Chunk{Chunk: data[off:min(off+1<<20, len(data))]}}); err != nil {
			e.T.Fatal(err)
		}
	}
	resp, err := stream.CloseAndRecv()
	if err != nil {
		e.T.Fatalf("UploadCharm(%s): %v", dir, err)
	}
	return resp.Charm
}
