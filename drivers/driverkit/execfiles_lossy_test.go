package driverkit

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/errcode"
)

// toolsDir is a directory of links to the tools the scripts run: GNU tar
// and coreutils with the system's sh, or busybox's.
func toolsDir(t *testing.T, busybox bool) string {
	t.Helper()
	dir := t.TempDir()
	for _, tool := range []string{"sh", "tar", "stat", "readlink", "dirname", "basename", "cat"} {
		target, err := exec.LookPath(tool)
		if busybox {
			target, err = exec.LookPath("busybox")
		}
		if err != nil {
			t.Skipf("no %s here: %v", tool, err)
		}
		if err := os.Symlink(target, filepath.Join(dir, tool)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// lossyStart runs commands with the tools in dir through a transport that
// loses the tail of a command's output when the command exits, as the
// Kubernetes API server's exec does under load: it holds back the last
// 64 KiB of the output, hands it on once the output has been quiet for
// half a second, and drops it when the output ends (the command and its
// children exited). With stdin false it runs every command with an empty
// stdin.
func lossyStart(dir string, stdin bool) func(context.Context, drivers.Command, io.Writer, io.Writer) (drivers.Process, error) {
	return func(ctx context.Context, cmd drivers.Command, stdout, stderr io.Writer) (drivers.Process, error) {
		c := exec.CommandContext(ctx, filepath.Join(dir, "sh"), cmd.Argv[1:]...)
		c.Env = []string{"PATH=" + dir}
		c.Dir = cmd.Dir
		c.Stderr = stderr
		pr, pw, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		c.Stdout = pw
		var in io.WriteCloser
		if stdin && cmd.Stdin != nil {
			if in, err = c.StdinPipe(); err != nil {
				return nil, err
			}
		}
		err = c.Start()
		_ = pw.Close()
		if err != nil {
			_ = pr.Close()
			return nil, err
		}
		p := &lossyProcess{exited: make(chan struct{}), delivered: make(chan struct{})}
		go func() {
			p.err = c.Wait()
			close(p.exited)
		}()
		if in != nil {
			CopyStdin(in, cmd.Stdin, p.exited)
		}
		go deliverLossy(pr, stdout, p.delivered)
		return p, nil
	}
}

func deliverLossy(pr *os.File, w io.Writer, delivered chan<- struct{}) {
	defer close(delivered)
	defer pr.Close()
	const lag, quiet = 64 << 10, 500 * time.Millisecond
	var pending []byte
	failed := false
	hand := func(b []byte) {
		if !failed && len(b) > 0 {
			_, err := w.Write(b)
			failed = err != nil
		}
	}
	buf := make([]byte, 32<<10)
	for {
		_ = pr.SetReadDeadline(time.Now().Add(quiet))
		n, err := pr.Read(buf)
		pending = append(pending, buf[:n]...)
		if k := len(pending) - lag; k > 0 {
			hand(pending[:k])
			pending = append([]byte(nil), pending[k:]...)
		}
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			hand(pending)
			pending = nil
		case err != nil:
			return // the output ended: what is pending is lost
		}
	}
}

type lossyProcess struct {
	exited, delivered chan struct{}
	err               error
}

func (p *lossyProcess) Wait(ctx context.Context) (*drivers.Result, error) {
	if err := AwaitDone(ctx, p.delivered); err != nil {
		return nil, err
	}
	<-p.exited
	var ee *exec.ExitError
	switch {
	case errors.As(p.err, &ee):
		return &drivers.Result{ExitCode: ee.ExitCode()}, nil
	case p.err != nil:
		return nil, p.err
	}
	return &drivers.Result{}, nil
}
func (p *lossyProcess) Signal(context.Context, string) error { return nil }
func (p *lossyProcess) CloseStdin() error                    { return nil }

// Through a transport that loses the output's tail when the command
// exits, GetArchive with the real sh and tar (GNU's and busybox's) gets
// the whole archive, because the command waits for its stdin to end until
// the end-of-archive marker was read; a transport that gives the command
// no stdin (so that it exits when tar does) loses the tail, and
// GetArchive says so (ErrTransient) instead of succeeding. ReadDir, not
// held, reports its lost listing as ErrTransient too.
func TestExecFilesThroughALossyTransport(t *testing.T) {
	t.Parallel()
	work := t.TempDir()
	big := make([]byte, 300<<10)
	_, _ = rand.NewChaCha8([32]byte{7}).Read(big)
	want := map[string][]byte{"big": big, "small": []byte("small\n"), "sub/x": []byte("x\n")}
	if err := os.Mkdir(filepath.Join(work, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(work, "d", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range want {
		if err := os.WriteFile(filepath.Join(work, "d", name), body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, busybox := range []bool{false, true} {
		name := map[bool]string{false: "gnu", true: "busybox"}[busybox]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := toolsDir(t, busybox)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()

			held := ExecFiles{Sandbox: "local " + name, Workdir: work, Start: lossyStart(dir, true)}
			var b bytes.Buffer
			if err := held.GetArchive(ctx, "d", &b); err != nil {
				t.Fatalf("GetArchive through the lossy transport: %v", err)
			}
			got := map[string][]byte{}
			tr := tar.NewReader(&b)
			for {
				hdr, err := tr.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatalf("reading the archive back: %v", err)
				}
				if hdr.Typeflag == tar.TypeReg {
					got[hdr.Name], _ = io.ReadAll(tr)
				}
			}
			for name, body := range want {
				if !bytes.Equal(got[name], body) {
					t.Errorf("GetArchive: %s came back with %d bytes, want %d", name, len(got[name]), len(body))
				}
			}

			unheld := ExecFiles{Sandbox: "local " + name, Workdir: work, Start: lossyStart(dir, false)}
			if err := unheld.GetArchive(ctx, "d", io.Discard); !errors.Is(err, drivers.ErrTransient) {
				t.Errorf("GetArchive whose command exits with tar: %v, want the lost tail found (ErrTransient)", err)
			}
			if list, err := held.ReadDir(ctx, "d"); !errors.Is(err, drivers.ErrTransient) {
				t.Errorf("ReadDir through the lossy transport: %v, %v, want the lost listing found (ErrTransient)", list, err)
			}

			if err := held.GetArchive(ctx, "missing", io.Discard); !errors.Is(err, errcode.ErrNotFound) {
				t.Errorf("GetArchive of a missing path: %v, want ErrNotFound", err)
			}
			if err := held.PutArchive(ctx, "missing", bytes.NewReader(tarOf(t, nil))); !errors.Is(err, errcode.ErrNotFound) {
				t.Errorf("PutArchive into a missing directory: %v, want ErrNotFound", err)
			}

			// Put: the real tar extracts the whole archive.
			dst := filepath.Join(work, "put-"+name)
			if err := os.Mkdir(dst, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := held.PutArchive(ctx, filepath.Base(dst), bytes.NewReader(tarOf(t, map[string]int{"p": 200 << 10, "q": 10}))); err != nil {
				t.Fatalf("PutArchive: %v", err)
			}
			if fi, err := os.Stat(filepath.Join(dst, "p")); err != nil || fi.Size() != 200<<10 {
				t.Errorf("PutArchive: p is %v, %v, want 200 KiB", fi, err)
			}
		})
	}
}
