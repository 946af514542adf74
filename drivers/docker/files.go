package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"

	"github.com/docker/docker/api/types/container"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/driverkit"
	"github.com/berthdev/berth/errcode"
)

// Files (drivers.Files). The Engine's archive API (CopyToContainer,
// CopyFromContainer) reads and writes the container's root file system
// as the engine sees it; it does not see a tmpfs mounted in the container
// (the workdir and /tmp of a read-only root, the runner's state). There
// the driver runs tar in the sandbox through exec instead
// (driverkit.ExecFiles), and lists a directory that way always. Both work
// on network none: nothing goes through the container's network.

var _ drivers.Files = (*sandbox)(nil)

// byExec reports whether abs lies on a tmpfs of the container, which the
// archive API does not see.
func (s *sandbox) byExec(abs string) bool {
	under := func(dir string) bool { return abs == dir || strings.HasPrefix(abs, strings.TrimSuffix(dir, "/")+"/") }
	if under(runnerStateDir) {
		return true
	}
	return s.cfg.readonly && (under(path.Clean(s.cfg.workdir)) || under("/tmp"))
}

// execFiles is the exec path: tar, stat and readlink in the sandbox.
func (s *sandbox) execFiles() driverkit.ExecFiles {
	return driverkit.ExecFiles{Sandbox: s.id, Workdir: s.cfg.workdir,
		Start: func(ctx context.Context, cmd drivers.Command, stdout, stderr io.Writer) (drivers.Process, error) {
			return s.start(ctx, cmd, stdout, stderr)
		}}
}

// filePath checks p and returns its absolute path in the container.
func (s *sandbox) filePath(p string) (rel, abs string, err error) {
	if err := s.checkLive(); err != nil {
		return "", "", err
	}
	rel, err = driverkit.FilePath(s.id, p)
	if err != nil {
		return "", "", err
	}
	return rel, path.Join(s.cfg.workdir, rel), nil
}

// PutArchive extracts r under dir: with CopyToContainer (the sandbox's
// user owning the files), or with tar in the sandbox on a tmpfs. Either
// way the extraction happens inside the container, so a link the task
// planted leads nowhere but into the sandbox.
func (s *sandbox) PutArchive(ctx context.Context, dir string, r io.Reader) error {
	rel, abs, err := s.filePath(dir)
	if err != nil {
		return err
	}
	if s.byExec(abs) {
		return s.execFiles().PutArchive(ctx, rel, r)
	}
	st, err := s.cli.ContainerStatPath(ctx, s.id, abs)
	if err != nil {
		return engineErr(s.cfg.host, fmt.Sprintf("put archive: stat %q in %s", rel, s.id), err)
	}
	if !st.Mode.IsDir() && st.Mode&fs.ModeSymlink == 0 {
		return &errcode.Error{Code: errcode.Invalid, Op: "put archive", Target: fmt.Sprintf("%q in %s", rel, s.id),
			Message: fmt.Sprintf("The path %q in the sandbox is no directory.", rel), Err: errors.New("not a directory")}
	}
	err = s.cli.CopyToContainer(ctx, s.id, abs, r, container.CopyToContainerOptions{CopyUIDGID: true})
	return engineErr(s.cfg.host, fmt.Sprintf("put archive into %q in %s", rel, s.id), err)
}

// GetArchive writes p as drivers.Files says: CopyFromContainer of DIR/.
// for a directory (entries ./NAME, rebased), of p itself for anything
// else (a link is sent as the link); tar in the sandbox on a tmpfs.
func (s *sandbox) GetArchive(ctx context.Context, p string, w io.Writer) error {
	rel, abs, err := s.filePath(p)
	if err != nil {
		return err
	}
	if s.byExec(abs) {
		return s.execFiles().GetArchive(ctx, rel, w)
	}
	st, err := s.cli.ContainerStatPath(ctx, s.id, abs)
	if err != nil {
		return engineErr(s.cfg.host, fmt.Sprintf("get archive: stat %q in %s", rel, s.id), err)
	}
	src, prefix := abs, ""
	if st.Mode.IsDir() {
		src, prefix = strings.TrimSuffix(abs, "/")+"/.", "./"
	}
	rc, _, err := s.cli.CopyFromContainer(ctx, s.id, src)
	if err != nil {
		return engineErr(s.cfg.host, fmt.Sprintf("get archive %q in %s", rel, s.id), err)
	}
	defer rc.Close()
	return driverkit.RebaseTar(rc, w, prefix)
}

// ReadDir lists dir with sh, stat and readlink in the sandbox (the
// archive API lists nothing).
func (s *sandbox) ReadDir(ctx context.Context, dir string) ([]drivers.FileInfo, error) {
	if err := s.checkLive(); err != nil {
		return nil, err
	}
	return s.execFiles().ReadDir(ctx, dir)
}
