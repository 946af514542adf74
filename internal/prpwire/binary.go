package prpwire

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/berthdev/berth/internal/prp"
)

// CapBinaryOutput gates binary output frames: when the runner offers it in
// the Hello and the controller grants it in the Welcome, the runner sends
// every output event as a binary WebSocket message (an OutputFrame) instead
// of a JSON envelope with base64 data; every other message stays JSON. A
// session without the grant uses JSON for output too.
const CapBinaryOutput Capability = "binary_output"

// OutputFrame is an output event in a binary frame (CapBinaryOutput). On
// the wire it is a fixed header followed by the two ids and the bytes; all
// integers are big-endian:
//
//	off len field
//	0   1   kind: BinaryOutputKind
//	1   1   version: the session's protocol version (1..255)
//	2   1   stream: 1 stdout, 2 stderr
//	3   1   length of the session id (1..128)
//	4   1   length of the task id (1..128)
//	5   3   reserved, zero
//	8   8   seq: the event's seq on the runner's sequence (> 0)
//	16  8   ack: the runner's cumulative ack of commands
//	24  8   offset of Data in the stream (0..2^63-1)
//	32  -   session id, task id, then Data to the end of the frame
//
// The ids obey ValidID. The frame is the event prp.Event{Kind: prp.EventOutput,
// TaskID, Output: &prp.Output{Stream, Offset, Data}} with seq Seq; its message
// id is implied ("e<seq>").
type OutputFrame struct {
	Version int
	Session string
	Seq     uint64
	Ack     uint64
	TaskID  string
	Output  prp.Output
}

// BinaryOutputKind is the first byte of an OutputFrame.
const BinaryOutputKind = 0x01

// OutputFrameHeader is the size of an OutputFrame's fixed header; the
// frame is that plus the two ids plus the data.
const OutputFrameHeader = 32

// Event returns the frame's event; its Data aliases the frame's.
func (f *OutputFrame) Event() prp.Event {
	out := f.Output
	return prp.Event{Kind: prp.EventOutput, TaskID: f.TaskID, Output: &out}
}

func streamByte(s prp.Stream) (byte, bool) {
	switch s {
	case prp.Stdout:
		return 1, true
	case prp.Stderr:
		return 2, true
	}
	return 0, false
}

// Size returns the encoded size of f.
func (f *OutputFrame) Size() int {
	return OutputFrameHeader + len(f.Session) + len(f.TaskID) + len(f.Output.Data)
}

// AppendOutputFrame validates f and appends its encoding to dst; the
// result is at most maxFrame bytes (HardMaxFrame if maxFrame <= 0 or
// larger) or ErrFrameTooLarge. It copies Data once and allocates only if
// dst lacks the capacity.
func AppendOutputFrame(dst []byte, f OutputFrame, maxFrame int) ([]byte, error) {
	if maxFrame <= 0 || maxFrame > HardMaxFrame {
		maxFrame = HardMaxFrame
	}
	sb, ok := streamByte(f.Output.Stream)
	switch {
	case f.Version < 1 || f.Version > math.MaxUint8:
		return dst, fmt.Errorf("%w: output frame: field version %d is out of range", ErrFrame, f.Version)
	case !ValidID(f.Session):
		return dst, fmt.Errorf("%w: output frame: field session %q is not a valid id", ErrFrame, f.Session)
	case !ValidID(f.TaskID):
		return dst, fmt.Errorf("%w: output frame: field task_id %q is not a valid id", ErrFrame, f.TaskID)
	case f.Seq == 0:
		return dst, fmt.Errorf("%w: output frame: field seq must be positive", ErrFrame)
	case !ok:
		return dst, fmt.Errorf("%w: output frame: field stream %q is unknown", ErrFrame, f.Output.Stream)
	case f.Output.Offset < 0:
		return dst, fmt.Errorf("%w: output frame: field offset %d is negative", ErrFrame, f.Output.Offset)
	}
	if n := f.Size(); n > maxFrame {
		return dst, fmt.Errorf("%w: output frame of %d bytes, limit %d", ErrFrameTooLarge, n, maxFrame)
	}
	var h [OutputFrameHeader]byte
	h[0], h[1], h[2], h[3], h[4] = BinaryOutputKind, byte(f.Version), sb, byte(len(f.Session)), byte(len(f.TaskID))
	binary.BigEndian.PutUint64(h[8:], f.Seq)
	binary.BigEndian.PutUint64(h[16:], f.Ack)
	binary.BigEndian.PutUint64(h[24:], uint64(f.Output.Offset))
	dst = append(dst, h[:]...)
	dst = append(dst, f.Session...)
	dst = append(dst, f.TaskID...)
	return append(dst, f.Output.Data...), nil
}

// DecodeOutputFrame decodes and validates one binary frame of at most
// maxFrame bytes (HardMaxFrame if maxFrame <= 0 or larger). It parses the
// frame once and copies nothing: the returned prp.Output.Data aliases frame.
func DecodeOutputFrame(frame []byte, maxFrame int) (OutputFrame, error) {
	if maxFrame <= 0 || maxFrame > HardMaxFrame {
		maxFrame = HardMaxFrame
	}
	if len(frame) > maxFrame {
		return OutputFrame{}, fmt.Errorf("%w: %d bytes, limit %d", ErrFrameTooLarge, len(frame), maxFrame)
	}
	if len(frame) < OutputFrameHeader {
		return OutputFrame{}, fmt.Errorf("%w: output frame of %d bytes is shorter than its header", ErrFrame, len(frame))
	}
	if frame[0] != BinaryOutputKind {
		return OutputFrame{}, fmt.Errorf("%w: binary frame of kind %#x is unknown", ErrFrame, frame[0])
	}
	if frame[5]|frame[6]|frame[7] != 0 {
		return OutputFrame{}, fmt.Errorf("%w: output frame: reserved bytes are not zero", ErrFrame)
	}
	f := OutputFrame{Version: int(frame[1])}
	switch frame[2] {
	case 1:
		f.Output.Stream = prp.Stdout
	case 2:
		f.Output.Stream = prp.Stderr
	default:
		return OutputFrame{}, fmt.Errorf("%w: output frame: field stream %d is unknown", ErrFrame, frame[2])
	}
	ls, lt := int(frame[3]), int(frame[4])
	if len(frame) < OutputFrameHeader+ls+lt {
		return OutputFrame{}, fmt.Errorf("%w: output frame: the ids run past the frame", ErrFrame)
	}
	f.Seq = binary.BigEndian.Uint64(frame[8:])
	f.Ack = binary.BigEndian.Uint64(frame[16:])
	off := binary.BigEndian.Uint64(frame[24:])
	f.Session = string(frame[OutputFrameHeader : OutputFrameHeader+ls])
	f.TaskID = string(frame[OutputFrameHeader+ls : OutputFrameHeader+ls+lt])
	f.Output.Data = frame[OutputFrameHeader+ls+lt:]
	switch {
	case f.Version < 1:
		return OutputFrame{}, fmt.Errorf("%w: output frame: field version 0 is invalid", ErrFrame)
	case f.Seq == 0:
		return OutputFrame{}, fmt.Errorf("%w: output frame: field seq must be positive", ErrFrame)
	case off > math.MaxInt64:
		return OutputFrame{}, fmt.Errorf("%w: output frame: field offset is out of range", ErrFrame)
	case !ValidID(f.Session):
		return OutputFrame{}, fmt.Errorf("%w: output frame: field session is not a valid id", ErrFrame)
	case !ValidID(f.TaskID):
		return OutputFrame{}, fmt.Errorf("%w: output frame: field task_id is not a valid id", ErrFrame)
	}
	f.Output.Offset = int64(off)
	return f, nil
}
