package kubernetes

import (
	"context"
	"errors"
	"io"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/driverkit"
)

// Files (drivers.Files): tar streams through the exec's stdin and stdout,
// as kubectl cp does, with tar, stat and readlink in the pod
// (driverkit.ExecFiles). The pod's links lead only into the pod; a host
// unpacks what comes back with tarsafe.Extract.
//
// The API server's exec may lose the tail of a command's output when the
// command exits, its status a success (the kubelet's copy of the output
// races with the exit; seen under load, through SPDY and WebSocket alike,
// on a 64 MiB archive). ExecFiles therefore takes no stream as whole
// because the exec said so: a read archive must end with tar's
// end-of-archive marker, and its command stays, reading its stdin, until
// that marker has arrived here; a listing must end with its end record;
// an archive put is sent only up to its end-of-archive marker, and its
// tar's status is the exec's, which is not lost. A stream cut short is
// drivers.ErrTransient.
func (s *sandbox) files() driverkit.ExecFiles {
	return driverkit.ExecFiles{Sandbox: s.name, Workdir: s.cfg.workdir,
		Start: func(ctx context.Context, cmd drivers.Command, stdout, stderr io.Writer) (drivers.Process, error) {
			return s.start(ctx, cmd, stdout, stderr)
		}}
}

// PutArchive extracts r under dir with tar in the pod. It is not tried
// again: r has been read.
func (s *sandbox) PutArchive(ctx context.Context, dir string, r io.Reader) error {
	if err := s.checkLive(); err != nil {
		return err
	}
	return s.files().PutArchive(ctx, dir, r)
}

// readTries is how many times a read of the pod's files (GetArchive before
// its first byte, ReadDir) is made when the exec's stream breaks or is
// cut short (drivers.ErrTransient): a read changes nothing in the pod, so
// another try is safe.
const readTries = 3

// GetArchive writes p as a tar stream made by tar in the pod. A stream
// that breaks before the first byte reached w is tried again (readTries);
// one that breaks or is cut short after is an error wrapping
// drivers.ErrTransient.
func (s *sandbox) GetArchive(ctx context.Context, p string, w io.Writer) error {
	if err := s.checkLive(); err != nil {
		return err
	}
	cw := &countingWriter{w: w}
	var err error
	for try := 1; try <= readTries; try++ {
		if err = s.files().GetArchive(ctx, p, cw); err == nil || cw.n > 0 || !errors.Is(err, drivers.ErrTransient) || ctx.Err() != nil {
			return err
		}
		s.d.log.Debug("kubernetes: the stream of a file read broke; trying again", "pod", s.target(), "try", try, "err", err)
	}
	return err
}

// ReadDir lists dir with sh, stat and readlink in the pod, tried again
// when the exec's stream breaks or the listing is cut short (readTries).
func (s *sandbox) ReadDir(ctx context.Context, dir string) ([]drivers.FileInfo, error) {
	if err := s.checkLive(); err != nil {
		return nil, err
	}
	var (
		out []drivers.FileInfo
		err error
	)
	for try := 1; try <= readTries; try++ {
		if out, err = s.files().ReadDir(ctx, dir); err == nil || !errors.Is(err, drivers.ErrTransient) || ctx.Err() != nil {
			return out, err
		}
		s.d.log.Debug("kubernetes: the stream of a directory read broke; trying again", "pod", s.target(), "try", try, "err", err)
	}
	return out, err
}

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}
