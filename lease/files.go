package lease

import (
	"context"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/errcode"
)

// Files returns the files of the live lease id (active or retained) as p
// may use them: the sandbox's drivers.Files, every path relative to the
// sandbox's working directory (an absolute path, or one whose ".."
// elements leave it, is refused with errcode.ErrInvalid before the driver
// is asked).
//
// Authorization is the lease's: p needs authz.ActionRead on it to list a
// directory (ReadDir), and authz.ActionLease to read or write files
// (GetArchive, PutArchive), since files can hold what a task was handed (a
// managed account's credentials). Under DefaultPolicy the holder's
// company's agents and the operators read and write, a board member of the
// company lists only (GetArchive and PutArchive wrap errcode.ErrDenied),
// and a lease p may not read is not found (errcode.ErrNotFound, the text of
// a missing lease). It is decided once, here: the value is the authority
// it grants, as a Handle is, and each call acts on the sandbox as it is
// then (a released lease's sandbox fails them).
//
// A sandbox driver's lease held by another process is resumed by its
// provider lease id (drivers.Resumer), as Open does; a host lease (local,
// ssh) only through the live session of this manager, the holder's (its
// session and working directory belong to the process that acquired it):
// otherwise an error wrapping drivers.ErrUnsupported. A driver without
// the capability drivers.CapFiles is an error wrapping
// drivers.ErrUnsupported. Unpack what GetArchive writes with
// tarsafe.Extract, and make what PutArchive reads with tarsafe.Create.
func (m *Manager) Files(ctx context.Context, p authz.Principal, id string) (drivers.Files, error) {
	l, err := m.load(ctx, p, authz.ActionRead, id)
	if err != nil {
		return nil, err
	}
	write := m.authorize(ctx, p, authz.ActionLease, leaseResource(l)) == nil
	if l.Status != StatusActive && l.Status != StatusRetained {
		return nil, fmt.Errorf("lease %s is %s, not a live lease: its files are gone or out of reach: %w", id, l.Status, errcode.ErrConflict)
	}
	drv, err := m.reg.Lookup(l.Provider)
	if err != nil {
		return nil, fmt.Errorf("lease %s: %w", id, err)
	}
	if !drivers.Effective(drv, 0).Has(drivers.CapFiles) {
		return nil, fmt.Errorf("lease %s: driver %q lacks capability %s: %w", id, drv.Name(), drivers.CapFiles, drivers.ErrUnsupported)
	}
	var sb drivers.Sandbox
	switch h := m.liveHandle(id); {
	case h != nil:
		sb = h.sandbox
	case drv.Capabilities().Kind == drivers.KindHost:
		return nil, fmt.Errorf("lease %s is a host lease of driver %q: its files are reached through the process that holds its session, not this one: %w",
			id, drv.Name(), drivers.ErrUnsupported)
	default:
		if sb, err = m.resumeSandbox(ctx, drv, l); err != nil {
			return nil, err
		}
	}
	f, ok := sb.(drivers.Files)
	if !ok {
		return nil, fmt.Errorf("lease %s: the sandbox of driver %q has no files: %w", id, drv.Name(), drivers.ErrUnsupported)
	}
	return &leaseFiles{id: id, p: p, f: f, write: write}, nil
}

// leaseFiles is what Manager.Files returns: the sandbox's files, checked
// paths, and the principal's right to read and write them.
type leaseFiles struct {
	id    string
	p     authz.Principal
	f     drivers.Files
	write bool
}

// check refuses a path that is absolute or leaves the working directory,
// and, when content is read or written, a principal who may only list.
func (lf *leaseFiles) check(op, name string, content bool) error {
	if content && !lf.write {
		return &errcode.Error{Code: errcode.Denied, Op: op, Target: "lease " + lf.id,
			Message: fmt.Sprintf("You may list the files of lease %s but not read or write them: ask its holder or an operator.", lf.id),
			Err:     fmt.Errorf("lease %s: %s may not %s its files: %w", lf.id, lf.p, op, errcode.ErrDenied)}
	}
	clean := path.Clean(name)
	if path.IsAbs(name) || strings.Contains(name, "\x00") || clean == ".." || strings.HasPrefix(clean, "../") {
		return &errcode.Error{Code: errcode.Invalid, Op: op, Field: "path", Target: "lease " + lf.id,
			Message: fmt.Sprintf("The path %q is not inside the working directory of lease %s: name it relative to that directory, without leaving it.", name, lf.id),
			Err:     fmt.Errorf("lease %s: path %q: %w", lf.id, name, errcode.ErrInvalid)}
	}
	return nil
}

func (lf *leaseFiles) PutArchive(ctx context.Context, dir string, r io.Reader) error {
	if err := lf.check("put", dir, true); err != nil {
		return err
	}
	if err := lf.f.PutArchive(ctx, dir, r); err != nil {
		return fmt.Errorf("lease %s: put an archive under %q: %w", lf.id, dir, err)
	}
	return nil
}

func (lf *leaseFiles) GetArchive(ctx context.Context, name string, w io.Writer) error {
	if err := lf.check("get", name, true); err != nil {
		return err
	}
	if err := lf.f.GetArchive(ctx, name, w); err != nil {
		return fmt.Errorf("lease %s: get %q as an archive: %w", lf.id, name, err)
	}
	return nil
}

func (lf *leaseFiles) ReadDir(ctx context.Context, dir string) ([]drivers.FileInfo, error) {
	if err := lf.check("list", dir, false); err != nil {
		return nil, err
	}
	fi, err := lf.f.ReadDir(ctx, dir)
	if err != nil {
		return nil, fmt.Errorf("lease %s: list %q: %w", lf.id, dir, err)
	}
	return fi, nil
}
