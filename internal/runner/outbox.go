package runner

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/prpwire"
)

// outbox holds the runner's events until the controller acknowledges them
// (PRP-5). Every event is written to a segment file in the state directory
// before it is sent, so that a runner kill -9 loses nothing; the
// unacknowledged events are also kept in memory for replay. It is bounded:
// Append blocks while the unacknowledged bytes would exceed the limit, so a
// task's pipes are not read (backpressure) and no output is dropped.
type outbox struct {
	dir string
	// key is the session's state key (memory only): every record carries
	// its HMAC, so that a record a task wrote or changed in the state
	// directory is never sent as the runner's event (issue 22).
	key []byte

	mu  sync.Mutex
	seg *os.File
	// segs are the segment files on disk in seq order (the last one is
	// seg's once a record was written): Ack trims them without listing
	// the directory.
	segs    []string
	segSize int64
	// ackF is the ack file, open for the acked seq to be written in
	// place (ackRecordLen), one write per Ack.
	ackF    *os.File
	segMax  int64
	acked   uint64
	next    uint64
	pending []outRecord
	bytes   int64
	limit   int64
	changed chan struct{} // closed and replaced on every append and ack
}

type outRecord struct {
	seq  uint64
	body []byte // the Event as JSON, or an output event as a binary record
	// authentic: read back with a mac that verifies (always for records
	// this process appended).
	authentic bool
}

const (
	segPrefix = "outbox-"
	ackFile   = "outbox.ack"
	recHeader = 12 + sha256.Size // seq (8) + length (4) + HMAC(key, seq || body) (32)
)

// recordMAC is a record's HMAC under key: over its seq and body.
func recordMAC(key []byte, seq uint64, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], seq)
	m.Write(b[:])
	m.Write(body)
	return m.Sum(nil)
}

// openOutbox opens the outbox in dir, reloading unacknowledged events. A
// record that fails its check under key is never sent: it and every
// record before it are dropped, so that the runner's resume cursor
// (the oldest event it still has) shows the controller the events it
// lost, which it reports as events_lost (PRP-5).
func openOutbox(dir string, limit int64, key []byte) (*outbox, error) {
	o := &outbox{dir: dir, key: key, limit: limit, segMax: max(limit/4, 64<<10), changed: make(chan struct{})}
	if b, err := os.ReadFile(filepath.Join(dir, ackFile)); err == nil {
		o.acked, _ = strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("runner: outbox %s: %w", dir, err)
	}
	o.next = o.acked + 1
	segs, err := o.segments()
	if err != nil {
		return nil, err
	}
	for _, s := range segs {
		recs, good, err := readSegment(s, o.key)
		if err != nil {
			return nil, err
		}
		if err := os.Truncate(s, good); err != nil {
			return nil, fmt.Errorf("runner: outbox %s: truncate torn tail: %w", s, err)
		}
		for _, r := range recs {
			if r.seq >= o.next {
				o.next = r.seq + 1
			}
			if !r.authentic {
				o.pending, o.bytes = nil, 0
				continue
			}
			if r.seq > o.acked {
				o.pending = append(o.pending, r)
				o.bytes += int64(len(r.body))
			}
		}
	}
	o.segs = segs
	o.trimSegmentsLocked()
	return o, nil
}

// segments lists the segment files in seq order.
func (o *outbox) segments() ([]string, error) {
	ents, err := os.ReadDir(o.dir)
	if err != nil {
		return nil, fmt.Errorf("runner: outbox %s: %w", o.dir, err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), segPrefix) {
			out = append(out, filepath.Join(o.dir, e.Name()))
		}
	}
	sort.Strings(out) // names carry zero-padded first seqs
	return out, nil
}

func readSegment(path string, key []byte) ([]outRecord, int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, 0, fmt.Errorf("runner: outbox segment %s: %w", path, err)
	}
	var recs []outRecord
	var off int64
	for int64(len(b))-off >= recHeader {
		seq := binary.BigEndian.Uint64(b[off:])
		n := int64(binary.BigEndian.Uint32(b[off+8:]))
		if int64(len(b))-off-recHeader < n {
			break // torn tail
		}
		body := append([]byte(nil), b[off+recHeader:off+recHeader+n]...)
		ok := hmac.Equal(b[off+12:off+recHeader], recordMAC(key, seq, body))
		recs = append(recs, outRecord{seq: seq, body: body, authentic: ok})
		off += recHeader + n
	}
	return recs, off, nil
}

// Append stores ev under the next seq and returns it, blocking while the
// outbox is full (unless it is empty: one event always fits). It fails only
// on a disk error or when ctx ends. An output event is stored as a binary
// record (see outputRecord), every other event as JSON.
func (o *outbox) Append(ctx context.Context, ev prp.Event) (uint64, error) {
	if ev.Kind == prp.EventOutput && ev.Output != nil && prpwire.ValidID(ev.TaskID) {
		return o.AppendOutput(ctx, ev.TaskID, ev.Output.Stream, ev.Output.Offset, ev.Output.Data)
	}
	body, err := json.Marshal(ev)
	if err != nil {
		return 0, fmt.Errorf("runner: outbox: encode %s: %w", ev.Kind, err)
	}
	rec := make([]byte, recHeader+len(body))
	copy(rec[recHeader:], body)
	return o.appendRecord(ctx, rec)
}

// AppendOutput stores an output event of task taskID (data at offset of
// stream) as a binary record, copying data once; see Append.
func (o *outbox) AppendOutput(ctx context.Context, taskID string, stream prp.Stream, offset int64, data []byte) (uint64, error) {
	sb, ok := streamCode(stream)
	if !ok || len(taskID) > 255 || offset < 0 {
		return 0, fmt.Errorf("runner: outbox: output of task %q stream %q at %d is invalid", taskID, stream, offset)
	}
	rec := make([]byte, recHeader+outHeader+len(taskID)+len(data))
	b := rec[recHeader:]
	b[0], b[1], b[2] = outputRecord, sb, byte(len(taskID))
	binary.BigEndian.PutUint64(b[3:], uint64(offset))
	copy(b[outHeader:], taskID)
	copy(b[outHeader+len(taskID):], data)
	return o.appendRecord(ctx, rec)
}

// appendRecord stores rec (recHeader bytes free, then the body) under the
// next seq.
func (o *outbox) appendRecord(ctx context.Context, rec []byte) (uint64, error) {
	body := rec[recHeader:]
	o.mu.Lock()
	for len(o.pending) > 0 && o.bytes+int64(len(body)) > o.limit {
		ch := o.changed
		o.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		o.mu.Lock()
	}
	defer o.mu.Unlock()
	seq := o.next
	if err := o.writeLocked(seq, rec); err != nil {
		return 0, err
	}
	o.next++
	o.pending = append(o.pending, outRecord{seq: seq, body: body, authentic: true})
	o.bytes += int64(len(body))
	o.signalLocked()
	return seq, nil
}

// An outbox record's body is an event as JSON (it starts with '{') or an
// output event as a binary record: outputRecord, the stream code, the
// length of the task id, the offset (8 bytes, big-endian), the task id,
// then the data.
const (
	outputRecord = 0x01
	outHeader    = 11
)

func streamCode(s prp.Stream) (byte, bool) {
	switch s {
	case prp.Stdout:
		return 1, true
	case prp.Stderr:
		return 2, true
	}
	return 0, false
}

// output returns the output event of a binary record (ok false for a JSON
// record); Data aliases the record.
func (r outRecord) output() (taskID string, out prp.Output, ok bool, err error) {
	b := r.body
	if len(b) == 0 || b[0] != outputRecord {
		return "", prp.Output{}, false, nil
	}
	if len(b) < outHeader || len(b) < outHeader+int(b[2]) {
		return "", prp.Output{}, true, fmt.Errorf("runner: outbox: output record %d is short", r.seq)
	}
	switch b[1] {
	case 1:
		out.Stream = prp.Stdout
	case 2:
		out.Stream = prp.Stderr
	default:
		return "", prp.Output{}, true, fmt.Errorf("runner: outbox: output record %d names stream %d", r.seq, b[1])
	}
	out.Offset = int64(binary.BigEndian.Uint64(b[3:]))
	taskID = string(b[outHeader : outHeader+int(b[2])])
	out.Data = b[outHeader+int(b[2]):]
	return taskID, out, true, nil
}

// event returns the record's event.
func (r outRecord) event() (prp.Event, error) {
	task, out, ok, err := r.output()
	if err != nil {
		return prp.Event{}, err
	}
	if ok {
		return prp.Event{Kind: prp.EventOutput, TaskID: task, Output: &out}, nil
	}
	var ev prp.Event
	if err := json.Unmarshal(r.body, &ev); err != nil {
		return prp.Event{}, fmt.Errorf("runner: outbox: record %d: %w", r.seq, err)
	}
	return ev, nil
}

// writeLocked writes rec (recHeader free bytes, then the body) to the
// current segment. The record is written, not synced: the outbox survives a
// runner kill -9 (the page cache belongs to the kernel), not a crash of
// the sandbox's kernel, which events_lost reports.
func (o *outbox) writeLocked(seq uint64, rec []byte) error {
	if o.seg == nil || o.segSize >= o.segMax {
		if o.seg != nil {
			o.seg.Close()
		}
		name := filepath.Join(o.dir, fmt.Sprintf("%s%020d", segPrefix, seq))
		f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return fmt.Errorf("runner: outbox segment %s: %w", name, err)
		}
		o.seg, o.segSize = f, 0
		if len(o.segs) == 0 || o.segs[len(o.segs)-1] != name {
			o.segs = append(o.segs, name)
		}
	}
	binary.BigEndian.PutUint64(rec, seq)
	binary.BigEndian.PutUint32(rec[8:], uint32(len(rec)-recHeader))
	copy(rec[12:recHeader], recordMAC(o.key, seq, rec[recHeader:]))
	// One write per record: a kill -9 leaves a whole record or a torn tail
	// that openOutbox cuts off, never a record that was acknowledged.
	if _, err := o.seg.Write(rec); err != nil {
		return fmt.Errorf("runner: outbox segment %s: write: %w", o.seg.Name(), err)
	}
	o.segSize += int64(len(rec))
	return nil
}

func (o *outbox) signalLocked() {
	close(o.changed)
	o.changed = make(chan struct{})
}

// Ack drops the events up to and including seq and persists the ack. An
// ack beyond the last appended event is a protocol error.
//
// The ack is written in place into the ack file (one write, no new file
// and rename) and the acknowledged segments are found in the outbox's own
// list, not by listing the directory: the controller acks every sync, up
// to hundreds of times a second during a stream, and those file
// operations under the lock were a fifth of the runner's CPU in a 1 GiB
// stream (issue 55). The ack is written before any segment is removed, so
// that after a restart the segments left start at most one past the ack
// read back.
func (o *outbox) Ack(seq uint64) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if seq <= o.acked {
		return nil
	}
	if seq >= o.next {
		return fmt.Errorf("runner: outbox: ack %d beyond the last event %d", seq, o.next-1)
	}
	o.acked = seq
	i := sort.Search(len(o.pending), func(i int) bool { return o.pending[i].seq > seq })
	for _, r := range o.pending[:i] {
		o.bytes -= int64(len(r.body))
	}
	o.pending = append([]outRecord(nil), o.pending[i:]...)
	o.signalLocked()
	if err := o.writeAckLocked(seq); err != nil {
		return err
	}
	o.trimSegmentsLocked()
	return nil
}

// ackRecordLen is the length of the ack file's record: the acked seq in
// 20 decimal digits (every uint64 fits) and a newline, written at offset 0
// so that each write replaces the last one whole. openOutbox reads it as
// it reads an older runner's shorter record.
const ackRecordLen = 21

// writeAckLocked writes seq into the ack file, opening it on first use (no
// symlink followed).
func (o *outbox) writeAckLocked(seq uint64) error {
	if o.ackF == nil {
		f, err := os.OpenFile(filepath.Join(o.dir, ackFile), os.O_WRONLY|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
		if err == nil {
			if err = f.Truncate(ackRecordLen); err != nil {
				f.Close()
			}
		}
		if err != nil {
			return fmt.Errorf("runner: outbox: write ack: %w", err)
		}
		o.ackF = f
	}
	b := fmt.Appendf(make([]byte, 0, ackRecordLen), "%020d\n", seq)
	if _, err := o.ackF.WriteAt(b, 0); err != nil {
		return fmt.Errorf("runner: outbox: write ack: %w", err)
	}
	return nil
}

// trimSegmentsLocked removes segments whose every event is acknowledged: a
// segment is done when the next segment starts at or below acked+1. The
// current segment stays.
func (o *outbox) trimSegmentsLocked() {
	for len(o.segs) > 1 {
		nextFirst, err := strconv.ParseUint(strings.TrimPrefix(filepath.Base(o.segs[1]), segPrefix), 10, 64)
		if err != nil || nextFirst > o.acked+1 {
			return
		}
		if o.seg != nil && o.seg.Name() == o.segs[0] {
			return
		}
		os.Remove(o.segs[0])
		o.segs = o.segs[1:]
	}
}

// After returns copies of the unacknowledged events with seq > after, and a
// channel closed at the next change.
func (o *outbox) After(after uint64) ([]outRecord, <-chan struct{}) {
	o.mu.Lock()
	defer o.mu.Unlock()
	i := sort.Search(len(o.pending), func(i int) bool { return o.pending[i].seq > after })
	return append([]outRecord(nil), o.pending[i:]...), o.changed
}

// cursor returns the oldest unacknowledged seq (0 if none) and the next seq.
func (o *outbox) cursor() (oldest, next, acked uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.pending) > 0 {
		oldest = o.pending[0].seq
	}
	return oldest, o.next, o.acked
}

// setLimit changes the bound (the welcome's max_unacked_bytes).
func (o *outbox) setLimit(n int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.limit = n
	o.signalLocked()
}

// unacked returns the bytes of unacknowledged events.
func (o *outbox) unacked() int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.bytes
}

func (o *outbox) close() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	var err error
	if o.ackF != nil {
		err = o.ackF.Close()
		o.ackF = nil
	}
	if o.seg != nil {
		err = errors.Join(err, o.seg.Close())
		o.seg = nil
	}
	return err
}
