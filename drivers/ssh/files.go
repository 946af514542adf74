package ssh

import (
	"context"
	"io"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/driverkit"
)

// Files (drivers.Files): tar over the session, through the same SSH
// connection as every command (no SFTP: Debian's Dropbear has no SFTP
// server). The host's sh, tar, stat and readlink do the work, confined to
// the session's working directory: a path whose directory resolves
// outside it (pwd -P), through a link the task planted, is refused.

var _ drivers.Files = (*sandbox)(nil)

func (sb *sandbox) files() driverkit.ExecFiles {
	return driverkit.ExecFiles{Sandbox: sb.id, Workdir: sb.cwd, Confine: true, Start: sb.Start}
}

// PutArchive extracts r under dir with the host's tar.
func (sb *sandbox) PutArchive(ctx context.Context, dir string, r io.Reader) error {
	return sb.files().PutArchive(ctx, dir, r)
}

// GetArchive writes p with the host's tar; a link at p is sent as the link.
func (sb *sandbox) GetArchive(ctx context.Context, p string, w io.Writer) error {
	return sb.files().GetArchive(ctx, p, w)
}

// ReadDir lists dir with the host's sh, stat and readlink.
func (sb *sandbox) ReadDir(ctx context.Context, dir string) ([]drivers.FileInfo, error) {
	return sb.files().ReadDir(ctx, dir)
}
