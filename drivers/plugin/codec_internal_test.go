package plugin

import (
	"bytes"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/berthdev/berth/drivers/plugin/internal/pluginpb"
)

// The pool hands out a buffer of the length asked for from the smallest
// tier that holds it, takes back only its tiers' buffers, and a buffer
// put back comes out again as it was (not cleared).
func TestDirtyPoolTiers(t *testing.T) {
	for _, c := range []struct{ size, cap int }{{1, 4 << 10}, {4 << 10, 4 << 10}, {4<<10 + 1, 8 << 10}, {32<<10 + 4, 64 << 10}, {1<<20 - poolFit, 1 << 20}, {16 << 20, 16 << 20}, {16<<20 + 1, 16<<20 + 1}} {
		b := dirtyPool.Get(c.size)
		if len(*b) != c.size || cap(*b) != c.cap {
			t.Errorf("Get(%d): len %d cap %d, want len %d cap %d", c.size, len(*b), cap(*b), c.size, c.cap)
		}
		dirtyPool.Put(b)
	}
	// sync.Pool may drop what it holds at any GC, so a reuse is looked
	// for over a few tries.
	for try := 0; ; try++ {
		b := dirtyPool.Get(100 << 10)
		(*b)[0] = 0xAB
		dirtyPool.Put(b)
		if c := dirtyPool.Get(90 << 10); (*c)[0] == 0xAB {
			dirtyPool.Put(c)
			break
		}
		if try == 20 {
			t.Fatal("a buffer put back never came out again uncleared")
		}
	}
	odd := make([]byte, 3000, 5000) // not a tier's: dropped, never handed out
	dirtyPool.Put(&odd)
}

// The codec's bytes are the proto encoding of the message, so a plugin
// in another language reads them, and a message of any size round-trips,
// also when it arrives in pieces (gRPC's frames).
func TestCodecRoundTrip(t *testing.T) {
	for _, n := range []int{0, 10, 32 << 10, 1<<20 - poolFit, 3 << 20} {
		in := &pluginpb.StartOut{Msg: &pluginpb.StartOut_Stdout{Stdout: bytes.Repeat([]byte{'x'}, n)}}
		data, err := codec{}.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		want, err := proto.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		if got := data.Materialize(); !bytes.Equal(got, want) {
			t.Fatalf("%d bytes: the codec's encoding differs from proto.Marshal's", n)
		}
		var pieces mem.BufferSlice // in 16 KiB pieces, as frames come
		flat := data.Materialize()
		for len(flat) > 0 {
			k := min(len(flat), 16<<10)
			pieces = append(pieces, mem.SliceBuffer(flat[:k]))
			flat = flat[k:]
		}
		data.Free()
		var out pluginpb.StartOut
		if err := (codec{}).Unmarshal(pieces, &out); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out.GetStdout(), in.GetStdout()) {
			t.Fatalf("%d bytes: round trip changed the payload", n)
		}
	}
	if _, err := (codec{}).Marshal("not a message"); err == nil {
		t.Error("Marshal of a string: no error")
	}
}
