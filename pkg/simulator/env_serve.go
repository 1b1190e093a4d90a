package simulator

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/gpusched/gpusched/pkg/policyservice/v1alpha1"
)

// The environment's requests and replies: one call at a time (Handle), or a
// training program's over stdio (ServeEnv).

// Handle answers one request; a refused or failed call is an error reply.
func (e *Env) Handle(ctx context.Context, req *pb.EnvRequest) *pb.EnvReply {
	switch call := req.GetCall().(type) {
	case *pb.EnvRequest_Reset_:
		reply, err := e.Reset(ctx, call.Reset_.Seed, call.Reset_.Actions...)
		if err != nil {
			return &pb.EnvReply{Reply: &pb.EnvReply_Error{Error: "reset: " + err.Error()}}
		}
		return &pb.EnvReply{Reply: &pb.EnvReply_Reset_{Reset_: reply}}
	case *pb.EnvRequest_Step:
		reply, err := e.Step(ctx, call.Step.Action)
		if err != nil {
			return &pb.EnvReply{Reply: &pb.EnvReply_Error{Error: "step: " + err.Error()}}
		}
		return &pb.EnvReply{Reply: &pb.EnvReply_Step{Step: reply}}
	case *pb.EnvRequest_Finish:
		reply, err := e.Finish(ctx)
		if err != nil {
			return &pb.EnvReply{Reply: &pb.EnvReply_Error{Error: "finish: " + err.Error()}}
		}
		return &pb.EnvReply{Reply: &pb.EnvReply_Step{Step: reply}}
	default:
		return &pb.EnvReply{Reply: &pb.EnvReply_Error{Error: "empty request: want reset, step or finish"}}
	}
}

// maxFrame bounds a request frame: a seed, an action, or the actions a reset
// replays (a few bytes each).
const maxFrame = 16 << 20

// ServeEnv answers the environment's requests read from in, each frame a
// 4-byte little-endian length and an EnvRequest, with EnvReply frames
// written to out, until in ends.
func ServeEnv(ctx context.Context, env *Env, in io.Reader, out io.Writer) error {
	r := bufio.NewReaderSize(in, 64<<10)
	w := bufio.NewWriterSize(out, 1<<20)
	var head [4]byte
	var buf, reply []byte
	for {
		t0 := time.Now()
		if _, err := io.ReadFull(r, head[:]); err != nil {
			if err == io.EOF {
				return nil
			}
			return fmt.Errorf("reading a request's length: %w", err)
		}
		n := binary.LittleEndian.Uint32(head[:])
		if n > maxFrame {
			return fmt.Errorf("a request of %d bytes: want at most %d (is the input framed as 4-byte little-endian length + EnvRequest?)", n, maxFrame)
		}
		buf = slices.Grow(buf[:0], int(n))[:n]
		if _, err := io.ReadFull(r, buf); err != nil {
			return fmt.Errorf("reading a request of %d bytes: %w", n, err)
		}
		t1 := time.Now()
		env.timings.Wait += t1.Sub(t0)
		var req pb.EnvRequest
		var answer *pb.EnvReply
		err := proto.Unmarshal(buf, &req)
		t2 := time.Now()
		if err != nil {
			answer = &pb.EnvReply{Reply: &pb.EnvReply_Error{Error: fmt.Sprintf("a request of %d bytes is not an EnvRequest: %v", n, err)}}
		} else {
			answer = env.Handle(ctx, &req)
		}
		t3 := time.Now()
		if reply, err = (proto.MarshalOptions{}).MarshalAppend(reply[:0], answer); err != nil {
			return fmt.Errorf("encoding a reply: %w", err)
		}
		binary.LittleEndian.PutUint32(head[:], uint32(len(reply)))
		if _, err := w.Write(head[:]); err != nil {
			return err
		}
		if _, err := w.Write(reply); err != nil {
			return err
		}
		if err := w.Flush(); err != nil {
			return err
		}
		env.timings.Codec += t2.Sub(t1) + time.Since(t3)
	}
}
