package local

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/driverkit"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/tarsafe"
)

var _ drivers.Files = (*sandbox)(nil)

// openFiles checks the session and p and opens the working directory as
// an os.Root: every file operation of Files goes through it, so none
// leaves the working directory, whatever links the task planted.
func (s *sandbox) openFiles(ctx context.Context, op, p string) (*os.Root, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", fmt.Errorf("local: %s in %s: %w", op, s.id, err)
	}
	s.mu.Lock()
	released := s.released
	s.mu.Unlock()
	if released {
		return nil, "", fmt.Errorf("local: %s in %s: %w", op, s.id, drivers.ErrReleased)
	}
	p, err := driverkit.FilePath(s.id, p)
	if err != nil {
		return nil, "", err
	}
	root, err := os.OpenRoot(s.dir)
	if err != nil {
		return nil, "", fmt.Errorf("local: %s in %s: the working directory: %w", op, s.id, err)
	}
	return root, p, nil
}

// pathErr classifies an error of the os.Root for p: not found, a link
// out of the working directory (invalid), else the error itself.
func (s *sandbox) pathErr(op, p string, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("local: %s %q in %s: %w", op, p, s.id, errcode.ErrNotFound)
	case strings.Contains(err.Error(), "escapes"):
		return &errcode.Error{Code: errcode.Invalid, Op: op, Target: fmt.Sprintf("%q in %s", p, s.id), Field: "path",
			Message: fmt.Sprintf("The path %q leads out of the session's working directory through a symbolic link; it is not followed.", p),
			Err:     err}
	}
	return fmt.Errorf("local: %s %q in %s: %w", op, p, s.id, err)
}

// PutArchive extracts r under dir with tarsafe.Extract (its refusals and
// default limits included): nothing is written outside dir, and a link
// in the working directory is never followed out of it.
func (s *sandbox) PutArchive(ctx context.Context, dir string, r io.Reader) error {
	root, dir, err := s.openFiles(ctx, "put archive", dir)
	if err != nil {
		return err
	}
	defer root.Close()
	sub, err := root.OpenRoot(dir)
	if err != nil {
		return s.pathErr("put archive", dir, err)
	}
	defer sub.Close()
	if err := tarsafe.Extract(r, sub, tarsafe.Options{}); err != nil {
		return fmt.Errorf("local: put archive into %q in %s: %w", dir, s.id, err)
	}
	return nil
}

// GetArchive writes p: a directory's contents with tarsafe.Create
// (nothing excluded: the host asked for it), a file or a link as one
// entry. A link is sent as the link; a path through a link out of the
// working directory is refused.
func (s *sandbox) GetArchive(ctx context.Context, p string, w io.Writer) error {
	root, p, err := s.openFiles(ctx, "get archive", p)
	if err != nil {
		return err
	}
	defer root.Close()
	fi, err := root.Lstat(p)
	if err != nil {
		return s.pathErr("get archive", p, err)
	}
	if fi.IsDir() {
		sub, err := root.OpenRoot(p)
		if err != nil {
			return s.pathErr("get archive", p, err)
		}
		defer sub.Close()
		return tarsafe.Create(w, sub, tarsafe.Options{Exclude: []string{}, MaxBytes: math.MaxInt64, MaxEntries: math.MaxInt})
	}
	tw := tar.NewWriter(w)
	hdr := &tar.Header{Name: path.Base(p), Mode: int64(fi.Mode().Perm()), ModTime: fi.ModTime()}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		if hdr.Linkname, err = root.Readlink(p); err != nil {
			return s.pathErr("get archive", p, err)
		}
		hdr.Typeflag = tar.TypeSymlink
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
	case fi.Mode().IsRegular():
		f, err := root.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
		if err != nil {
			return s.pathErr("get archive", p, err)
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil || !os.SameFile(fi, st) {
			return fmt.Errorf("local: get archive %q in %s: the file changed while it was read", p, s.id)
		}
		hdr.Typeflag, hdr.Size = tar.TypeReg, st.Size()
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := io.CopyN(tw, f, hdr.Size); err != nil {
			return fmt.Errorf("local: get archive %q in %s: %w", p, s.id, err)
		}
	default:
		return &errcode.Error{Code: errcode.Invalid, Op: "get archive", Target: fmt.Sprintf("%q in %s", p, s.id),
			Message: fmt.Sprintf("The path %q is a %v, which is not archived.", p, fi.Mode().Type()), Err: errors.New("not a file, link or directory")}
	}
	return tw.Close()
}

// ReadDir lists dir through the working directory's os.Root.
func (s *sandbox) ReadDir(ctx context.Context, dir string) ([]drivers.FileInfo, error) {
	root, dir, err := s.openFiles(ctx, "read dir", dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	f, err := root.Open(dir)
	if err != nil {
		return nil, s.pathErr("read dir", dir, err)
	}
	defer f.Close()
	entries, err := f.ReadDir(-1)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) && errors.Is(err, syscall.ENOTDIR) {
			return nil, &errcode.Error{Code: errcode.Invalid, Op: "read dir", Target: fmt.Sprintf("%q in %s", dir, s.id),
				Message: fmt.Sprintf("The path %q is no directory.", dir), Err: err}
		}
		return nil, s.pathErr("read dir", dir, err)
	}
	out := make([]drivers.FileInfo, 0, len(entries))
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			continue // gone since the listing
		}
		fi := drivers.FileInfo{Name: e.Name(), Mode: info.Mode(), Size: info.Size()}
		if info.Mode()&fs.ModeSymlink != 0 {
			fi.LinkTarget, _ = root.Readlink(path.Join(dir, e.Name()))
		}
		out = append(out, fi)
	}
	slices.SortFunc(out, func(a, b drivers.FileInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}
