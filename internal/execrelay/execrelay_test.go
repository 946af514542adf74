package execrelay_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/execrelay"
	"github.com/berthdev/berth/internal/syncbuf"
	"github.com/berthdev/berth/internal/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveRunnerBinary()
	os.Exit(code)
}

// relays runs the real runner binary's relay mode as a local process, as a
// driver's streaming exec would in a sandbox, and keeps the processes it
// started.
type relays struct {
	bin, socket string
	mu          sync.Mutex
	procs       []*os.Process
}

func newRelays(t *testing.T) *relays {
	t.Helper()
	// A short path: a unix socket's name is limited to 108 bytes.
	dir, err := os.MkdirTemp("", "relay-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return &relays{bin: testenv.RunnerBinary(t), socket: filepath.Join(dir, "run", "prp.sock")}
}

func (r *relays) start(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) error {
	cmd := exec.CommandContext(ctx, execrelay.Command(r.bin, r.socket)[0], execrelay.Command(r.bin, r.socket)[1:]...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.WaitDelay = 2 * time.Second
	// Standard input is copied by a goroutine Wait does not wait for, as
	// drivers do (driverkit.CopyStdin): a relay that died ends start even
	// while the host has nothing to send.
	w, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	go func() {
		io.Copy(w, stdin)
		w.Close()
	}()
	r.mu.Lock()
	r.procs = append(r.procs, cmd.Process)
	r.mu.Unlock()
	return cmd.Wait()
}

// last returns the process of the relay started last.
func (r *relays) last() *os.Process {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.procs[len(r.procs)-1]
}

func (r *relays) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.procs)
}

// listen starts a listener over r and serves echo on it; it is closed at
// cleanup.
func listen(t *testing.T, start execrelay.StartFunc, opts *execrelay.Options) *execrelay.Listener {
	t.Helper()
	ln := execrelay.Listen(context.Background(), start, opts)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := ln.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	return ln
}

// echo sends n random bytes through a new connection to socket, half
// closes, and checks that the same bytes come back.
func echo(socket string, n int) error {
	c, err := net.Dial("unix", socket)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	data := make([]byte, n)
	rand.Read(data)
	werr := make(chan error, 1)
	go func() {
		_, err := c.Write(data)
		if err == nil {
			err = c.(*net.UnixConn).CloseWrite()
		}
		werr <- err
	}()
	got, err := io.ReadAll(c)
	if err != nil {
		return fmt.Errorf("read back: %w", err)
	}
	if err := <-werr; err != nil {
		return fmt.Errorf("write: %w", err)
	}
	if sha256.Sum256(got) != sha256.Sum256(data) {
		return fmt.Errorf("read back %d bytes that differ from the %d sent", len(got), len(data))
	}
	return nil
}

func TestRelayCarriesConnectionsBothWays(t *testing.T) {
	t.Parallel()
	r := newRelays(t)
	listen(t, r.start, nil)
	fi, err := os.Stat(filepath.Dir(r.socket))
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("the socket's directory: %v, %v; want mode 0700", fi.Mode(), err)
	}
	if err := echo(r.socket, 3<<20); err != nil {
		t.Fatalf("one connection of 3 MiB: %v", err)
	}
	// Many at once, each through its own stream.
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- echo(r.socket, 200<<10)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("a concurrent connection: %v", err)
		}
	}
	if n := r.count(); n != 1 {
		t.Errorf("%d relays started, want 1", n)
	}
}

// The host speaks first too: what it writes before reading reaches the
// sandbox's side.
func TestRelayCarriesWhatTheHostSaysFirst(t *testing.T) {
	t.Parallel()
	r := newRelays(t)
	ln := execrelay.Listen(context.Background(), r.start, nil)
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.WriteString(c, "hello from the host\n")
		io.Copy(io.Discard, c)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := ln.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("unix", r.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 20)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "hello from the host\n" {
		t.Fatalf("read %q, %v", buf, err)
	}
}

func TestRelayIsStartedAgainAfterItsProcessIsKilled(t *testing.T) {
	t.Parallel()
	r := newRelays(t)
	log, logs := logBuffer()
	ln := listen(t, r.start, &execrelay.Options{MinBackoff: 50 * time.Millisecond, Logger: log})
	defer func() {
		if t.Failed() {
			t.Logf("the listener's log:\n%s", logs.String())
		}
	}()
	if err := echo(r.socket, 1<<10); err != nil {
		t.Fatal(err)
	}
	first := r.last()
	// A connection open across the kill ends; a new one works.
	open, err := net.Dial("unix", r.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	if err := first.Kill(); err != nil {
		t.Fatal(err)
	}
	open.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := open.Read(make([]byte, 1)); err == nil {
		t.Error("a connection carried by the killed relay still reads")
	}
	deadline := time.Now().Add(15 * time.Second)
	for r.count() < 2 || r.last() == first {
		if time.Now().After(deadline) {
			t.Fatal("no relay started after the first was killed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := ln.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	// The killed relay left its socket behind; the new one bound it again.
	if err := echo(r.socket, 64<<10); err != nil {
		t.Fatalf("a connection after the restart: %v", err)
	}
}

// A socket removed or replaced in the sandbox (by a task, a cleaner of
// temporary files) ends its relay, whose successor binds the path again.
func TestARemovedSocketIsBoundAgain(t *testing.T) {
	t.Parallel()
	r := newRelays(t)
	log, logs := logBuffer()
	ln := listen(t, r.start, &execrelay.Options{MinBackoff: 50 * time.Millisecond, Logger: log})
	if err := os.Remove(r.socket); err != nil {
		t.Fatal(err)
	}
	// A task's own socket at the path.
	impostor, err := net.Listen("unix", r.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer impostor.Close()
	for deadline := time.Now().Add(10 * time.Second); r.count() < 2; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no relay started after the socket was replaced; log:\n%s", logs.String())
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := ln.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	if err := echo(r.socket, 1<<10); err != nil {
		t.Fatalf("a connection after the socket was bound again: %v", err)
	}
	if !strings.Contains(logs.String(), "removed or replaced") {
		t.Errorf("the host's log does not say why the relay ended:\n%s", logs.String())
	}
}

// Close with no connection open ends the relay and everything the
// listener started before it returns.
func TestCloseEndsTheRelayAndAllItStarted(t *testing.T) {
	r := newRelays(t)
	testenv.RunnerBinary(t) // built before the goroutines are counted
	before := runtime.NumGoroutine()
	ln := listen(t, r.start, nil)
	if err := echo(r.socket, 1024); err != nil {
		t.Fatal(err)
	}
	waitNoConns(t, ln)
	proc := r.last()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after Close: %v, want net.ErrClosed", err)
	}
	if err := ln.Ready(context.Background()); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Ready after Close: %v, want net.ErrClosed", err)
	}
	// Close returned after the relay's exec had: the process is gone (and
	// reaped: Wait returned), its socket removed.
	if err := proc.Signal(syscall.Signal(0)); err == nil {
		t.Errorf("the relay (pid %d) still runs after Close", proc.Pid)
	}
	if _, err := os.Lstat(r.socket); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the socket is still there after Close: %v", err)
	}
	waitGoroutines(t, before)
	if n := r.count(); n != 1 {
		t.Errorf("%d relays started, want 1", n)
	}
}

// waitNoConns waits until the connections ln carried have ended on both
// sides (an echo's stream is finished a moment after its bytes came
// back).
func waitNoConns(t *testing.T, ln *execrelay.Listener) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for execrelay.OpenConns(ln) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d relayed connections still open", execrelay.OpenConns(ln))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Close is a net.Listener's: it stops accepting, and a connection Accept
// returned goes on carrying bytes both ways, so that a server's last
// response reaches the sandbox (http.Server.Shutdown closes its listener
// before it closes its connections). A connection made after Close is
// closed. The relay ends once the open connection has ended.
func TestCloseLetsOpenConnectionsFinish(t *testing.T) {
	t.Parallel()
	r := newRelays(t)
	ln := listen(t, r.start, nil)
	c, err := net.Dial("unix", r.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	roundTrip := func(what string) {
		t.Helper()
		if _, err := c.Write([]byte(what)); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, len(what))
		if _, err := io.ReadFull(c, buf); err != nil || string(buf) != what {
			t.Fatalf("echo of %q: %q, %v", what, buf, err)
		}
	}
	roundTrip("before")
	proc := r.last()
	began := time.Now()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(began); waited > 5*time.Second {
		t.Errorf("Close with a connection open waited %s for it", waited.Round(time.Millisecond))
	}
	if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after Close: %v, want net.ErrClosed", err)
	}
	roundTrip("after the listener's Close")
	if late, err := net.Dial("unix", r.socket); err == nil {
		late.SetDeadline(time.Now().Add(10 * time.Second))
		late.Write([]byte("x"))
		if n, err := late.Read(make([]byte, 1)); err == nil {
			t.Errorf("a connection made after Close was carried (read %d bytes)", n)
		}
		late.Close()
	}
	if err := proc.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the relay ended while a connection was open: %v", err)
	}
	c.Close() // the echo ends its side: the relay ends after it
	deadline := time.Now().Add(20 * time.Second)
	for proc.Signal(syscall.Signal(0)) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("the relay (pid %d) still runs after its last connection ended", proc.Pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := r.count(); n != 1 {
		t.Errorf("%d relays started, want 1: a closed listener starts none again", n)
	}
}

// A connection that stays open does not keep the relay past
// Options.Drain after Close.
func TestCloseDrainIsBounded(t *testing.T) {
	t.Parallel()
	r := newRelays(t)
	ln := listen(t, r.start, &execrelay.Options{Drain: 500 * time.Millisecond})
	c, err := net.Dial("unix", r.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	proc := r.last()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	// The connection stays open on both sides; the drain's end ends it.
	if _, err := io.ReadAll(c); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Logf("the open connection ended with %v", err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for proc.Signal(syscall.Signal(0)) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("the relay (pid %d) still runs well past the drain", proc.Pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The end of Listen's context closes the listener as Close does.
func TestTheEndOfListensContextClosesIt(t *testing.T) {
	t.Parallel()
	r := newRelays(t)
	ctx, cancel := context.WithCancel(context.Background())
	ln := execrelay.Listen(ctx, r.start, nil)
	defer ln.Close()
	rctx, rcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer rcancel()
	if err := ln.Ready(rctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after the context ended: %v, want net.ErrClosed", err)
	}
	if err := ln.Ready(rctx); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Ready after the context ended: %v, want net.ErrClosed", err)
	}
	if _, err := os.Lstat(r.socket); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the socket is still there: %v", err)
	}
}

// waitGoroutines waits until no more goroutines run than before (the
// echo servers and pipes of the test end shortly after Close).
func waitGoroutines(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines after Close, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A relay that is not one (a missing binary, a shell's complaint) is
// reported by Ready with what it said, and started again with backoff.
func TestReadyReportsARelayThatDoesNotGreet(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	starts := 0
	start := func(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) error {
		mu.Lock()
		starts++
		mu.Unlock()
		io.WriteString(stderr, "sh: 1: /opt/berth/berth-runner: not found\n")
		return errors.New("exit status 127")
	}
	ln := execrelay.Listen(context.Background(), start, &execrelay.Options{MinBackoff: 10 * time.Millisecond, MaxBackoff: 40 * time.Millisecond})
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	err := ln.Ready(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "not found") || !strings.Contains(err.Error(), "exit status 127") {
		t.Errorf("Ready = %v; want a deadline naming the relay's words and its exit", err)
	}
	mu.Lock()
	n := starts
	mu.Unlock()
	// 500 ms at 10, 20, 40, 40... ms (jittered in the upper half): more
	// than once, far fewer than a busy loop.
	if n < 3 || n > 60 {
		t.Errorf("%d starts in 500 ms, want a few (backoff)", n)
	}
}

// logBuffer returns a logger writing to a buffer.
func logBuffer() (*slog.Logger, *syncbuf.Buffer) {
	var b syncbuf.Buffer
	return slog.New(slog.NewTextHandler(&b, nil)), &b
}

var _ = bytes.Equal

// BenchmarkRelayThroughput measures one connection's throughput through a
// real relay process, sandbox to host: go test -run XXX -bench Relay
// ./internal/execrelay/
func BenchmarkRelayThroughput(b *testing.B) {
	dir, err := os.MkdirTemp("", "relay-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	r := &relays{bin: testenv.RunnerBinary(b), socket: filepath.Join(dir, "prp.sock")}
	ln := execrelay.Listen(context.Background(), r.start, nil)
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := ln.Ready(ctx); err != nil {
		b.Fatal(err)
	}
	got := make(chan int64, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		n, _ := io.Copy(io.Discard, c)
		c.Close()
		got <- n
	}()
	c, err := net.Dial("unix", r.socket)
	if err != nil {
		b.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	b.SetBytes(int64(len(chunk)))
	b.ResetTimer()
	for range b.N {
		if _, err := c.Write(chunk); err != nil {
			b.Fatal(err)
		}
	}
	c.(*net.UnixConn).CloseWrite()
	if n := <-got; n != int64(b.N*len(chunk)) {
		b.Fatalf("the host read %d bytes, want %d", n, b.N*len(chunk))
	}
	c.Close()
}
