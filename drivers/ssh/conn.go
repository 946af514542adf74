package ssh

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	xssh "golang.org/x/crypto/ssh"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/reason"
)

// dialTCP connects to addr within ctx. Failures wrap drivers.ErrUnreachable
// (and ctx.Err() when the caller's context ended).
func dialTCP(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		if cerr := context.Cause(ctx); cerr != nil && ctx.Err() != nil {
			return nil, fmt.Errorf("ssh %s: connect: %w: %w", addr, drivers.ErrUnreachable, cerr)
		}
		return nil, &errcode.Error{Op: "ssh", Target: addr,
			Message: fmt.Sprintf("Could not connect to %s: check that the host is up, sshd listens on that port and no firewall blocks it.", addr),
			Err:     fmt.Errorf("%w: %v", drivers.ErrUnreachable, err)}
	}
	return c, nil
}

// closeOnDone closes c when ctx ends before stop is called, so that a
// handshake blocked in a read returns.
func closeOnDone(ctx context.Context, c net.Conn) (stop func()) {
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-ctx.Done():
			_ = c.Close()
		case <-done:
		}
	}()
	return func() {
		close(done)
		wg.Wait()
		_ = c.SetDeadline(time.Time{})
	}
}

// errConnectTimeout is the cause of the connect_timeout context.
var errConnectTimeout = errors.New("connect timeout")

// classifyHandshake maps a handshake error to the driver sentinels.
func classifyHandshake(ctx context.Context, addr, user string, err error) error {
	who := addr
	if user != "" {
		who = user + "@" + addr
	}
	var hk *hostKeyError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &hk):
		return hk
	case ctx.Err() != nil, errors.Is(err, os.ErrDeadlineExceeded) && hasDeadline(ctx):
		// The connection's deadline is ctx's deadline: when it fired first,
		// ctx is done at once, and its cause says whose deadline it was.
		<-ctx.Done()
		cause := context.Cause(ctx)
		if errors.Is(cause, errConnectTimeout) {
			return &errcode.Error{Op: "ssh", Target: who,
				Message: fmt.Sprintf("The SSH handshake with %s did not finish within connect_timeout: check that sshd answers, or raise connect_timeout.", who),
				Err:     fmt.Errorf("handshake did not finish within connect_timeout: %w", drivers.ErrTimeout)}
		}
		return fmt.Errorf("ssh %s: handshake: %w", who, cause)
	case errors.As(err, new(*xssh.AlgorithmNegotiationError)):
		return fmt.Errorf("ssh %s: handshake: %w: %w", who, drivers.ErrUnreachable, err)
	case strings.Contains(err.Error(), "unable to authenticate"):
		return &errcode.Error{Op: "ssh", Target: who,
			Message: fmt.Sprintf("The SSH server at %s refused the private key: check the user and that the key is in its authorized_keys.", who),
			Err:     fmt.Errorf("the server refused the private key: %w", drivers.ErrAuth)}
	default:
		return fmt.Errorf("ssh %s: handshake: %w: %v", who, drivers.ErrUnreachable, err)
	}
}

func hasDeadline(ctx context.Context) bool {
	_, ok := ctx.Deadline()
	return ok
}

// dial opens an authenticated client with strict host key checking. The
// handshake is bounded by ctx and by the target's connect timeout.
//
// The host key algorithms are restricted to the types known_hosts trusts
// for the host, so that the server shows the key that is checked. A server
// without a key of any trusted type is a mismatch: the handshake is
// repeated without the restriction, only to name the key it offers.
func dial(ctx context.Context, t *target) (*xssh.Client, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, t.connectTimeout, errConnectTimeout)
	defer cancel()
	algos := algorithms(t.known.trusted(t.host, t.port))
	c, err := dialAlgos(ctx, t, algos)
	var ne *xssh.AlgorithmNegotiationError
	if err != nil && algos != nil && errors.As(err, &ne) && ne.What == "host key" {
		c, err = dialAlgos(ctx, t, nil)
		if err == nil {
			// Unreachable: the callback refuses every key not trusted.
			_ = c.Close()
			return nil, fmt.Errorf("ssh %s: host key type negotiation: %w", t.addr(), drivers.ErrHostKeyMismatch)
		}
	}
	return c, err
}

func dialAlgos(ctx context.Context, t *target, algos []string) (*xssh.Client, error) {
	addr := t.addr()
	conn, err := dialTCP(ctx, addr)
	if err != nil {
		if errors.Is(context.Cause(ctx), errConnectTimeout) {
			return nil, &errcode.Error{Op: "ssh", Target: addr,
				Message: fmt.Sprintf("Could not connect to %s within connect_timeout: check that the host is up and reachable, or raise connect_timeout.", addr),
				Err:     fmt.Errorf("connect did not finish within connect_timeout: %w", drivers.ErrUnreachable)}
		}
		return nil, err
	}
	cfg := &xssh.ClientConfig{
		User:              t.user,
		Auth:              []xssh.AuthMethod{xssh.PublicKeys(t.signer)},
		HostKeyCallback:   t.known.callback(t.host, t.port),
		HostKeyAlgorithms: algos,
	}
	stop := closeOnDone(ctx, conn)
	c, chans, reqs, err := xssh.NewClientConn(conn, addr, cfg)
	stop()
	if err != nil {
		_ = conn.Close()
		return nil, classifyHandshake(ctx, addr, t.user, err)
	}
	return xssh.NewClient(c, chans, reqs), nil
}

// pool shares one connection per target (keyed by target.poolKey) between
// the leases that use it, with reference counting: the connection is closed
// when its last lease is released.
type pool struct {
	log   *slog.Logger
	mu    sync.Mutex
	conns map[string]*conn
}

// conn is one pooled connection. Exec sessions are limited to
// maxSessions-1 at a time (the server's MaxSessions), one slot is kept for
// control commands (killing process groups).
type conn struct {
	p   *pool
	t   *target
	key string

	ready   chan struct{} // closed when the first dial finished
	dialErr error

	mu     sync.Mutex
	client *xssh.Client
	gen    int
	refs   int
	closed bool
	stopKA chan struct{}

	execSlots chan struct{}
	ctlSlots  chan struct{}

	// ctl is a second connection for control commands to a Dropbear
	// server (controlSession), dialed when first needed; guarded by mu.
	ctl *xssh.Client

	// posix is set once a lease found the login shell to be POSIX.
	posix atomic.Bool
}

// get returns a referenced connection for t, dialing it when the pool has
// none. Concurrent gets for one target share the dial.
func (p *pool) get(ctx context.Context, t *target) (*conn, error) {
	p.mu.Lock()
	c, ok := p.conns[t.poolKey]
	if ok {
		c.refs++
		p.mu.Unlock()
		select {
		case <-c.ready:
		case <-ctx.Done():
			p.put(c)
			return nil, fmt.Errorf("ssh %s@%s: waiting for connection: %w", t.user, t.addr(), ctx.Err())
		}
		if c.dialErr != nil {
			p.put(c)
			return nil, c.dialErr
		}
		return c, nil
	}
	c = &conn{p: p, t: t, key: t.poolKey, refs: 1, ready: make(chan struct{}),
		execSlots: make(chan struct{}, t.maxSessions-1), ctlSlots: make(chan struct{}, 1)}
	p.conns[t.poolKey] = c
	p.mu.Unlock()

	start := time.Now()
	client, err := dial(ctx, t)
	if err != nil {
		p.mu.Lock()
		if p.conns[t.poolKey] == c {
			delete(p.conns, t.poolKey)
		}
		c.refs--
		c.closed = true
		p.mu.Unlock()
		c.dialErr = err
		close(c.ready)
		p.log.Debug("ssh dial failed", "addr", t.addr(), "user", t.user, "code", reason.Of(err))
		return nil, err
	}
	c.client = client
	c.startKeepalive(client)
	close(c.ready)
	p.log.Debug("ssh connected", "addr", t.addr(), "user", t.user, "duration", time.Since(start))
	return c, nil
}

// put drops one reference; the last one closes the connection.
func (p *pool) put(c *conn) {
	p.mu.Lock()
	c.refs--
	last := c.refs == 0
	if last && p.conns[c.key] == c {
		delete(p.conns, c.key)
	}
	p.mu.Unlock()
	if !last {
		return
	}
	<-c.ready
	c.mu.Lock()
	c.closed = true
	cl, ctl := c.client, c.ctl
	c.stopKeepaliveLocked()
	c.mu.Unlock()
	if ctl != nil {
		_ = ctl.Close()
	}
	if cl != nil {
		_ = cl.Close()
		p.log.Debug("ssh connection closed", "addr", c.t.addr(), "user", c.t.user)
	}
}

// controlSession opens the session of a control command. On a Dropbear
// server it opens it on a connection of its own (dialed once, redialed
// when broken): Dropbear before mkj/dropbear#326 closes a session channel
// that waits for its exec when another child of the same connection exits,
// and a control command beside a command channel is exactly that. Each
// connection then carries one session at a time (with max_sessions 2),
// and the bug has no second child to trip over. Elsewhere it is session.
func (c *conn) controlSession(ctx context.Context) (*xssh.Session, error) {
	if !c.dropbear() {
		return c.session(ctx)
	}
	for redialed := false; ; redialed = true {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return nil, fmt.Errorf("ssh %s@%s: connection closed: %w", c.t.user, c.t.addr(), drivers.ErrReleased)
		}
		cl := c.ctl
		c.mu.Unlock()
		if cl == nil || redialed {
			if cl != nil {
				_ = cl.Close()
			}
			var err error
			if cl, err = dial(ctx, c.t); err != nil {
				return nil, err
			}
			c.mu.Lock()
			if c.closed {
				c.mu.Unlock()
				_ = cl.Close()
				return nil, fmt.Errorf("ssh %s@%s: connection closed: %w", c.t.user, c.t.addr(), drivers.ErrReleased)
			}
			c.ctl = cl
			c.mu.Unlock()
		}
		s, err := cl.NewSession()
		if err == nil {
			return s, nil
		}
		if redialed {
			return nil, fmt.Errorf("ssh %s@%s: opening a control session after redial: %w: %v", c.t.user, c.t.addr(), drivers.ErrUnreachable, err)
		}
	}
}

// startKeepalive sends keepalive@openssh.com every keepalive interval; a
// request without a reply within three intervals (at least the connect
// timeout) closes the client, so that the next session redials.
func (c *conn) startKeepalive(client *xssh.Client) {
	if c.t.keepalive <= 0 {
		return
	}
	stop := make(chan struct{})
	c.mu.Lock()
	c.stopKA = stop
	c.mu.Unlock()
	go func() {
		tick := time.NewTicker(c.t.keepalive)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			reply := make(chan error, 1)
			go func() {
				_, _, err := client.SendRequest("keepalive@openssh.com", true, nil)
				reply <- err
			}()
			var err error
			select {
			case err = <-reply:
			case <-time.After(max(3*c.t.keepalive, c.t.connectTimeout)):
				err = errors.New("no reply")
			case <-stop:
				return
			}
			if err != nil {
				// A dead connection: close it so that the next session redials.
				c.p.log.Debug("ssh keepalive failed; closing connection", "addr", c.t.addr())
				_ = client.Close()
				return
			}
		}
	}()
}

func (c *conn) stopKeepaliveLocked() {
	if c.stopKA != nil {
		close(c.stopKA)
		c.stopKA = nil
	}
}

// slot takes an exec (ctl=false) or control (ctl=true) session slot; the
// returned func gives it back.
func (c *conn) slot(ctx context.Context, ctl bool) (func(), error) {
	ch := c.execSlots
	if ctl {
		ch = c.ctlSlots
	}
	select {
	case ch <- struct{}{}:
		return func() { <-ch }, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("ssh %s@%s: waiting for a free session: %w", c.t.user, c.t.addr(), ctx.Err())
	}
}

// session opens a session channel. A broken connection is redialed once; a
// server that refuses the channel for lack of sessions is retried briefly.
func (c *conn) session(ctx context.Context) (*xssh.Session, error) {
	redialed := false
	backoff := 2 * time.Millisecond
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return nil, fmt.Errorf("ssh %s@%s: connection closed: %w", c.t.user, c.t.addr(), drivers.ErrReleased)
		}
		cl, gen := c.client, c.gen
		c.mu.Unlock()
		s, err := cl.NewSession()
		if err == nil {
			return s, nil
		}
		var oce *xssh.OpenChannelError
		if errors.As(err, &oce) {
			// The server has no room for another channel yet (MaxSessions):
			// a closed channel may not be freed yet on its side.
			if backoff > 500*time.Millisecond {
				return nil, fmt.Errorf("ssh %s@%s: server refused a session: %w: %v", c.t.user, c.t.addr(), drivers.ErrTransient, oce)
			}
			select {
			case <-time.After(backoff):
				backoff *= 2
				continue
			case <-ctx.Done():
				return nil, fmt.Errorf("ssh %s@%s: opening session: %w", c.t.user, c.t.addr(), ctx.Err())
			}
		}
		if redialed {
			return nil, fmt.Errorf("ssh %s@%s: opening session after redial: %w: %v", c.t.user, c.t.addr(), drivers.ErrUnreachable, err)
		}
		if err := c.redial(ctx, gen); err != nil {
			return nil, err
		}
		redialed = true
	}
}

// redial replaces a broken client, unless another caller already replaced
// generation gen.
func (c *conn) redial(ctx context.Context, gen int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return fmt.Errorf("ssh %s@%s: connection closed: %w", c.t.user, c.t.addr(), drivers.ErrReleased)
	}
	if c.gen != gen {
		return nil
	}
	c.p.log.Info("ssh connection broken; redialing", "addr", c.t.addr(), "user", c.t.user)
	_ = c.client.Close()
	c.stopKeepaliveLocked()
	client, err := dial(ctx, c.t)
	if err != nil {
		return err
	}
	c.client = client
	c.gen++
	c.mu.Unlock()
	c.startKeepalive(client)
	c.mu.Lock()
	return nil
}
