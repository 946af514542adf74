package plugin

import (
	"fmt"
	"math/bits"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// The protocol's messages are encoded as gRPC's own proto codec encodes
// them (the wire is the same, so a plugin in another language sees
// nothing of this), with one difference: the buffers a message is
// marshaled into, read into and assembled in come from dirtyPool, which
// does not clear a buffer it hands out again. gRPC's default pool clears
// every buffer whole (its tiers are 256 B, 4, 16, 32 KiB and 1 MiB, so a
// message of 32 KiB and a few bytes gets a 1 MiB buffer, cleared), and
// in a stream of output that clearing cost more than the copying itself
// (BenchmarkDocker/stream64MiB, issue 54). Every byte of a buffer that
// is read is written first: marshaling writes the message's size, reads
// fill what they return and assembly copies its length.

// codec is the protocol's encoding.CodecV2.
type codec struct{}

// Name is "proto", as the default codec's: the content subtype does not
// change.
func (codec) Name() string { return "proto" }

func (codec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("plugin codec: %T is not a proto message", v)
	}
	size := proto.Size(m)
	opts := proto.MarshalOptions{UseCachedSize: true} // the size just computed, on a message no one changes meanwhile
	if mem.IsBelowBufferPoolingThreshold(size) {
		b, err := opts.Marshal(m)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	buf := dirtyPool.Get(size)
	out, err := opts.MarshalAppend((*buf)[:0], m)
	if err != nil {
		dirtyPool.Put(buf)
		return nil, err
	}
	if len(out) > cap(*buf) { // grown past buf (its size changed meanwhile): out is a new array
		dirtyPool.Put(buf)
		return mem.BufferSlice{mem.SliceBuffer(out)}, nil
	}
	*buf = (*buf)[:len(out)] // in buf: only the bytes written
	return mem.BufferSlice{mem.NewBuffer(buf, dirtyPool)}, nil
}

func (codec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("plugin codec: %T is not a proto message", v)
	}
	buf := data.MaterializeToBuffer(dirtyPool)
	defer buf.Free()
	return proto.Unmarshal(buf.ReadOnlyData(), m)
}

// codecServerOptions and codecDialOptions put the codec and the pool on
// a gRPC server of the protocol and on the host's connection.
func codecServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ForceServerCodecV2(codec{}), experimental.BufferPool(dirtyPool)}
}

func codecDialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithDefaultCallOptions(grpc.ForceCodecV2(codec{})), experimental.WithBufferPool(dirtyPool)}
}

// dirtyPool is a mem.BufferPool of power-of-two tiers from 4 KiB to
// 16 MiB that hands out buffers as they were put back; a larger buffer
// is allocated and dropped.
var dirtyPool = &tieredPool{}

const (
	minTier = 12 // 4 KiB
	maxTier = 24 // 16 MiB
)

type tieredPool struct {
	tiers [maxTier - minTier + 1]sync.Pool
}

// tier returns the exponent of the smallest tier that holds size.
func tier(size int) int {
	return max(bits.Len(uint(size-1)), minTier)
}

func (p *tieredPool) Get(size int) *[]byte {
	t := tier(size)
	if t > maxTier {
		b := make([]byte, size)
		return &b
	}
	if b, ok := p.tiers[t-minTier].Get().(*[]byte); ok {
		*b = (*b)[:size]
		return b
	}
	b := make([]byte, size, 1<<t)
	return &b
}

func (p *tieredPool) Put(b *[]byte) {
	c := cap(*b)
	if c < 1<<minTier || c > 1<<maxTier || c&(c-1) != 0 {
		return // not one of the tiers' buffers
	}
	p.tiers[bits.Len(uint(c))-1-minTier].Put(b)
}
