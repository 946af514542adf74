package kubernetes

import (
	"context"
	"io"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/driverkit"
)

// Files (drivers.Files): tar streams through the exec's stdin and stdout,
// as kubectl cp does, with tar, stat and readlink in the pod
// (driverkit.ExecFiles). The pod's links lead only into the pod; a host
// unpacks what comes back with tarsafe.Extract.
func (s *sandbox) files() driverkit.ExecFiles {
	return driverkit.ExecFiles{Sandbox: s.name, Workdir: s.cfg.workdir,
		Start: func(ctx context.Context, cmd drivers.Command, stdout, stderr io.Writer) (drivers.Process, error) {
			return s.start(ctx, cmd, stdout, stderr)
		}}
}

// PutArchive extracts r under dir with tar in the pod.
func (s *sandbox) PutArchive(ctx context.Context, dir string, r io.Reader) error {
	if err := s.checkLive(); err != nil {
		return err
	}
	return s.files().PutArchive(ctx, dir, r)
}

// GetArchive writes p as a tar stream made by tar in the pod.
func (s *sandbox) GetArchive(ctx context.Context, p string, w io.Writer) error {
	if err := s.checkLive(); err != nil {
		return err
	}
	return s.files().GetArchive(ctx, p, w)
}

// ReadDir lists dir with sh, stat and readlink in the pod.
func (s *sandbox) ReadDir(ctx context.Context, dir string) ([]drivers.FileInfo, error) {
	if err := s.checkLive(); err != nil {
		return nil, err
	}
	return s.files().ReadDir(ctx, dir)
}
