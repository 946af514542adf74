package execrelay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/yamux"
)

// StartFunc runs one relay in the sandbox (the argv of Command) through a
// streaming exec and returns when it has ended. It copies stdin to the
// relay's standard input until stdin ends, and writes the relay's standard
// output to stdout and its standard error to stderr as they come; it must
// end the relay and return promptly when ctx ends (Close waits for it),
// and return when the relay has ended even while stdin has not (as
// drivers' streaming execs do: driverkit.CopyStdin); the driver must pass
// the end of stdin on to the relay (a half-close), which is how the
// listener ends a relay: stdin first, and ctx only if the relay has not
// exited (removing its socket) 2 s later. Its error says why the exec
// ended or could not start; nil is an exec that ended on its own.
// StreamExec makes one from a drivers.StreamExecer.
type StartFunc func(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) error

// Options tune Listen. A nil *Options is the zero value, whose every field
// takes its default.
type Options struct {
	// MaxConns bounds the relayed connections the host holds at once
	// (those Accept has yet to return, those it returned that are open, and
	// those closed whose stream is still ending), over all the relays this
	// listener started; another connection waits in the relay, a few in
	// the session's backlog (as many again), and beyond that is reset. With
	// yamux's 256 KiB window per stream, a relay makes the host buffer at
	// most 2 × MaxConns × 256 KiB. 0 means 32.
	MaxConns int
	// GreetingTimeout bounds how long a started relay has to bind its
	// socket and greet the host; 0 means 30 seconds.
	GreetingTimeout time.Duration
	// MinBackoff and MaxBackoff bound the wait before a relay that ended
	// is started again: it doubles, from MinBackoff up to MaxBackoff, while
	// relays end early (within 5 s, or before greeting), and is MinBackoff
	// again after one that ran longer. Zero values mean 100 ms and 10 s.
	MinBackoff, MaxBackoff time.Duration
	// KeepAlive is the interval of the host's pings, which end a relay
	// whose exec stream hangs rather than ends (a silent drop on the way)
	// within KeepAlive plus 10 s; 0 means 15 seconds.
	KeepAlive time.Duration
	// Logger receives a relay's ends and restarts (at Warn, with the tail
	// of its standard error as printable text); nil discards them.
	Logger *slog.Logger
	// Drain bounds how long the relay outlives Close while connections
	// Accept returned are still open (a server's last responses on their
	// way); 0 means 10 seconds.
	Drain time.Duration
}

// Listener is the host's side of the relay: a net.Listener whose Accept
// yields each connection made to the relay's socket in the sandbox. It
// keeps one relay running through its StartFunc while it is open, and
// starts another, with backoff, when one ends (an API server restarted, a
// dropped connection, a protocol error): the new relay binds the socket
// again and runners reconnect on their own. What comes from the relay is
// hostile input: frames are checked before yamux reads them (version, type,
// size, a bound on pings), streams are bounded (Options.MaxConns), and a
// malformed frame ends that relay only. Its methods are safe for
// concurrent use.
type Listener struct {
	start  StartFunc
	opts   Options
	log    *slog.Logger
	cancel context.CancelFunc
	conns  chan net.Conn
	slots  chan struct{}
	done   chan struct{} // closed when the run loop has ended

	stopped  chan struct{} // closed by Close: Accept refuses, new streams are closed
	stopOnce sync.Once
	live     atomic.Int64 // connections handed to Accept that have not ended

	mu      sync.Mutex
	up      bool          // a relay has greeted and runs
	changed chan struct{} // closed and replaced when up or lastErr changes
	lastErr error
}

// Listen starts a relay through start and returns its listener at once;
// Ready waits for the relay's socket. ctx bounds the listener's life (its
// end closes it as Close does) and its values reach start. opts may be nil.
func Listen(ctx context.Context, start StartFunc, opts *Options) *Listener {
	o := Options{}
	if opts != nil {
		o = *opts
	}
	if o.MaxConns <= 0 {
		o.MaxConns = 32
	}
	if o.GreetingTimeout <= 0 {
		o.GreetingTimeout = 30 * time.Second
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = 100 * time.Millisecond
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 10 * time.Second
	}
	o.MaxBackoff = max(o.MaxBackoff, o.MinBackoff)
	if o.KeepAlive <= 0 {
		o.KeepAlive = 15 * time.Second
	}
	if o.Drain <= 0 {
		o.Drain = 10 * time.Second
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(ctx)
	l := &Listener{
		start: start, opts: o, log: log, cancel: cancel,
		conns:   make(chan net.Conn),
		slots:   make(chan struct{}, o.MaxConns),
		done:    make(chan struct{}),
		stopped: make(chan struct{}),
		changed: make(chan struct{}),
	}
	go l.run(ctx)
	return l
}

// Accept waits for and returns the next connection made to the relay's
// socket in the sandbox. After Close it returns an error wrapping
// net.ErrClosed; it returns no other error (a relay that ends is started
// again, unseen by Accept).
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case <-l.stopped:
	case <-l.done:
	default:
		select {
		case c := <-l.conns:
			return c, nil
		case <-l.stopped:
		case <-l.done:
		}
	}
	return nil, fmt.Errorf("execrelay: accept: %w", net.ErrClosed)
}

// Close stops accepting, as a net.Listener's Close does: Accept returns
// net.ErrClosed, a connection made to the socket from now on is closed,
// and no relay is started again. The connections Accept returned stay
// open, so that what a server still writes on them reaches the sandbox
// (http.Server.Shutdown closes its listener first, then waits for its
// connections); once every one has ended on both sides, or Options.Drain
// after Close, the relay ends (its exec ends, and the relay removes its
// socket), ending any connection still open. With none open, Close
// returns once the StartFunc has returned and nothing the listener
// started runs; with some, it returns at once and the relay ends after
// them. Closing again does nothing.
func (l *Listener) Close() error {
	first := false
	l.stopOnce.Do(func() {
		first = true
		close(l.stopped)
	})
	if !first {
		return nil
	}
	if l.live.Load() == 0 {
		l.cancel()
		<-l.done
		return nil
	}
	go func() {
		defer l.cancel()
		deadline := time.NewTimer(l.opts.Drain)
		defer deadline.Stop()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for l.live.Load() > 0 {
			select {
			case <-tick.C:
			case <-deadline.C:
				return
			case <-l.done:
				return
			}
		}
	}()
	return nil
}

// Addr returns the listener's address: network "execrelay", no place.
func (l *Listener) Addr() net.Addr { return addr{} }

type addr struct{}

func (addr) Network() string { return "execrelay" }
func (addr) String() string  { return "execrelay" }

// Ready waits until a relay has bound its socket and greeted the host, so
// that a runner started now finds the socket. If ctx ends first it returns
// an error wrapping ctx.Err() that says why the last relay failed, if one
// did; after Close (or the end of Listen's ctx), an error wrapping
// net.ErrClosed. A relay that ends
// later makes Ready wait again for the next.
func (l *Listener) Ready(ctx context.Context) error {
	for {
		l.mu.Lock()
		up, last, ch := l.up, l.lastErr, l.changed
		l.mu.Unlock()
		closed := false
		select {
		case <-l.stopped: // closed
			closed = true
		case <-l.done: // closed, or Listen's ctx ended
			closed = true
		default:
		}
		switch {
		case closed:
			return fmt.Errorf("execrelay: %w", net.ErrClosed)
		case up:
			return nil
		}
		select {
		case <-ch:
		case <-l.stopped:
		case <-l.done:
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("execrelay: the relay is not up (%w); the last one failed: %w", ctx.Err(), last)
			}
			return fmt.Errorf("execrelay: the relay is not up: %w", ctx.Err())
		}
	}
}

// setState records whether a relay is up and why the last one failed.
func (l *Listener) setState(up bool, err error) {
	l.mu.Lock()
	l.up = up
	if err != nil {
		l.lastErr = err
	}
	close(l.changed)
	l.changed = make(chan struct{})
	l.mu.Unlock()
}

// run keeps a relay running until ctx ends.
func (l *Listener) run(ctx context.Context) {
	defer close(l.done)
	delay := l.opts.MinBackoff
	for {
		began := time.Now()
		greeted, err := l.session(ctx)
		if ctx.Err() != nil {
			return
		}
		select {
		case <-l.stopped: // closed: no relay is started again
			<-ctx.Done()
			return
		default:
		}
		l.setState(false, err)
		l.log.Warn("execrelay: the relay ended; starting it again", "err", err, "ran", time.Since(began).Round(time.Millisecond))
		if greeted && time.Since(began) >= 5*time.Second {
			delay = l.opts.MinBackoff
		}
		// Full jitter over the upper half: restarts of many sandboxes
		// after one API server restart spread out.
		wait := delay/2 + rand.N(delay/2+1)
		delay = min(2*delay, l.opts.MaxBackoff)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
}

// session runs one relay until it ends, and returns whether it greeted
// and why it ended.
func (l *Listener) session(ctx context.Context) (greeted bool, err error) {
	// The exec's context ends only after the relay had closeGrace to end
	// on its own; the end of ctx ends its stdin first.
	sctx, scancel := context.WithCancel(context.WithoutCancel(ctx))
	defer scancel()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	defer context.AfterFunc(ctx, func() {
		inW.Close()
		outR.CloseWithError(net.ErrClosed)
	})()
	stderr := &tail{max: 1024}
	ylog := &tail{max: 512}
	startErr := make(chan error, 1)
	go func() {
		err := l.start(sctx, inR, outW, stderr)
		ended := err
		if ended == nil {
			ended = errors.New("the relay's exec ended")
		}
		outW.CloseWithError(ended)
		inR.CloseWithError(ended)
		startErr <- err
	}()
	// why says why the session ended, once start has returned: its error
	// and the relay's last words come with the cause the host saw.
	why := func(cause error) error {
		// The relay's stdin ends first: it removes its socket and exits.
		// One that does not is ended through ctx.
		// What it still writes is dropped (a write fails: it ends).
		inW.Close()
		outR.Close()
		var serr error
		select {
		case serr = <-startErr:
		case <-time.After(closeGrace):
			scancel()
			serr = <-startErr
		}
		msg := cause.Error()
		if s := ylog.String(); s != "" {
			msg += " (" + s + ")"
		}
		if serr != nil && !errors.Is(serr, context.Canceled) && !errors.Is(cause, serr) {
			msg += "; the exec: " + serr.Error()
		}
		if s := stderr.String(); s != "" {
			msg += "; the relay said: " + s
		}
		return errors.New(msg)
	}

	timer := time.AfterFunc(l.opts.GreetingTimeout, func() {
		outR.CloseWithError(fmt.Errorf("no greeting within %v", l.opts.GreetingTimeout))
	})
	buf := make([]byte, len(greeting))
	n, rerr := io.ReadFull(outR, buf)
	timer.Stop()
	if rerr != nil || string(buf) != greeting {
		if rerr == nil || n > 0 {
			return false, why(fmt.Errorf("the relay did not greet the host (it wrote %s): is the binary a berth-runner with the relay mode?", printable(buf[:n])))
		}
		return false, why(fmt.Errorf("the relay did not greet the host: %w", rerr))
	}

	g := &guard{r: outR, maxData: maxWindow, pingBurst: 16, pingEvery: time.Second}
	sess, err := yamux.Server(&stdio{r: g, w: inW}, l.hostConfig(ylog))
	if err != nil {
		return true, why(err)
	}
	l.setState(true, nil)
	defer sess.Close()
	for {
		select {
		case l.slots <- struct{}{}:
		case <-sess.CloseChan():
			return true, why(g.cause())
		}
		st, err := sess.AcceptStream()
		if err != nil {
			<-l.slots
			return true, why(g.cause())
		}
		c := &conn{Stream: st, slots: l.slots}
		select {
		case <-l.stopped:
			c.Close()
			continue
		default:
		}
		l.live.Add(1)
		c.ended = func() { l.live.Add(-1) }
		select {
		case l.conns <- c:
		case <-l.stopped:
			c.Close()
		case <-sess.CloseChan():
			c.Close()
		}
	}
}

// closeGrace is how long a relay whose stdin ended has to exit on its own
// (removing its socket) before its exec is ended.
const closeGrace = 2 * time.Second

// maxWindow is yamux's initial (and, here, largest) stream window: what
// the host buffers per stream at most.
const maxWindow = 256 << 10

// hostConfig is the host side's yamux configuration: bounded, since its
// peer is the sandbox.
// yamux's log (its words on why it ended a session: numbers, never the
// peer's bytes) goes to ylog.
func (l *Listener) hostConfig(ylog io.Writer) *yamux.Config {
	c := yamux.DefaultConfig()
	c.AcceptBacklog = l.opts.MaxConns
	c.EnableKeepAlive = true
	c.KeepAliveInterval = l.opts.KeepAlive
	c.ConnectionWriteTimeout = 10 * time.Second
	c.MaxStreamWindowSize = maxWindow
	// A stream the host closed and the relay does not finish is dropped
	// after 10 s (its buffer with it); its slot is held until then.
	c.StreamCloseTimeout = 10 * time.Second
	c.StreamOpenTimeout = 0 // the host opens no stream
	c.LogOutput = ylog
	return c
}

// conn is a relayed connection: a yamux stream holding one of the
// listener's slots until the stream has ended on both sides.
type conn struct {
	*yamux.Stream
	slots chan struct{}
	once  sync.Once
	ended func() // called once the stream has ended on both sides
}

// Close closes the stream and returns; the slot is released once the
// relay has finished the stream too (or it timed out, or the session
// ended), what it still sends read and dropped meanwhile.
func (c *conn) Close() error {
	err := c.Stream.Close()
	c.once.Do(func() {
		go func() {
			_, _ = io.Copy(io.Discard, c.Stream)
			<-c.slots
			if c.ended != nil {
				c.ended()
			}
		}()
	})
	return err
}

// tail keeps the last max bytes written to it.
type tail struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

// String returns the tail as one line of printable text.
func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(printableText(t.b))
}

// printable quotes at most 64 bytes of b, from the sandbox, for a message.
func printable(b []byte) string {
	if len(b) > 64 {
		b = b[:64]
	}
	return fmt.Sprintf("%q", b)
}

// printableText keeps the printable ASCII of b, newlines and tabs as
// spaces.
func printableText(b []byte) string {
	var sb strings.Builder
	for _, c := range b {
		switch {
		case c == '\n' || c == '\t' || c == '\r':
			sb.WriteByte(' ')
		case c >= 0x20 && c < 0x7f:
			sb.WriteByte(c)
		}
	}
	return sb.String()
}
