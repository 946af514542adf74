package execrelay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/yamux"
)

// greeting is what a relay writes on its standard output once its socket
// is bound, before the multiplexed stream: the host reads it first, so that
// what is not a relay (a shell's "not found", an older runner's usage) is
// told apart from a protocol error, and knows the socket is there.
const greeting = "berth-execrelay/1\n"

// RelayOptions tune Serve. A nil *RelayOptions is the zero value: no log.
type RelayOptions struct {
	// Logger receives the relay's warnings (a connection it could not
	// carry); nil discards them.
	Logger *slog.Logger
}

// Serve is the sandbox's side of the relay (berth-runner relay): it listens
// on the unix socket at socket (an absolute path; its directory is created
// with mode 0700 when missing, a stale socket there is removed, another kind
// of file is refused), writes the greeting to stdout, and then carries each
// connection made to the socket as one stream of a yamux session over stdin
// (frames from the host) and stdout (frames to the host). It returns nil
// when stdin ends or the session fails (the host's exec went away), and
// ctx.Err() when ctx ends; either way the socket is closed and removed,
// unless another relay has bound the path since. Serve closes stdin and
// stdout (those that are io.Closers) as it returns, and waits for the
// session's reads and writes: give it streams whose Close interrupts them
// (io.Pipe ends, an *os.File in non-blocking mode). If the socket's path is
// removed or replaced while it runs (checked every second), it returns an
// error: the host starts another relay, which binds the path again. The
// host never opens a stream: the relay accepts none.
func Serve(ctx context.Context, socket string, stdin io.Reader, stdout io.Writer, opts *RelayOptions) error {
	if opts == nil {
		opts = &RelayOptions{}
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ln, bound, err := bind(socket)
	if err != nil {
		return err
	}
	defer func() {
		ln.Close()
		// A relay started after this one (the host restarted it while
		// this one's exec had not ended yet) holds the path now: leave it.
		if cur, err := os.Lstat(socket); err == nil && os.SameFile(cur, bound) {
			os.Remove(socket)
		}
	}()
	if _, err := io.WriteString(stdout, greeting); err != nil {
		return fmt.Errorf("relay %s: write the greeting to the host: %w", socket, err)
	}
	sess, err := yamux.Client(&stdio{r: stdin, w: stdout}, relayConfig())
	if err != nil {
		return fmt.Errorf("relay %s: %w", socket, err)
	}
	defer sess.Close()

	var wg sync.WaitGroup
	defer wg.Wait()
	var mu sync.Mutex
	open := map[net.Conn]struct{}{}
	defer func() {
		mu.Lock()
		for c := range open {
			c.Close()
		}
		mu.Unlock()
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if pid, ok := peerPID(c.(*net.UnixConn)); ok && pid == os.Getpid() {
				c.Close() // stillOurs's probe
				continue
			}
			mu.Lock()
			open[c] = struct{}{}
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := splice(c.(*net.UnixConn), sess); err != nil {
					log.Warn("relay: a connection ended early", "socket", socket, "err", err)
				}
				mu.Lock()
				delete(open, c)
				mu.Unlock()
			}()
		}
	}()
	defer ln.Close() // ends the accept loop before wg.Wait
	tick := time.NewTicker(socketCheck)
	defer tick.Stop()
	for {
		select {
		case <-sess.CloseChan():
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			if !stillOurs(socket, bound) {
				return fmt.Errorf("relay: the socket %s was removed or replaced; ending, so that the host starts a relay that binds it again", socket)
			}
		}
	}
}

// socketCheck is how often a relay checks that the socket's path is still
// its own: one removed or replaced (by a task, a cleaner of temporary
// files) ends the relay, and the host starts another, which binds it again.
const socketCheck = time.Second

// stillOurs reports whether the socket at path is still the one this relay
// listens on: the file is there, and, where the kernel names a socket's
// listener (SO_PEERCRED), a connection to it reaches this process (an inode
// number and a coarse timestamp may be reused by a socket bound in its
// place). A socket too busy to answer at once is taken as ours.
func stillOurs(path string, bound os.FileInfo) bool {
	cur, err := os.Lstat(path)
	if err != nil {
		return false
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) {
			return false
		}
		return os.SameFile(cur, bound)
	}
	defer c.Close()
	if pid, ok := peerPID(c.(*net.UnixConn)); ok {
		return pid == os.Getpid()
	}
	return os.SameFile(cur, bound)
}

// bind listens on the unix socket at path, as Serve describes, and returns
// the listener and the socket's file info (which Serve compares before
// removing it).
func bind(path string) (*net.UnixListener, os.FileInfo, error) {
	if !filepath.IsAbs(path) {
		return nil, nil, fmt.Errorf("relay: socket %q: want an absolute path", path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, nil, fmt.Errorf("relay: create the socket's directory: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != os.ModeSocket {
			return nil, nil, fmt.Errorf("relay: %s exists and is not a socket (%v); remove it or name another path", path, fi.Mode().Type())
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, nil, fmt.Errorf("relay: remove the stale socket: %w", err)
		}
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, nil, fmt.Errorf("relay: %w", err)
	}
	ln.SetUnlinkOnClose(false)
	fi, err := os.Lstat(path)
	if err != nil {
		ln.Close()
		return nil, nil, fmt.Errorf("relay: %w", err)
	}
	return ln, fi, nil
}

// splice carries c over a new stream of sess until both directions end:
// each side's end of input half-closes the other; an error closes both.
func splice(c *net.UnixConn, sess *yamux.Session) error {
	defer c.Close()
	st, err := sess.OpenStream()
	if err != nil {
		return err
	}
	defer st.Close()
	errc := make(chan error, 2)
	go func() {
		_, err := io.Copy(st, c)
		if err == nil {
			err = st.Close() // half-close: the host reads EOF, and may still answer
		}
		errc <- err
	}()
	go func() {
		_, err := io.Copy(c, st)
		if err == nil {
			err = c.CloseWrite()
		}
		errc <- err
	}()
	var first error
	for range 2 {
		if err := <-errc; err != nil && first == nil {
			first = err
			c.Close() // unblocks the other direction
			st.Close()
		}
	}
	return first
}

// relayConfig is the sandbox side's yamux configuration. The host is
// trusted here; the keepalive ends a relay whose host no longer answers
// (an exec whose connection hangs rather than ends), and a stream waits for
// the host to accept it as long as it takes (the host paces its accepts).
func relayConfig() *yamux.Config {
	c := yamux.DefaultConfig()
	// The host opens no stream; yamux also bounds by this the streams
	// opened and not yet accepted by the host, which a larger value lets
	// open without waiting one round trip each.
	c.AcceptBacklog = 32
	c.KeepAliveInterval = 30 * time.Second
	c.StreamOpenTimeout = 0
	c.StreamCloseTimeout = time.Minute
	c.LogOutput = io.Discard
	return c
}

// stdio is a pair of streams as one io.ReadWriteCloser for yamux. Close
// closes what of them are closers.
type stdio struct {
	r io.Reader
	w io.Writer
}

func (s *stdio) Read(p []byte) (int, error)  { return s.r.Read(p) }
func (s *stdio) Write(p []byte) (int, error) { return s.w.Write(p) }

func (s *stdio) Close() error {
	var errs []error
	if c, ok := s.w.(io.Closer); ok {
		errs = append(errs, c.Close())
	}
	if c, ok := s.r.(io.Closer); ok {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}
