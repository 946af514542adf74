package daytona

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"path"
	"strings"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/driverkit"
	"github.com/berthdev/berth/errcode"
)

// Files (drivers.Files). The toolbox of v0.190.0 moves one file each way
// (POST files/upload, multipart field "file"; GET files/download), with
// no modes and no links, so a tree travels as one tar archive in a
// temporary directory of the sandbox (mktemp -d), unpacked or made by the
// sandbox's tar through process/execute, and the directory is removed
// after. The commands are confined to the working directory (the default
// cwd of commands, pwd -P): a path whose directory resolves outside it
// through a link the task planted is refused.

var _ drivers.Files = (*sandbox)(nil)

// filesCheck defines chk, which exits 5 when the shell's directory is
// outside $R (when R is set).
const filesCheck = `R=$2
chk() { [ -z "$R" ] && return 0; case $(pwd -P) in "$R"|"$R"/*) return 0;; esac; exit 5; }
`

// The scripts: $1 the path, $2 the confinement root, $3 the archive in
// the temporary directory.
const (
	stageScript = `mktemp -d`
	putScript   = filesCheck + `[ -e "$1" ] || exit 4; [ -d "$1" ] || exit 3; cd -- "$1" || exit 1; chk
umask 0; tar -x -o -f "$3"`
	getScript = filesCheck + `p=$1
if [ -d "$p" ] && [ ! -L "$p" ]; then cd -- "$p" || exit 1; chk; exec tar -c -f "$3" .; fi
[ -e "$p" ] || [ -L "$p" ] || exit 4
cd -- "$(dirname -- "$p")" || exit 1; chk; exec tar -c -f "$3" "./$(basename -- "$p")"`
	cleanScript = `rm -rf -- "$1"`
)

// filesRoot returns the working directory, read once, and the checked
// path's absolute form.
func (sb *sandbox) filesPath(ctx context.Context, p string) (rel, abs, root string, err error) {
	if err := sb.live(); err != nil {
		return "", "", "", err
	}
	rel, err = driverkit.FilePath(sb.id, p)
	if err != nil {
		return "", "", "", err
	}
	sb.mu.Lock()
	wd := sb.workdir
	sb.mu.Unlock()
	if wd == "" {
		res, err := sb.Exec(ctx, drivers.Command{Argv: []string{"sh", "-c", "pwd -P"}})
		if err != nil {
			return "", "", "", err
		}
		wd = strings.TrimSpace(string(res.Stdout))
		if res.ExitCode != 0 || !strings.HasPrefix(wd, "/") {
			return "", "", "", fmt.Errorf("daytona: files in sandbox %s: reading the working directory: exit %d: %s", sb.id, res.ExitCode, shorten(string(res.Stderr)))
		}
		sb.mu.Lock()
		sb.workdir = wd
		sb.mu.Unlock()
	}
	if wd != "/" {
		root = wd
	}
	return rel, path.Join(wd, rel), root, nil
}

// script runs a files script and maps its exit status.
func (sb *sandbox) script(ctx context.Context, op, rel, script string, args ...string) (*drivers.Result, error) {
	res, err := sb.Exec(ctx, drivers.Command{Argv: append([]string{"sh", "-c", script, "berth-files"}, args...), Dir: "/", OutputLimit: 16 << 20})
	if err != nil {
		return nil, err
	}
	target := fmt.Sprintf("%q in sandbox %s", rel, sb.id)
	switch res.ExitCode {
	case 0:
		return res, nil
	case 4:
		return nil, fmt.Errorf("daytona: %s %s: %w", op, target, errcode.ErrNotFound)
	case 3:
		return nil, &errcode.Error{Code: errcode.Invalid, Op: op, Target: target,
			Message: fmt.Sprintf("The path %q in the sandbox is no directory.", rel), Err: errors.New("not a directory")}
	case 5:
		return nil, &errcode.Error{Code: errcode.Invalid, Op: op, Target: target, Field: "path",
			Message: fmt.Sprintf("The path %q leads out of the working directory through a symbolic link; it is not followed.", rel),
			Err:     errors.New("resolves outside the working directory")}
	}
	return nil, &errcode.Error{Op: op, Target: target,
		Message: fmt.Sprintf("The sandbox's tar failed on %q (exit status %d): check that the image has sh and tar.", rel, res.ExitCode),
		Err:     fmt.Errorf("exit status %d: %s", res.ExitCode, shorten(strings.TrimSpace(string(res.Stderr))))}
}

// stage makes a temporary directory in the sandbox and returns it with
// the function that removes it.
func (sb *sandbox) stage(ctx context.Context, op, rel string) (string, func(), error) {
	res, err := sb.script(ctx, op, rel, stageScript)
	if err != nil {
		return "", nil, err
	}
	dir := strings.TrimSpace(string(res.Stdout))
	if !strings.HasPrefix(dir, "/") {
		return "", nil, fmt.Errorf("daytona: %s in sandbox %s: mktemp -d printed %q", op, sb.id, shorten(dir))
	}
	return dir, func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sb.d.opts.CleanupTimeout)
		defer cancel()
		_, _ = sb.script(ctx, op, rel, cleanScript, dir)
	}, nil
}

// PutArchive uploads r as one file and unpacks it under dir with the
// sandbox's tar.
func (sb *sandbox) PutArchive(ctx context.Context, dir string, r io.Reader) error {
	rel, abs, root, err := sb.filesPath(ctx, dir)
	if err != nil {
		return err
	}
	tmp, clean, err := sb.stage(ctx, "put archive", rel)
	if err != nil {
		return err
	}
	defer clean()
	archive := tmp + "/archive.tar"
	toolbox, err := sb.toolboxURL(ctx)
	if err != nil {
		return fmt.Errorf("daytona: put archive in sandbox %s: %w", sb.id, err)
	}
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		part, err := mw.CreateFormFile("file", "archive.tar")
		if err == nil {
			_, err = io.Copy(part, r)
		}
		if err == nil {
			err = mw.Close()
		}
		pw.CloseWithError(err)
	}()
	resp, _, _, err := sb.s.c.do(ctx, toolbox, http.MethodPost, "files/upload", url.Values{"path": {archive}}, pr, mw.FormDataContentType())
	pr.CloseWithError(errors.New("upload ended"))
	if err != nil {
		return fmt.Errorf("daytona: put archive in sandbox %s: %w", sb.id, err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	_, err = sb.script(ctx, "put archive", rel, putScript, abs, root, archive)
	return err
}

// GetArchive makes the archive with the sandbox's tar and downloads it,
// its names ("./NAME") rebased onto p.
func (sb *sandbox) GetArchive(ctx context.Context, p string, w io.Writer) error {
	rel, abs, root, err := sb.filesPath(ctx, p)
	if err != nil {
		return err
	}
	tmp, clean, err := sb.stage(ctx, "get archive", rel)
	if err != nil {
		return err
	}
	defer clean()
	archive := tmp + "/archive.tar"
	if _, err := sb.script(ctx, "get archive", rel, getScript, abs, root, archive); err != nil {
		return err
	}
	toolbox, err := sb.toolboxURL(ctx)
	if err != nil {
		return fmt.Errorf("daytona: get archive in sandbox %s: %w", sb.id, err)
	}
	resp, _, _, err := sb.s.c.do(ctx, toolbox, http.MethodGet, "files/download", url.Values{"path": {archive}}, nil, "")
	if err != nil {
		return fmt.Errorf("daytona: get archive in sandbox %s: %w", sb.id, err)
	}
	defer resp.Body.Close()
	return driverkit.RebaseTar(resp.Body, w, "./")
}

// ReadDir lists dir with sh, stat and readlink in the sandbox
// (driverkit.ExecFiles over bounded Execs).
func (sb *sandbox) ReadDir(ctx context.Context, dir string) ([]drivers.FileInfo, error) {
	if _, _, _, err := sb.filesPath(ctx, dir); err != nil {
		return nil, err
	}
	sb.mu.Lock()
	wd := sb.workdir
	sb.mu.Unlock()
	return driverkit.ExecFiles{Sandbox: sb.id, Workdir: wd, Confine: true, Start: sb.startBounded}.ReadDir(ctx, dir)
}

// startBounded runs cmd as a bounded Exec (at most 16 MiB of each
// stream; more is an error) and writes its output when it has ended.
func (sb *sandbox) startBounded(ctx context.Context, cmd drivers.Command, stdout, stderr io.Writer) (drivers.Process, error) {
	cmd.OutputLimit = 16 << 20
	res, err := sb.Exec(ctx, cmd)
	if err != nil {
		return nil, err
	}
	if res.Truncated {
		return nil, fmt.Errorf("daytona: files in sandbox %s: the command's output is longer than 16 MiB", sb.id)
	}
	_, _ = stdout.Write(res.Stdout)
	_, _ = stderr.Write(res.Stderr)
	return endedProcess{res}, nil
}

// endedProcess is a process that has ended with res.
type endedProcess struct{ res *drivers.Result }

func (p endedProcess) Wait(context.Context) (*drivers.Result, error) { return p.res, nil }
func (endedProcess) Signal(context.Context, string) error            { return nil }
func (endedProcess) CloseStdin() error                               { return nil }
