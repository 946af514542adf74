package controller

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/prpwire"
)

// outputSink keeps the bytes of output events; the store keeps their index
// (session, seq -> OutputRef). A host may supply its own (object storage,
// say); the default is fileSink. Implementations are safe for concurrent
// use.
type outputSink interface {
	// WriteOutput stores data of event seq of session and returns where it
	// is. The bytes are durable only after Sync returns.
	WriteOutput(ctx context.Context, session string, seq uint64, data []byte) (OutputRef, error)
	// Sync makes every write of session so far durable. The controller
	// acks events only after Sync (PRP-5).
	Sync(ctx context.Context, session string) error
	// ReadOutput returns the bytes at ref, or an error wrapping
	// errcode.ErrNotFound if they are not there.
	ReadOutput(ctx context.Context, ref OutputRef) ([]byte, error)
}

// maxChunkFile is the size at which fileSink starts a session's next
// chunk file.
const maxChunkFile = 64 << 20

// fileSink is the default outputSink: per session, chunk files
// "<dir>/<session>/<n>.chunk" that grow by appending, each up to
// maxChunkFile bytes; Sync is fsync. Files are 0600 in 0700 directories.
// Replicas may share the directory (a shared volume): each write's
// offset is where the append put it, whoever appended before.
type fileSink struct {
	dir string
	mu  sync.Mutex
	cur map[string]*chunkFile
}

type chunkFile struct {
	f    *os.File
	rel  string
	n    int
	size int64
	// syncing counts the Syncs running on f outside the lock; a chunk
	// file that was replaced while one ran is closed by the last
	// (retired).
	syncing int
	retired bool
}

// retire closes c, or leaves that to the last Sync running on it.
func (c *chunkFile) retire() {
	c.retired = true
	if c.syncing == 0 {
		c.f.Close()
	}
}

var _ outputSink = (*fileSink)(nil)

// newFileSink returns a fileSink under dir, creating dir (0700) if needed.
func newFileSink(dir string) (*fileSink, error) {
	if dir == "" {
		return nil, errors.New("controller: file sink: a data directory is required")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("controller: file sink %s: %w", dir, err)
	}
	return &fileSink{dir: dir, cur: map[string]*chunkFile{}}, nil
}

// WriteOutput implements outputSink.
func (s *fileSink) WriteOutput(ctx context.Context, session string, seq uint64, data []byte) (OutputRef, error) {
	if err := ctx.Err(); err != nil {
		return OutputRef{}, err
	}
	if !prpwire.ValidID(session) || session == "." || session == ".." {
		return OutputRef{}, fmt.Errorf("controller: file sink: session %q is not a valid id", session)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.cur[session]
	if c == nil || c.size+int64(len(data)) > maxChunkFile {
		next := 0
		if c != nil {
			next = c.n + 1
			// A full chunk file is synced before the next one is opened,
			// so that a Sync of the session covers it.
			if err := c.f.Sync(); err != nil {
				return OutputRef{}, fmt.Errorf("controller: file sink: sync %s: %w", c.rel, err)
			}
			c.retire()
		}
		var err error
		if c, err = s.open(session, next); err != nil {
			return OutputRef{}, err
		}
		s.cur[session] = c
	}
	if _, err := c.f.Write(data); err != nil {
		return OutputRef{}, fmt.Errorf("controller: file sink: write event %d of session %s: %w", seq, session, err)
	}
	// Where the bytes landed is read from the descriptor, not from what
	// this sink wrote before: another replica sharing the directory may
	// have appended to the file meanwhile (an append moves this
	// descriptor's offset to the end, then past the bytes, atomically).
	end, err := c.f.Seek(0, io.SeekCurrent)
	if err != nil {
		return OutputRef{}, fmt.Errorf("controller: file sink: write event %d of session %s: %w", seq, session, err)
	}
	ref := OutputRef{File: c.rel, Offset: end - int64(len(data)), Length: int64(len(data))}
	c.size = end
	return ref, nil
}

// open opens (appending) chunk n of session, or the last existing chunk
// when a controller restarts.
func (s *fileSink) open(session string, n int) (*chunkFile, error) {
	if err := os.MkdirAll(filepath.Join(s.dir, session), 0o700); err != nil {
		return nil, fmt.Errorf("controller: file sink: session %s: %w", session, err)
	}
	for {
		rel := filepath.Join(session, strconv.Itoa(n)+".chunk")
		f, err := os.OpenFile(filepath.Join(s.dir, rel), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return nil, fmt.Errorf("controller: file sink: open %s: %w", rel, err)
		}
		st, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("controller: file sink: stat %s: %w", rel, err)
		}
		if st.Size() < maxChunkFile {
			return &chunkFile{f: f, rel: rel, n: n, size: st.Size()}, nil
		}
		f.Close()
		n++
	}
}

// Sync implements outputSink: fsync of the session's current chunk file
// (every earlier one was synced when it was full). The fsync runs outside
// the sink's lock, so that writes go on meanwhile; it covers at least
// every write that returned before Sync was called.
func (s *fileSink) Sync(ctx context.Context, session string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	c := s.cur[session]
	if c == nil {
		s.mu.Unlock()
		return nil
	}
	c.syncing++
	s.mu.Unlock()
	err := c.f.Sync()
	s.mu.Lock()
	c.syncing--
	if c.retired && c.syncing == 0 {
		c.f.Close()
	}
	s.mu.Unlock()
	if err != nil {
		return fmt.Errorf("controller: file sink: sync %s: %w", c.rel, err)
	}
	return nil
}

// ReadOutput implements outputSink; ref.File must be a local path under
// the sink's directory.
func (s *fileSink) ReadOutput(ctx context.Context, ref OutputRef) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if !filepath.IsLocal(ref.File) || ref.Offset < 0 || ref.Length < 0 || ref.Length > maxChunkFile {
		return nil, fmt.Errorf("controller: file sink: ref %q at %d+%d is invalid", ref.File, ref.Offset, ref.Length)
	}
	f, err := os.Open(filepath.Join(s.dir, ref.File))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("controller: file sink: %s: %w", ref.File, errcode.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("controller: file sink: %w", err)
	}
	defer f.Close()
	b := make([]byte, ref.Length)
	if _, err := f.ReadAt(b, ref.Offset); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("controller: file sink: %s at %d+%d: %w", ref.File, ref.Offset, ref.Length, errcode.ErrNotFound)
		}
		return nil, fmt.Errorf("controller: file sink: read %s: %w", ref.File, err)
	}
	return b, nil
}

// Close syncs and closes the open chunk files.
func (s *fileSink) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for k, c := range s.cur {
		errs = append(errs, c.f.Sync())
		c.retire()
		delete(s.cur, k)
	}
	return errors.Join(errs...)
}
