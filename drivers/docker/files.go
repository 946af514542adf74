package docker

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

	"github.com/docker/docker/api/types/container"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/driverkit"
	"github.com/berthdev/berth/errcode"
)

// Files (drivers.Files). The Engine's archive API (CopyToContainer,
// CopyFromContainer) reads and writes the container's root file system
// as the engine sees it; it does not see a tmpfs mounted in the container
// (the workdir and /tmp of a read-only root, the runner's state). There
// the driver runs tar in the sandbox through exec instead. Both work on
// network none: nothing goes through the container's network.

var _ drivers.Files = (*sandbox)(nil)

// Exit statuses of the files scripts.
const (
	exitNotFound = 4
	exitNotDir   = 3
)

// byExec reports whether abs lies on a tmpfs of the container, which the
// archive API does not see.
func (s *sandbox) byExec(abs string) bool {
	under := func(dir string) bool { return abs == dir || strings.HasPrefix(abs, strings.TrimSuffix(dir, "/")+"/") }
	if under(runnerStateDir) {
		return true
	}
	return s.cfg.readonly && (under(path.Clean(s.cfg.workdir)) || under("/tmp"))
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

func (s *sandbox) notFound(op, p string) error {
	return fmt.Errorf("docker: %s %q in %s: %w", op, p, s.id, errcode.ErrNotFound)
}

func (s *sandbox) notDir(op, p string) error {
	return &errcode.Error{Code: errcode.Invalid, Op: op, Target: fmt.Sprintf("%q in container %s", p, s.id),
		Message: fmt.Sprintf("The path %q in the sandbox is no directory.", p), Err: errors.New("not a directory")}
}

// script runs a files script through exec with stdin and stdout, and
// maps its exit status: exitNotFound, exitNotDir, else an error with its
// stderr.
func (s *sandbox) script(ctx context.Context, op, p, script string, args []string, stdin io.Reader, stdout io.Writer) error {
	var stderr bytes.Buffer
	argv := append([]string{"sh", "-c", script, "berth-files"}, args...)
	proc, err := s.start(ctx, drivers.Command{Argv: argv, Stdin: stdin, Dir: "/"}, stdout, &limitedWriter{w: &stderr, n: 4096})
	if err != nil {
		return err
	}
	res, err := proc.result()
	if err != nil {
		return err
	}
	switch res.ExitCode {
	case 0:
		return nil
	case exitNotFound:
		return s.notFound(op, p)
	case exitNotDir:
		return s.notDir(op, p)
	}
	return &errcode.Error{Op: op, Target: fmt.Sprintf("%q in container %s", p, s.id),
		Message: fmt.Sprintf("The sandbox's tar failed on %q (exit status %d): check that the image has sh and tar.", p, res.ExitCode),
		Err:     fmt.Errorf("exit status %d: %s", res.ExitCode, strings.TrimSpace(stderr.String()))}
}

type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(b []byte) (int, error) {
	if l.n > 0 {
		k := min(len(b), l.n)
		l.n -= k
		_, _ = l.w.Write(b[:k])
	}
	return len(b), nil
}

// putScript extracts stdin under $1 with the sandbox's tar, owners not
// restored (the sandbox's user owns what it unpacks).
const putScript = `[ -e "$1" ] || exit 4; [ -d "$1" ] || exit 3; cd -- "$1" && exec tar -x -o -f -`

// PutArchive extracts r under dir: with the archive API (the sandbox's
// user owning the files), or with tar in the sandbox on a tmpfs. Either
// way the extraction happens inside the container, so a link the task
// planted leads nowhere but into the sandbox.
func (s *sandbox) PutArchive(ctx context.Context, dir string, r io.Reader) error {
	rel, abs, err := s.filePath(dir)
	if err != nil {
		return err
	}
	if s.byExec(abs) {
		return s.script(ctx, "put archive", rel, putScript, []string{abs}, r, io.Discard)
	}
	st, err := s.cli.ContainerStatPath(ctx, s.id, abs)
	if err != nil {
		return engineErr(s.cfg.host, fmt.Sprintf("put archive: stat %q in %s", rel, s.id), err)
	}
	if !st.Mode.IsDir() && st.Mode&fs.ModeSymlink == 0 {
		return s.notDir("put archive", rel)
	}
	err = s.cli.CopyToContainer(ctx, s.id, abs, r, container.CopyToContainerOptions{CopyUIDGID: true})
	return engineErr(s.cfg.host, fmt.Sprintf("put archive into %q in %s", rel, s.id), err)
}

// getScript writes $1 as a tar stream: a directory's contents as ./NAME,
// anything else (a link included, never followed) as ./BASE.
const getScript = `p=$1
if [ -d "$p" ] && [ ! -L "$p" ]; then cd -- "$p" && exec tar -c -f - .; fi
[ -e "$p" ] || [ -L "$p" ] || exit 4
cd -- "$(dirname -- "$p")" && exec tar -c -f - "./$(basename -- "$p")"`

// GetArchive writes p as drivers.Files says, the names of the archive
// API or of tar ("./NAME") rebased onto p.
func (s *sandbox) GetArchive(ctx context.Context, p string, w io.Writer) error {
	rel, abs, err := s.filePath(p)
	if err != nil {
		return err
	}
	if s.byExec(abs) {
		pr, pw := io.Pipe()
		done := make(chan error, 1)
		go func() {
			err := rebase(pr, w, "./")
			pr.CloseWithError(cmp.Or(err, errors.New("get archive ended")))
			done <- err
		}()
		err = s.script(ctx, "get archive", rel, getScript, []string{abs}, nil, pw)
		pw.CloseWithError(err)
		if rerr := <-done; err == nil {
			err = rerr
		}
		return err
	}
	st, err := s.cli.ContainerStatPath(ctx, s.id, abs)
	if err != nil {
		return engineErr(s.cfg.host, fmt.Sprintf("get archive: stat %q in %s", rel, s.id), err)
	}
	src, prefix := abs, ""
	if st.Mode.IsDir() {
		// "DIR/." names the entries ./NAME; a link at abs is sent as itself.
		src, prefix = strings.TrimSuffix(abs, "/")+"/.", "./"
	}
	rc, _, err := s.cli.CopyFromContainer(ctx, s.id, src)
	if err != nil {
		return engineErr(s.cfg.host, fmt.Sprintf("get archive %q in %s", rel, s.id), err)
	}
	defer rc.Close()
	return rebase(rc, w, prefix)
}

// rebase copies the tar stream r to w with prefix ("./" or "") cut from
// every name (and hard link target), leaving out the entry "./" itself.
// An entry outside prefix is an error: the stream is not what was asked
// for.
func rebase(r io.Reader, w io.Writer, prefix string) error {
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
			return fmt.Errorf("get archive: the entry %q is not under %q", hdr.Name, prefix)
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

// listScript prints each entry of $1 as NAME NUL MODE(hex) SIZE NUL
// TARGET NUL, links not followed.
const listScript = `[ -e "$1" ] || exit 4; [ -d "$1" ] || exit 3; cd -- "$1" || exit 1
for f in .* *; do
  case $f in .|..) continue;; esac
  [ -e "$f" ] || [ -L "$f" ] || continue
  t=; [ -L "$f" ] && t=$(readlink -- "$f")
  printf '%s\0%s\0%s\0' "$f" "$(stat -c '%f %s' -- "$f")" "$t"
done`

// ReadDir lists dir with sh, stat and readlink in the sandbox (the
// archive API lists nothing).
func (s *sandbox) ReadDir(ctx context.Context, dir string) ([]drivers.FileInfo, error) {
	rel, abs, err := s.filePath(dir)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := s.script(ctx, "read dir", rel, listScript, []string{abs}, nil, &out); err != nil {
		return nil, err
	}
	fields := strings.Split(out.String(), "\x00")
	list := []drivers.FileInfo{}
	for i := 0; i+2 < len(fields); i += 3 {
		var raw uint64
		var size int64
		ms, ss, _ := strings.Cut(fields[i+1], " ")
		raw, err1 := strconv.ParseUint(ms, 16, 32)
		size, err2 := strconv.ParseInt(ss, 10, 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("docker: read dir %q in %s: unreadable stat line %q", rel, s.id, fields[i+1])
		}
		list = append(list, drivers.FileInfo{Name: fields[i], Mode: unixMode(uint32(raw)), Size: size, LinkTarget: fields[i+2]})
	}
	slices.SortFunc(list, func(a, b drivers.FileInfo) int { return strings.Compare(a.Name, b.Name) })
	return list, nil
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
	if m&0o4000 != 0 {
		mode |= fs.ModeSetuid
	}
	if m&0o2000 != 0 {
		mode |= fs.ModeSetgid
	}
	if m&0o1000 != 0 {
		mode |= fs.ModeSticky
	}
	return mode
}
