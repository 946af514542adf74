package prpwire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/berthdev/berth/internal/prp"

	"github.com/google/go-cmp/cmp"
)

// PRP-1, CapBinaryOutput: an output frame carries the bytes as they are
// (invalid UTF-8 included) with its session, seq, ack, task, stream and
// offset, and decodes without copying them.
func TestOutputFrameRoundTrip(t *testing.T) {
	t.Parallel()
	data := []byte{0xff, 0xfe, 'a', 0x00, 0xc3, 0x28, '\n'}
	in := OutputFrame{Version: 1, Session: "s_1", Seq: 7, Ack: 3, TaskID: "task.1", Output: prp.Output{Stream: prp.Stderr, Offset: 1 << 40, Data: data}}
	frame, err := AppendOutputFrame(nil, in, DefaultMaxFrame)
	if err != nil {
		t.Fatal(err)
	}
	if len(frame) != in.Size() || len(frame) != OutputFrameHeader+len("s_1")+len("task.1")+len(data) {
		t.Fatalf("frame of %d bytes, Size %d", len(frame), in.Size())
	}
	got, err := DecodeOutputFrame(frame, DefaultMaxFrame)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(in, got); diff != "" {
		t.Errorf("decoded frame (-want +got):\n%s", diff)
	}
	if &got.Output.Data[0] != &frame[len(frame)-len(data)] {
		t.Error("Data was copied; want it to alias the frame")
	}
	ev := got.Event()
	if err := ValidateEvent(ev); err != nil || ev.Kind != prp.EventOutput || ev.TaskID != "task.1" || !bytes.Equal(ev.Output.Data, data) {
		t.Errorf("prp.Event() = %+v, %v", ev, err)
	}
	// Appending reuses dst's capacity.
	buf := make([]byte, 0, 256)
	out, err := AppendOutputFrame(buf, in, 0)
	if err != nil || &out[0] != &buf[:1][0] {
		t.Errorf("AppendOutputFrame did not reuse dst: %v", err)
	}
}

func TestOutputFrameRejects(t *testing.T) {
	t.Parallel()
	good := OutputFrame{Version: 1, Session: "s_1", Seq: 1, TaskID: "t", Output: prp.Output{Stream: prp.Stdout, Data: []byte("x")}}
	valid, err := AppendOutputFrame(nil, good, 0)
	if err != nil {
		t.Fatal(err)
	}
	mutate := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(valid)) }
	for _, tc := range []struct {
		name  string
		frame []byte
		want  error
		field string
	}{
		{"empty", nil, ErrFrame, "shorter"},
		{"short header", valid[:OutputFrameHeader-1], ErrFrame, "shorter"},
		{"unknown kind", mutate(func(b []byte) []byte { b[0] = '{'; return b }), ErrFrame, "kind"},
		{"version 0", mutate(func(b []byte) []byte { b[1] = 0; return b }), ErrFrame, "version"},
		{"unknown stream", mutate(func(b []byte) []byte { b[2] = 3; return b }), ErrFrame, "stream"},
		{"empty session", mutate(func(b []byte) []byte { b[3] = 0; return b }), ErrFrame, "session"},
		{"ids past the end", mutate(func(b []byte) []byte { b[4] = 200; return b }), ErrFrame, "ids"},
		{"reserved set", mutate(func(b []byte) []byte { b[6] = 1; return b }), ErrFrame, "reserved"},
		{"seq 0", mutate(func(b []byte) []byte { binary.BigEndian.PutUint64(b[8:], 0); return b }), ErrFrame, "seq"},
		{"negative offset", mutate(func(b []byte) []byte { binary.BigEndian.PutUint64(b[24:], 1<<63); return b }), ErrFrame, "offset"},
		{"bad task id", mutate(func(b []byte) []byte { b[OutputFrameHeader+3] = '/'; return b }), ErrFrame, "task_id"},
		{"over the limit", append(bytes.Clone(valid), make([]byte, MinMaxFrame)...), ErrFrameTooLarge, "limit"},
	} {
		_, err := DecodeOutputFrame(tc.frame, MinMaxFrame)
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: err = %v, want %v naming %q", tc.name, err, tc.want, tc.field)
		}
	}
	for _, tc := range []struct {
		name string
		f    func(*OutputFrame)
	}{
		{"version", func(f *OutputFrame) { f.Version = 256 }},
		{"session", func(f *OutputFrame) { f.Session = "" }},
		{"task_id", func(f *OutputFrame) { f.TaskID = strings.Repeat("t", 129) }},
		{"seq", func(f *OutputFrame) { f.Seq = 0 }},
		{"stream", func(f *OutputFrame) { f.Output.Stream = "stdin" }},
		{"offset", func(f *OutputFrame) { f.Output.Offset = -1 }},
	} {
		f := good
		tc.f(&f)
		if _, err := AppendOutputFrame(nil, f, 0); !errors.Is(err, ErrFrame) || !strings.Contains(err.Error(), tc.name) {
			t.Errorf("encode with a bad %s: err = %v", tc.name, err)
		}
	}
	big := good
	big.Output.Data = make([]byte, MinMaxFrame)
	if _, err := AppendOutputFrame(nil, big, MinMaxFrame); !errors.Is(err, ErrFrameTooLarge) {
		t.Errorf("encode over the limit: err = %v, want ErrFrameTooLarge", err)
	}
}
