package workspace

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/leasehook"
	"github.com/berthdev/berth/lease"
)

// Upload bounds of Files().PutArchive: tarsafe's defaults.
const (
	maxPutBytes   = 1 << 30
	maxPutEntries = 100_000
)

// files returns the workspace id's record and the Files of h, after
// deciding a for p on its lease; p may not read the lease: not found.
func (m *Manager) filesOf(ctx context.Context, p authz.Principal, a authz.Action, h *lease.Handle, id, op string) (*Workspace, drivers.Files, error) {
	w, err := m.store.GetWorkspace(ctx, id)
	if err != nil {
		return nil, nil, fmt.Errorf("workspace: %s %s: %w", op, id, err)
	}
	if err := m.authorize(ctx, p, a, w.Lease, w.Company); err != nil {
		if a != authz.ActionRead && m.authorize(ctx, p, authz.ActionRead, w.Lease, w.Company) == nil {
			return nil, nil, err
		}
		return nil, nil, fmt.Errorf("workspace %s: %w", id, errcode.ErrNotFound)
	}
	if h != nil && h.ID() != w.Lease {
		return nil, nil, errOwner(h.ID(), fmt.Sprintf("workspace %s lives in lease %s", w.ID, w.Lease))
	}
	if w.State == StateEnded {
		return nil, nil, fmt.Errorf("workspace %s has ended: %w", w.ID, errcode.ErrConflict)
	}
	var fs drivers.Files
	switch {
	case h != nil:
		fs, err = leasehook.Files(h)
	case m.lm == nil:
		err = fmt.Errorf("the manager has no lease manager (berth.New wires one): %w", drivers.ErrUnsupported)
	default:
		fs, err = m.lm.Files(ctx, p, w.Lease)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("workspace: %s %s: %w", op, id, err)
	}
	return w, fs, nil
}

// inside returns p, relative to w's directory, as a path relative to the
// sandbox's working directory, or an error wrapping errcode.ErrInvalid
// when p is absolute or leaves the directory.
func (w *Workspace) inside(p string) (string, error) {
	c := path.Clean("./" + p)
	if strings.HasPrefix(p, "/") || c == ".." || strings.HasPrefix(c, "../") || strings.ContainsRune(p, 0) {
		return "", &errcode.Error{Code: errcode.Invalid, Op: "workspace files", Target: "workspace " + w.Key, Field: "path",
			Message: fmt.Sprintf("The path %q is outside the workspace %s: give one relative to its directory.", p, w.Key),
			Err:     fmt.Errorf("path %q leaves the workspace's directory: %w", p, errcode.ErrInvalid)}
	}
	return path.Join(w.rel(), c), nil
}

// Files returns the files of the workspace id in h's sandbox, for the
// principal p: paths are relative to the workspace's directory ("" or
// "." for itself) and never leave it (errcode.ErrInvalid). Each call
// looks the workspace up and decides for p on its lease: ReadDir needs authz.ActionRead
// (a board member of its company lists, and reads nothing more);
// GetArchive and PutArchive need authz.ActionLease (its holder,
// operators), as a file can hold a credential the agent was handed. p
// may not read the lease: errcode.ErrNotFound; an ended workspace:
// errcode.ErrConflict.
//
// h may be nil, for a principal who may list the lease's files but not
// open it (a board member): the sandbox is then reached as
// lease.Manager.Files reaches it, so a host lease (local, ssh) held by
// another process is out of reach (drivers.ErrUnsupported).
//
// GetArchive writes a tar stream (the sandbox's to forge: unpack it with
// tarsafe.Extract). PutArchive extracts a tar stream under a directory
// that must exist, without following a link the task planted; the stream
// is bounded (1 GiB of file content, 100,000 entries) and holds regular
// files, directories and symbolic links with relative names that stay
// inside the directory, setuid, setgid and sticky bits cleared; the upload
// stops at anything else, which never reaches the sandbox, with an error
// naming the entry (reason unsafe_archive or archive_too_large); the
// entries before it are in.
func (m *Manager) Files(p authz.Principal, h *lease.Handle, id string) drivers.Files {
	return wsFiles{m: m, p: p, h: h, id: id}
}

// wsFiles is what Manager.Files returns.
type wsFiles struct {
	m  *Manager
	p  authz.Principal
	h  *lease.Handle
	id string
}

func (f wsFiles) ReadDir(ctx context.Context, dir string) ([]drivers.FileInfo, error) {
	w, fs, err := f.m.filesOf(ctx, f.p, authz.ActionRead, f.h, f.id, "read dir")
	if err != nil {
		return nil, err
	}
	rel, err := w.inside(dir)
	if err != nil {
		return nil, err
	}
	return fs.ReadDir(ctx, rel)
}

func (f wsFiles) GetArchive(ctx context.Context, p string, out io.Writer) error {
	w, fs, err := f.m.filesOf(ctx, f.p, authz.ActionLease, f.h, f.id, "get archive")
	if err != nil {
		return err
	}
	rel, err := w.inside(p)
	if err != nil {
		return err
	}
	return fs.GetArchive(ctx, rel, out)
}

func (f wsFiles) PutArchive(ctx context.Context, dir string, r io.Reader) error {
	w, fs, err := f.m.filesOf(ctx, f.p, authz.ActionLease, f.h, f.id, "put archive")
	if err != nil {
		return err
	}
	rel, err := w.inside(dir)
	if err != nil {
		return err
	}
	return putChecked(ctx, fs, rel, r)
}

// putChecked puts the tar stream r under rel through checkUpload.
func putChecked(ctx context.Context, fs drivers.Files, rel string, r io.Reader) error {
	pr, pw := io.Pipe()
	checked := make(chan error, 1)
	go func() {
		err := checkUpload(r, pw)
		pw.CloseWithError(err)
		checked <- err
	}()
	err := fs.PutArchive(ctx, rel, pr)
	pr.CloseWithError(errors.New("put ended"))
	if cerr := <-checked; cerr != nil && !errors.Is(cerr, io.ErrClosedPipe) {
		return cerr // the refusal, not the driver's account of a broken stream
	}
	return err
}

// checkUpload copies the tar stream r to w entry by entry, refusing what
// PutArchive does not take.
func checkUpload(r io.Reader, w io.Writer) error {
	tr, tw := tar.NewReader(r), tar.NewWriter(w)
	var bytes int64
	for n := 0; ; n++ {
		hdr, err := tr.Next()
		if err == io.EOF {
			return tw.Close()
		}
		if err != nil {
			return fmt.Errorf("workspace: reading the upload: %w: %w", err, errcode.ErrInvalid)
		}
		bad := func(why string) error {
			return &errcode.Error{Code: errcode.Invalid, Reason: "unsafe_archive", Op: "put archive", Target: fmt.Sprintf("entry %q", hdr.Name),
				Message: fmt.Sprintf("The upload's entry %.80q %s: it was refused.", hdr.Name, why), Err: errors.New(why)}
		}
		c := path.Clean(hdr.Name)
		switch {
		case n >= maxPutEntries:
			return &errcode.Error{Code: errcode.Invalid, Reason: "archive_too_large", Op: "put archive",
				Message: fmt.Sprintf("The upload holds more than %d entries.", maxPutEntries), Err: errors.New("too many entries")}
		case strings.HasPrefix(hdr.Name, "/") || c == ".." || strings.HasPrefix(c, "../") || strings.ContainsRune(hdr.Name, 0):
			return bad("is absolute or leaves the directory")
		}
		switch hdr.Typeflag {
		case tar.TypeReg, tar.TypeDir, tar.TypeSymlink:
		default:
			return bad("is neither a file, a directory nor a symbolic link")
		}
		if bytes += hdr.Size; bytes > maxPutBytes {
			return &errcode.Error{Code: errcode.Invalid, Reason: "archive_too_large", Op: "put archive",
				Message: fmt.Sprintf("The upload holds more than %d MiB of files.", maxPutBytes>>20), Err: errors.New("too large")}
		}
		hdr.Mode &= 0o777
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return err
		}
	}
}
