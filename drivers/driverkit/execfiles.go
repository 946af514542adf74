package driverkit

import (
	"archive/tar"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/errcode"
)

// ExecFiles implements drivers.Files for a sandbox that runs commands in
// a POSIX sh with tar, stat, readlink and dirname (busybox will do): tar
// streams go through the commands' stdin and stdout, so it works wherever
// commands run, a tmpfs or a network-less sandbox included. The zero
// ExecFiles is not usable: Start and Workdir are required.
type ExecFiles struct {
	// Sandbox names the sandbox in errors (its ID).
	Sandbox string
	// Workdir is the working directory's absolute path in the sandbox,
	// symbolic links resolved (pwd -P) when Confine is set.
	Workdir string
	// Confine, for host targets, refuses a path whose directory resolves
	// outside Workdir (pwd -P), so that a link the task planted never
	// leads berth's reads or writes out of the working directory. A
	// sandbox target leaves it false: its links lead only into it.
	Confine bool
	// Start runs a command, as drivers.StreamExecer.Start does.
	Start func(ctx context.Context, cmd drivers.Command, stdout, stderr io.Writer) (drivers.Process, error)
}

// Exit statuses of the scripts.
const (
	exitFilesNotDir   = 3
	exitFilesNotFound = 4
	exitFilesOutside  = 5
)

// filesCheck defines chk, which exits 5 when the shell's directory is
// outside $R (when R is set).
const filesCheck = `R=$2
chk() { [ -z "$R" ] && return 0; case $(pwd -P) in "$R"|"$R"/*) return 0;; esac; exit 5; }
`

// putScript extracts stdin under $1 with the sandbox's tar, owners not
// restored, modes as the archive says.
const putScript = filesCheck + `[ -e "$1" ] || exit 4; [ -d "$1" ] || exit 3; cd -- "$1" || exit 1; chk
umask 0; exec tar -x -o -f -`

// getScript writes $1 as a tar stream: a directory's contents as ./NAME,
// anything else (a link included, never followed) as ./BASE.
const getScript = filesCheck + `p=$1
if [ -d "$p" ] && [ ! -L "$p" ]; then cd -- "$p" || exit 1; chk; exec tar -c -f - .; fi
[ -e "$p" ] || [ -L "$p" ] || exit 4
cd -- "$(dirname -- "$p")" || exit 1; chk; exec tar -c -f - "./$(basename -- "$p")"`

// listScript prints each entry of $1 as NAME NUL MODE(hex) SIZE NUL
// TARGET NUL, links not followed.
const listScript = filesCheck + `[ -e "$1" ] || exit 4; [ -d "$1" ] || exit 3; cd -- "$1" || exit 1; chk
for f in .* *; do
  case $f in .|..) continue;; esac
  [ -e "$f" ] || [ -L "$f" ] || continue
  t=; [ -L "$f" ] && t=$(readlink -- "$f")
  printf '%s\0%s\0%s\0' "$f" "$(stat -c '%f %s' -- "$f")" "$t"
done`

// abs checks p (FilePath) and returns it and its absolute path.
func (f ExecFiles) abs(p string) (string, string, error) {
	rel, err := FilePath(f.Sandbox, p)
	if err != nil {
		return "", "", err
	}
	return rel, path.Join(f.Workdir, rel), nil
}

// run runs script with the path and the confinement root as $1 and $2.
func (f ExecFiles) run(ctx context.Context, op, rel, abs, script string, stdin io.Reader, stdout io.Writer) error {
	root := ""
	if f.Confine && path.Clean(f.Workdir) != "/" {
		root = path.Clean(f.Workdir)
	}
	var stderr bytes.Buffer
	proc, err := f.Start(ctx, drivers.Command{Argv: []string{"sh", "-c", script, "berth-files", abs, root}, Stdin: stdin, Dir: "/"},
		stdout, &capped{w: &stderr, n: 4096})
	if err != nil {
		return err
	}
	res, err := proc.Wait(ctx)
	if err != nil {
		return err
	}
	target := fmt.Sprintf("%q in %s", rel, f.Sandbox)
	switch res.ExitCode {
	case 0:
		return nil
	case exitFilesNotFound:
		return fmt.Errorf("%s %s: %w", op, target, errcode.ErrNotFound)
	case exitFilesNotDir:
		return &errcode.Error{Code: errcode.Invalid, Op: op, Target: target,
			Message: fmt.Sprintf("The path %q in the sandbox is no directory.", rel), Err: errors.New("not a directory")}
	case exitFilesOutside:
		return &errcode.Error{Code: errcode.Invalid, Op: op, Target: target, Field: "path",
			Message: fmt.Sprintf("The path %q leads out of the working directory through a symbolic link; it is not followed.", rel),
			Err:     errors.New("resolves outside the working directory")}
	}
	return &errcode.Error{Op: op, Target: target,
		Message: fmt.Sprintf("The sandbox's tar failed on %q (exit status %d): check that the target has sh and tar.", rel, res.ExitCode),
		Err:     fmt.Errorf("exit status %d: %s", res.ExitCode, strings.TrimSpace(stderr.String()))}
}

// capped keeps the first n bytes written to it; writes never fail.
type capped struct {
	w io.Writer
	n int
}

func (c *capped) Write(b []byte) (int, error) {
	if c.n > 0 {
		k := min(len(b), c.n)
		c.n -= k
		_, _ = c.w.Write(b[:k])
	}
	return len(b), nil
}

// PutArchive extracts r under dir with tar in the sandbox.
func (f ExecFiles) PutArchive(ctx context.Context, dir string, r io.Reader) error {
	rel, abs, err := f.abs(dir)
	if err != nil {
		return err
	}
	return f.run(ctx, "put archive", rel, abs, putScript, r, io.Discard)
}

// GetArchive writes p with tar in the sandbox, its names ("./NAME")
// rebased onto p.
func (f ExecFiles) GetArchive(ctx context.Context, p string, w io.Writer) error {
	rel, abs, err := f.abs(p)
	if err != nil {
		return err
	}
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := RebaseTar(pr, w, "./")
		if err == nil {
			// tar pads its archive past the end marker: read the padding
			// (a record at most, bounded against a sandbox that streams on).
			_, _ = io.CopyN(io.Discard, pr, 1<<20)
		}
		pr.CloseWithError(cmp.Or(err, errors.New("get archive ended")))
		done <- err
	}()
	err = f.run(ctx, "get archive", rel, abs, getScript, nil, pw)
	pw.CloseWithError(err)
	if rerr := <-done; err == nil {
		err = rerr
	}
	return err
}

// ReadDir lists dir with sh, stat and readlink in the sandbox.
func (f ExecFiles) ReadDir(ctx context.Context, dir string) ([]drivers.FileInfo, error) {
	rel, abs, err := f.abs(dir)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := f.run(ctx, "read dir", rel, abs, listScript, nil, &capped{w: &out, n: maxListing + 1}); err != nil {
		return nil, err
	}
	if out.Len() > maxListing {
		return nil, &errcode.Error{Code: errcode.Invalid, Op: "read dir", Target: fmt.Sprintf("%q in %s", rel, f.Sandbox), Field: "path",
			Message: fmt.Sprintf("The directory %q in the sandbox lists more than %d MiB of entries: list a directory below it, or get it as an archive.", rel, maxListing>>20),
			Err:     fmt.Errorf("listing past %d bytes", maxListing)}
	}
	fields := strings.Split(out.String(), "\x00")
	list := []drivers.FileInfo{}
	for i := 0; i+2 < len(fields); i += 3 {
		ms, ss, _ := strings.Cut(fields[i+1], " ")
		raw, err1 := strconv.ParseUint(ms, 16, 32)
		size, err2 := strconv.ParseInt(ss, 10, 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("read dir %q in %s: unreadable stat line %q", rel, f.Sandbox, fields[i+1])
		}
		list = append(list, drivers.FileInfo{Name: fields[i], Mode: unixMode(uint32(raw)), Size: size, LinkTarget: fields[i+2]})
	}
	slices.SortFunc(list, func(a, b drivers.FileInfo) int { return strings.Compare(a.Name, b.Name) })
	return list, nil
}

// maxListing bounds what ReadDir reads of a directory's listing: the
// task owns the directory and can fill it with entries without end.
const maxListing = 16 << 20

// RebaseTar copies the tar stream r to w with prefix ("./", or "" for
// none) cut from every name and hard link target, leaving out the entry
// "./" itself; an entry outside prefix is an error (the stream is not
// what was asked for). It closes the archive it writes, not w.
func RebaseTar(r io.Reader, w io.Writer, prefix string) error {
	tr, tw := tar.NewReader(r), tar.NewWriter(w)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return tw.Close()
		}
		if err != nil {
			return err
		}
		if hdr.Name == "./" || hdr.Name == "." {
			continue
		}
		name, ok := strings.CutPrefix(hdr.Name, prefix)
		if !ok {
			return fmt.Errorf("archive: the entry %q is not under %q", hdr.Name, prefix)
		}
		hdr.Name = name
		if hdr.Typeflag == tar.TypeLink {
			hdr.Linkname = strings.TrimPrefix(hdr.Linkname, prefix)
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return err
		}
	}
}

// unixMode converts a st_mode to an fs.FileMode.
func unixMode(m uint32) fs.FileMode {
	mode := fs.FileMode(m & 0o777)
	switch m & 0o170000 {
	case 0o040000:
		mode |= fs.ModeDir
	case 0o120000:
		mode |= fs.ModeSymlink
	case 0o010000:
		mode |= fs.ModeNamedPipe
	case 0o140000:
		mode |= fs.ModeSocket
	case 0o020000:
		mode |= fs.ModeDevice | fs.ModeCharDevice
	case 0o060000:
		mode |= fs.ModeDevice
	}
	for bit, m2 := range map[uint32]fs.FileMode{0o4000: fs.ModeSetuid, 0o2000: fs.ModeSetgid, 0o1000: fs.ModeSticky} {
		if m&bit != 0 {
			mode |= m2
		}
	}
	return mode
}
