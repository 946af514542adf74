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
	"sync"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/errcode"
)

// ExecFiles implements drivers.Files for a sandbox that runs commands in
// a POSIX sh with tar, cat, stat, readlink, dirname and basename (busybox
// will do): tar streams go through the commands' stdin and stdout, so it
// works wherever commands run, a tmpfs or a network-less sandbox
// included. The zero ExecFiles is not usable: Start and Workdir are
// required.
//
// No transfer is taken as whole because its command said so: a transport
// may lose the tail of a command's output when the command exits (the
// Kubernetes API server's exec does, under load, its exit status a
// success). GetArchive's stream must end with tar's end-of-archive
// marker, and its command, once tar has succeeded, waits for the end of
// its stdin, which GetArchive closes only once it has read that marker:
// the command does not exit while any of the archive is on its way. So
// Start must copy Command.Stdin to the command as it reads it and stream
// the output, as a drivers.StreamExecer does; with a Start that reads the
// stdin whole before it runs the command (Daytona's bounded Exec) only
// ReadDir works. PutArchive sends only an archive whose end-of-archive
// marker it has read, and ReadDir's listing ends with an end record. A
// stream cut short is an error wrapping drivers.ErrTransient (a read can
// be tried again), never a success; the scripts' statuses (not found,
// not a directory, out of the working directory) come as before.
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
// anything else (a link included, never followed) as ./BASE. When tar
// fails the script exits with its status at once; when it succeeds the
// script reads its stdin to the end before it exits 0, its stdout still
// open (cat is not the script's last command, which a shell may exec, and
// its own stdout is /dev/null), so that it is
// still running while the archive's tail is on its way (GetArchive closes
// the stdin once it has read the end-of-archive marker).
const getScript = filesCheck + `p=$1
if [ -d "$p" ] && [ ! -L "$p" ]; then cd -- "$p" || exit 1; chk; tar -c -f - . || exit
else
[ -e "$p" ] || [ -L "$p" ] || exit 4
cd -- "$(dirname -- "$p")" || exit 1; chk; tar -c -f - "./$(basename -- "$p")" || exit
fi
cat >/dev/null; exit 0`

// listScript prints each entry of $1 as NAME NUL MODE(hex) SIZE NUL
// TARGET NUL, links not followed, and then the end record, an entry with
// no name (NUL NUL NUL): a listing without it was cut short.
const listScript = filesCheck + `[ -e "$1" ] || exit 4; [ -d "$1" ] || exit 3; cd -- "$1" || exit 1; chk
for f in .* *; do
  case $f in .|..) continue;; esac
  [ -e "$f" ] || [ -L "$f" ] || continue
  t=; [ -L "$f" ] && t=$(readlink -- "$f")
  printf '%s\0%s\0%s\0' "$f" "$(stat -c '%f %s' -- "$f")" "$t"
done
printf '\0\0\0'`

// abs checks p (FilePath) and returns it and its absolute path.
func (f ExecFiles) abs(p string) (string, string, error) {
	rel, err := FilePath(f.Sandbox, p)
	if err != nil {
		return "", "", err
	}
	return rel, path.Join(f.Workdir, rel), nil
}

// run runs script with the path and the confinement root as $1 and $2.
// stdin, when not nil, is the command's stdin.
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
	target := f.target(rel)
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

func (f ExecFiles) target(rel string) string { return fmt.Sprintf("%q in %s", rel, f.Sandbox) }

// cutShort is the error of a stream from the sandbox that ended before
// its end marker (what, "archive" or "listing") with the command's status
// a success, or broke in the middle of an entry.
func (f ExecFiles) cutShort(op, rel, what string, err error) error {
	return &errcode.Error{Op: op, Target: f.target(rel),
		Message: fmt.Sprintf("The %s of %q from the sandbox was cut short on its way: try again.", what, rel),
		Err:     fmt.Errorf("%s ended before its end marker: %v: %w", what, err, drivers.ErrTransient)}
}

// errNoEnd: a tar stream that ended at an entry's boundary without the
// end-of-archive marker (two zero blocks).
var errNoEnd = errors.New("the tar stream ended without its end-of-archive marker")

// gate is a command's stdin that gives nothing until opened, and then
// its end.
type gate struct {
	once sync.Once
	ch   chan struct{}
}

func newGate() *gate { return &gate{ch: make(chan struct{})} }

func (g *gate) Read([]byte) (int, error) {
	<-g.ch
	return 0, io.EOF
}

func (g *gate) open() { g.once.Do(func() { close(g.ch) }) }

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

// PutArchive extracts r under dir with tar in the sandbox. It sends r up
// to its end-of-archive marker, reads what follows (a writer's padding,
// 1 MiB at most) and then ends the command's stdin. An r that ends before
// the marker, or is no tar stream, is an invalid argument, and one whose
// Read fails is that error (the sandbox keeps what it extracted of it):
// never a success.
func (f ExecFiles) PutArchive(ctx context.Context, dir string, r io.Reader) error {
	rel, abs, err := f.abs(dir)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	bad := make(chan error, 1) // the archive's fault, sent before the command is cancelled
	checked := make(chan struct{})
	go func() {
		defer close(checked)
		src, sent := &readErr{r: r}, &sendErr{w: pw}
		err := provenTar(io.TeeReader(src, sent))
		switch {
		case sent.err != nil:
			// The command stopped reading: its status says why.
		case src.err != nil:
			bad <- fmt.Errorf("put archive into %s: reading the archive: %w", f.target(rel), src.err)
			cancel()
		case err != nil:
			bad <- &errcode.Error{Code: errcode.Invalid, Op: "put archive", Target: f.target(rel),
				Message: "The archive to put is no whole tar stream (it ends before its end-of-archive marker, or does not parse): send a whole archive.",
				Err:     err}
			cancel()
		default:
			_, _ = io.CopyN(io.Discard, r, 1<<20)
		}
		pw.CloseWithError(err)
	}()
	err = f.run(ctx, "put archive", rel, abs, putScript, pr, io.Discard)
	pr.CloseWithError(errors.New("put archive ended"))
	if err == nil {
		<-checked
	}
	select {
	case aerr := <-bad:
		return aerr
	default:
		// An error of the command, or r still being read after it ended.
		return err
	}
}

// readErr keeps the error of reads from r other than io.EOF.
type readErr struct {
	r   io.Reader
	err error
}

func (e *readErr) Read(b []byte) (int, error) {
	n, err := e.r.Read(b)
	if err != nil && err != io.EOF && e.err == nil {
		e.err = err
	}
	return n, err
}

// sendErr keeps the first error of writes to w.
type sendErr struct {
	w   io.Writer
	err error
}

func (s *sendErr) Write(b []byte) (int, error) {
	n, err := s.w.Write(b)
	if err != nil && s.err == nil {
		s.err = err
	}
	return n, err
}

// GetArchive writes p with tar in the sandbox, its names ("./NAME")
// rebased onto p. The stream must end with its end-of-archive marker;
// the command's stdin is closed once that marker was read (or the stream
// failed), and the command waits for it.
func (f ExecFiles) GetArchive(ctx context.Context, p string, w io.Writer) error {
	rel, abs, err := f.abs(p)
	if err != nil {
		return err
	}
	stdin := newGate()
	defer stdin.open()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		proven, err := rebaseTar(pr, w, "./")
		stdin.open()
		if err == nil && !proven {
			err = errNoEnd
		}
		if err == nil {
			// tar pads its archive past the end marker: read the padding
			// (a record at most, bounded against a sandbox that streams on).
			_, _ = io.CopyN(io.Discard, pr, 1<<20)
		}
		pr.CloseWithError(cmp.Or(err, errors.New("get archive ended")))
		done <- err
	}()
	err = f.run(ctx, "get archive", rel, abs, getScript, stdin, pw)
	pw.CloseWithError(err)
	rerr := <-done
	switch {
	case err != nil:
		return err
	case errors.Is(rerr, errNoEnd), errors.Is(rerr, io.ErrUnexpectedEOF):
		return f.cutShort("get archive", rel, "archive", rerr)
	}
	return rerr
}

// ReadDir lists dir with sh, stat and readlink in the sandbox. A listing
// without its end record is an error wrapping drivers.ErrTransient.
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
		return nil, &errcode.Error{Code: errcode.Invalid, Op: "read dir", Target: f.target(rel), Field: "path",
			Message: fmt.Sprintf("The directory %q in the sandbox lists more than %d MiB of entries: list a directory below it, or get it as an archive.", rel, maxListing>>20),
			Err:     fmt.Errorf("listing past %d bytes", maxListing)}
	}
	body, ok := bytes.CutSuffix(out.Bytes(), []byte("\x00\x00\x00"))
	fields := strings.Split(string(body), "\x00")
	// body ends with the last entry's NUL: its last field is empty.
	if !ok || len(fields)%3 != 1 || fields[len(fields)-1] != "" {
		return nil, f.cutShort("read dir", rel, "listing", fmt.Errorf("%d bytes without the end record", out.Len()))
	}
	list := []drivers.FileInfo{}
	for i := 0; i+2 < len(fields); i += 3 {
		ms, ss, _ := strings.Cut(fields[i+1], " ")
		raw, err1 := strconv.ParseUint(ms, 16, 32)
		size, err2 := strconv.ParseInt(ss, 10, 64)
		if fields[i] == "" || err1 != nil || err2 != nil {
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
	_, err := rebaseTar(r, w, prefix)
	return err
}

// rebaseTar is RebaseTar; proven reports whether r's end-of-archive
// marker was read (false: r ended at an entry's boundary without it).
func rebaseTar(r io.Reader, w io.Writer, prefix string) (proven bool, err error) {
	er := &endReader{r: r}
	tr, tw := tar.NewReader(er), tar.NewWriter(w)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return !er.ended, tw.Close()
		}
		if err != nil {
			return false, err
		}
		if hdr.Name == "./" || hdr.Name == "." {
			continue
		}
		name, ok := strings.CutPrefix(hdr.Name, prefix)
		if !ok {
			return false, fmt.Errorf("archive: the entry %q is not under %q", hdr.Name, prefix)
		}
		hdr.Name = name
		if hdr.Typeflag == tar.TypeLink {
			hdr.Linkname = strings.TrimPrefix(hdr.Linkname, prefix)
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return false, err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return false, err
		}
	}
}

// provenTar reads the tar stream r up to its end-of-archive marker (two
// zero blocks), and nothing after it. A stream that ends before the
// marker (archive/tar's Reader takes an end at an entry's boundary for
// the archive's end) is an error, as is one that does not parse.
func provenTar(r io.Reader) error {
	er := &endReader{r: r}
	tr := tar.NewReader(er)
	for {
		_, err := tr.Next()
		if err == io.EOF {
			if er.ended {
				return errNoEnd
			}
			return nil
		}
		if err != nil {
			return err
		}
		if _, err := io.Copy(io.Discard, tr); err != nil {
			return err
		}
	}
}

// endReader records whether r reached its end. archive/tar's Reader
// reads the end-of-archive marker's two blocks in full and stops; it
// returns io.EOF without them only after a Read of r gave no byte and
// io.EOF.
type endReader struct {
	r     io.Reader
	ended bool
}

func (e *endReader) Read(b []byte) (int, error) {
	n, err := e.r.Read(b)
	if n == 0 && err == io.EOF {
		e.ended = true
	}
	return n, err
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
