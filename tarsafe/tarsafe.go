// Package tarsafe moves a tree of files as a tar stream without trusting
// the other side: Extract writes what a sandbox sent under a destination
// and never outside it, and Create writes a host's source directory as an
// archive with its links as links and its credentials left out.
//
// It is a package of its own, below drivers, because both sides of a
// sandbox's files need it: the drivers (package drivers' Files, capability
// files) unpack and pack with it on host targets, and a host unpacks what
// Files.GetArchive returns and packs what it gives Files.PutArchive with
// it, without importing a driver. It depends on the standard library and
// errcode only.
//
//	src, _ := os.OpenRoot("project")
//	err := tarsafe.Create(w, src, tarsafe.Options{}) // .env, *.pem, ... left out
//
//	dst, _ := os.OpenRoot("out")
//	err = tarsafe.Extract(r, dst, tarsafe.Options{}) // 1 GiB, 100,000 entries at most
//
// # What Extract refuses
//
// The archive is the sandbox's to forge. Extract refuses, with an error
// of code Invalid (reason unsafe_archive) naming the entry: an absolute
// name or one with a ".." element; a symbolic link whose target is
// absolute or leaves the destination (its ".." elements may only lead the
// target, and no further up than the link's own directory); a hard link
// to anything but a regular file extracted before; a device, a fifo or an
// entry type it does not know; an entry under a parent that is not a
// directory (a symbolic link the task planted in the destination is never
// followed). Every write goes through the os.Root of the destination, so
// even a race with a task that changes the destination under it cannot
// leave it. Permission bits are kept, setuid, setgid and sticky bits
// never; owners and times are not restored. It stops, with reason
// archive_too_large, at more than Options.MaxBytes of file content or
// Options.MaxEntries entries.
//
// # What Create leaves out
//
// Create walks the source without following a symbolic link: a link goes
// in as a link, never its target (a link to ~/.ssh uploads the link, not
// the keys). Sockets, fifos and devices are left out. Options.Exclude
// names what never goes in (DefaultExclude: .env files, *.pem keys, id_*
// keys and .git/config, which holds credentials in remote URLs); a file
// swapped for another while it is read is refused rather than read.
package tarsafe

import (
	"archive/tar"
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/berthdev/berth/errcode"
)

const (
	defaultMaxBytes   int64 = 1 << 30
	defaultMaxEntries       = 100_000
)

// Options bound an archive and say what Create leaves out. The zero
// Options has the safe defaults: 1 GiB, 100,000 entries, DefaultExclude.
type Options struct {
	// MaxBytes bounds the total size of the regular files' content in
	// the archive; 0 means 1 GiB, a negative value is refused.
	MaxBytes int64
	// MaxEntries bounds the number of entries; 0 means 100,000, a
	// negative value is refused.
	MaxEntries int
	// Exclude lists what Create leaves out, as path.Match patterns on
	// slash-separated paths relative to the source: a pattern without a
	// slash matches an entry's base name anywhere ("*.pem"), one with a
	// slash the end of its path (".git/config" matches sub/.git/config).
	// An excluded directory is left out with everything under it. nil
	// means DefaultExclude(); an empty, non-nil slice leaves out nothing.
	// Extract does not read it.
	Exclude []string
}

// DefaultExclude returns what Create leaves out by default: .env,
// .env.*, *.pem, id_* (SSH keys) and .git/config. It returns a new slice
// each call, so a host may append its own patterns.
func DefaultExclude() []string {
	return []string{".env", ".env.*", "*.pem", "id_*", ".git/config"}
}

func (o Options) limits() (int64, int, error) {
	if o.MaxBytes < 0 || o.MaxEntries < 0 {
		return 0, 0, &errcode.Error{Code: errcode.Invalid, Op: "tar", Field: "limits",
			Message: "The archive's size and entry limits must not be negative.",
			Err:     fmt.Errorf("max bytes %d, max entries %d: want >= 0", o.MaxBytes, o.MaxEntries)}
	}
	maxBytes, maxEntries := o.MaxBytes, o.MaxEntries
	if maxBytes == 0 {
		maxBytes = defaultMaxBytes
	}
	if maxEntries == 0 {
		maxEntries = defaultMaxEntries
	}
	return maxBytes, maxEntries, nil
}

// unsafe returns the error for an entry Extract refuses.
func unsafe(name, why string) error {
	return &errcode.Error{Code: errcode.Invalid, Reason: "unsafe_archive", Op: "extract",
		Target:  fmt.Sprintf("archive entry %q", name),
		Message: fmt.Sprintf("The archive entry %q %s: the archive was refused.", short(name), why),
		Err:     errors.New(why)}
}

// tooLarge returns the error for an archive past a limit.
func tooLarge(op, name, what string) error {
	return &errcode.Error{Code: errcode.Invalid, Reason: "archive_too_large", Op: op,
		Target:  fmt.Sprintf("archive entry %q", name),
		Message: fmt.Sprintf("The archive goes past %s at entry %q: raise the limit or move fewer files.", what, short(name)),
		Err:     fmt.Errorf("past %s", what)}
}

// short keeps a name readable in a sentence.
func short(name string) string {
	if len(name) > 40 {
		return name[:37] + "..."
	}
	return name
}

// cleanName returns the slash-separated relative path an entry names,
// "" for the destination itself, or an error when it is absolute or has a
// ".." element.
func cleanName(name string) (string, error) {
	switch {
	case name == "":
		return "", unsafe(name, "has an empty name")
	case strings.ContainsRune(name, 0):
		return "", unsafe(name, "has a NUL byte in its name")
	case strings.HasPrefix(name, "/"):
		return "", unsafe(name, "has an absolute name")
	}
	for _, el := range strings.Split(name, "/") {
		if el == ".." {
			return "", unsafe(name, `has a ".." element in its name`)
		}
	}
	p := path.Clean(name)
	if p == "." {
		return "", nil
	}
	return p, nil
}

// checkLink refuses the target of the symbolic link name unless it stays
// in the destination: relative, its ".." elements leading, and no more
// of them than name's directory is deep.
func checkLink(name, target string) error {
	if target == "" {
		return unsafe(name, "is a symbolic link with an empty target")
	}
	if strings.HasPrefix(target, "/") {
		return unsafe(name, fmt.Sprintf("links to the absolute path %q", short(target)))
	}
	up, rest := 0, false
	for _, el := range strings.Split(target, "/") {
		switch {
		case el == "" || el == ".":
		case el == ".." && !rest:
			up++
		case el == "..":
			return unsafe(name, fmt.Sprintf("links to %q, with \"..\" after a name", short(target)))
		default:
			rest = true
		}
	}
	depth := strings.Count(name, "/")
	if up > depth {
		return unsafe(name, fmt.Sprintf("links to %q, outside the destination", short(target)))
	}
	return nil
}

// Extract reads the tar stream r and writes its entries under dst (see
// the package doc for what it refuses). It creates missing parent
// directories; an entry replaces a file or link of its name already in
// dst, but never a directory with a non-directory. It returns the first
// refusal, a limit passed, or an error of r or dst, having written the
// entries before it. The directories' permission bits are set when the
// archive ends.
func Extract(r io.Reader, dst *os.Root, opts Options) error {
	maxBytes, maxEntries, err := opts.limits()
	if err != nil {
		return err
	}
	tr := tar.NewReader(r)
	var total int64
	dirModes := map[string]fs.FileMode{}
	for n := 1; ; n++ {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return &errcode.Error{Code: errcode.Invalid, Reason: "unsafe_archive", Op: "extract",
				Message: "The archive could not be read; nothing after its last good entry was written.", Err: err}
		}
		if n > maxEntries {
			return tooLarge("extract", hdr.Name, fmt.Sprintf("%d entries", maxEntries))
		}
		if hdr.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		name, err := cleanName(hdr.Name)
		if err != nil {
			return err
		}
		perm := fs.FileMode(hdr.Mode) & fs.ModePerm
		if name == "" {
			if hdr.Typeflag != tar.TypeDir {
				return unsafe(hdr.Name, "names the destination itself but is not a directory")
			}
			dirModes["."] = perm
			continue
		}
		if err := parents(dst, hdr.Name, name); err != nil {
			return err
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			fi, err := dst.Lstat(name)
			switch {
			case err == nil && fi.IsDir():
			case err == nil:
				if err := dst.Remove(name); err != nil {
					return ioErr(hdr.Name, err)
				}
				fallthrough
			default:
				if err := dst.Mkdir(name, perm|0o700); err != nil {
					return ioErr(hdr.Name, err)
				}
			}
			dirModes[name] = perm
		case tar.TypeReg:
			if hdr.Size < 0 || hdr.Size > maxBytes-total {
				return tooLarge("extract", hdr.Name, fmt.Sprintf("%d bytes of file content", maxBytes))
			}
			total += hdr.Size
			if err := replace(dst, hdr.Name, name); err != nil {
				return err
			}
			f, err := dst.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
			if err != nil {
				return ioErr(hdr.Name, err)
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err == nil {
				err = dst.Chmod(name, perm)
			}
			if err != nil {
				return ioErr(hdr.Name, err)
			}
		case tar.TypeSymlink:
			if err := checkLink(name, hdr.Linkname); err != nil {
				return err
			}
			if err := replace(dst, hdr.Name, name); err != nil {
				return err
			}
			if err := dst.Symlink(hdr.Linkname, name); err != nil {
				return ioErr(hdr.Name, err)
			}
		case tar.TypeLink:
			target, err := cleanName(hdr.Linkname)
			if err != nil || target == "" {
				return unsafe(hdr.Name, fmt.Sprintf("is a hard link to %q, outside the destination", short(hdr.Linkname)))
			}
			fi, err := dst.Lstat(target)
			if err != nil || !fi.Mode().IsRegular() {
				return unsafe(hdr.Name, fmt.Sprintf("is a hard link to %q, no regular file of the archive", short(hdr.Linkname)))
			}
			if err := replace(dst, hdr.Name, name); err != nil {
				return err
			}
			if err := dst.Link(target, name); err != nil {
				return ioErr(hdr.Name, err)
			}
		case tar.TypeChar, tar.TypeBlock:
			return unsafe(hdr.Name, "is a device")
		case tar.TypeFifo:
			return unsafe(hdr.Name, "is a fifo")
		default:
			return unsafe(hdr.Name, fmt.Sprintf("has the entry type %q, which is not extracted", string(hdr.Typeflag)))
		}
	}
	// Deepest first, so that a read-only directory is closed last.
	names := make([]string, 0, len(dirModes))
	for d := range dirModes {
		names = append(names, d)
	}
	sort.Sort(sort.Reverse(sort.StringSlice(names)))
	for _, d := range names {
		if err := dst.Chmod(d, dirModes[d]); err != nil {
			return ioErr(d, err)
		}
	}
	return nil
}

// parents makes the missing parent directories of name in dst and
// refuses a parent that is there and is no directory (a symbolic link
// planted in the destination included).
func parents(dst *os.Root, raw, name string) error {
	dir := path.Dir(name)
	if dir == "." {
		return nil
	}
	els := strings.Split(dir, "/")
	for i := range els {
		p := strings.Join(els[:i+1], "/")
		fi, err := dst.Lstat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if err := dst.Mkdir(p, 0o755); err != nil {
				return ioErr(raw, err)
			}
		case err != nil:
			return ioErr(raw, err)
		case fi.Mode()&fs.ModeSymlink != 0:
			return unsafe(raw, fmt.Sprintf("lies under %q, a symbolic link in the destination", short(p)))
		case !fi.IsDir():
			return unsafe(raw, fmt.Sprintf("lies under %q, which is no directory", short(p)))
		}
	}
	return nil
}

// replace removes a file or link at name so that the entry can be made
// in its place, and refuses to replace a directory.
func replace(dst *os.Root, raw, name string) error {
	fi, err := dst.Lstat(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return ioErr(raw, err)
	case fi.IsDir():
		return unsafe(raw, "would replace a directory")
	}
	if err := dst.Remove(name); err != nil {
		return ioErr(raw, err)
	}
	return nil
}

func ioErr(name string, err error) error {
	return &errcode.Error{Op: "extract", Target: fmt.Sprintf("archive entry %q", name),
		Message: fmt.Sprintf("The archive entry %q could not be written to the destination.", short(name)), Err: err}
}

// excluded reports whether p matches a pattern of excl.
func excluded(excl []string, p string) bool {
	base := path.Base(p)
	for _, pat := range excl {
		if !strings.Contains(pat, "/") {
			if ok, _ := path.Match(pat, base); ok {
				return true
			}
			continue
		}
		for s := p; ; {
			if ok, _ := path.Match(pat, s); ok {
				return true
			}
			i := strings.IndexByte(s, '/')
			if i < 0 {
				break
			}
			s = s[i+1:]
		}
	}
	return false
}

// Create writes the tree under src to w as a tar stream, its entries
// named relative to src ("a.c", "sub/", "sub/b.c"), in lexical order,
// directories with their permission bits, regular files with their
// content, symbolic links as links (see the package doc for what it
// leaves out). It stops at Options.MaxBytes of content or
// Options.MaxEntries entries with an error naming the entry, and does not
// close w.
func Create(w io.Writer, src *os.Root, opts Options) error {
	maxBytes, maxEntries, err := opts.limits()
	if err != nil {
		return err
	}
	excl := opts.Exclude
	if excl == nil {
		excl = DefaultExclude()
	}
	for _, pat := range excl {
		if _, err := path.Match(pat, ""); err != nil {
			return &errcode.Error{Code: errcode.Invalid, Op: "tar", Field: "exclude", Target: fmt.Sprintf("pattern %q", pat),
				Message: fmt.Sprintf("The exclude pattern %q is malformed.", pat), Err: err}
		}
	}
	// Whole records of createBuffer bytes go to w, not a header, a file
	// and its padding each: a pipe into an HTTP body or an SSH channel
	// sends each write as a chunk or packet of its own.
	bw := bufio.NewWriterSize(w, createBuffer)
	tw := tar.NewWriter(bw)
	fsys := src.FS()
	var total int64
	n := 0
	err = fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return walkErr(p, err)
		}
		if p == "." {
			return nil
		}
		if excluded(excl, p) {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		info, err := src.Lstat(p)
		if err != nil {
			return walkErr(p, err)
		}
		hdr := &tar.Header{Name: p, Mode: int64(info.Mode() & fs.ModePerm), ModTime: info.ModTime().Truncate(time.Second)}
		switch mode := info.Mode(); {
		case mode.IsDir():
			hdr.Typeflag, hdr.Name = tar.TypeDir, p+"/"
		case mode&fs.ModeSymlink != 0:
			target, err := src.Readlink(p)
			if err != nil {
				return walkErr(p, err)
			}
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
		case mode.IsRegular():
			hdr.Typeflag, hdr.Size = tar.TypeReg, info.Size()
		default:
			return nil // sockets, fifos, devices
		}
		if n++; n > maxEntries {
			return tooLarge("create", p, fmt.Sprintf("%d entries", maxEntries))
		}
		if hdr.Size > maxBytes-total {
			return tooLarge("create", p, fmt.Sprintf("%d bytes of file content", maxBytes))
		}
		total += hdr.Size
		if hdr.Typeflag != tar.TypeReg {
			return tw.WriteHeader(hdr)
		}
		f, err := src.OpenFile(p, os.O_RDONLY|syscallNoFollow, 0)
		if err != nil {
			return walkErr(p, err)
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			return walkErr(p, err)
		}
		if !os.SameFile(info, st) || st.Size() != info.Size() {
			return walkErr(p, errors.New("the file changed while it was archived"))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := io.CopyN(tw, f, hdr.Size); err != nil {
			return walkErr(p, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return bw.Flush()
}

// createBuffer is the size of Create's writes to its writer.
const createBuffer = 64 << 10

func walkErr(p string, err error) error {
	return &errcode.Error{Op: "create", Target: fmt.Sprintf("source entry %q", p),
		Message: fmt.Sprintf("The source entry %q could not be archived.", short(p)), Err: err}
}
