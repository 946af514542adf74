package ssh

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/driverkit"
	xssh "golang.org/x/crypto/ssh"
)

// killGrace bounds how long cancellation waits for the pgid marker, the
// kill command and the session's end; the kill runs on a context detached
// from the (already cancelled) caller's.
const killGrace = 10 * time.Second

// process is one command running in an ssh session.
type process struct {
	sb      *sandbox
	sess    *xssh.Session
	sniff   *pgidSniffer
	stdin   io.WriteCloser
	started time.Time
	tag     string // the command's leaseTagEnv value ("" for raw scripts)
	rel     func() // gives the session slot back
	stop    func() bool

	done          chan struct{} // closed when the session ended
	cancelStarted chan struct{} // closed when cancellation began
	res           *drivers.Result
	err           error

	mu         sync.Mutex
	cancelErr  error
	cancelDone chan struct{}
	// leftErr is set when cancellation could not see the session end: the
	// process group may still run on the server.
	leftErr error
}

var _ drivers.Process = (*process)(nil)

// Start runs cmd like Exec but streams stdout and stderr to the writers as
// the output arrives (nil discards). cmd.Stdin, if set, is copied to the
// process until it ends or CloseStdin is called. Cancelling ctx kills the
// process group on the server; Wait then returns an error wrapping
// ctx.Err().
func (sb *sandbox) Start(ctx context.Context, cmd drivers.Command, stdout, stderr io.Writer) (drivers.Process, error) {
	p, err := sb.startCommand(ctx, cmd, stdout, stderr)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// startOpts vary how start runs a script.
type startOpts struct {
	// raw scripts print no pgid marker (driver-internal commands).
	raw bool
	// pty, if set, runs the script on a pseudo-terminal; the marker then
	// arrives on stdout, which carries all terminal output.
	pty *ptyRequest
	// tag is the command's leaseTagEnv value, which its script exports.
	tag string
}

type ptyRequest struct {
	term       string
	rows, cols int
}

// start opens a session and starts script.
func (sb *sandbox) start(ctx context.Context, script string, cmd drivers.Command, stdout, stderr io.Writer, o startOpts) (*process, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("ssh %s: %w", sb.t.addr(), err)
	}
	sb.mu.Lock()
	released := sb.released
	sb.mu.Unlock()
	if released {
		return nil, sb.errReleased()
	}
	rel, err := sb.c.slot(ctx, false)
	if err != nil {
		return nil, err
	}
	sess, err := sb.c.session(ctx)
	if err != nil {
		rel()
		return nil, err
	}
	if stdout == nil {
		stdout = io.Discard
	}
	p := &process{sb: sb, sess: sess, rel: rel, tag: o.tag, done: make(chan struct{}), cancelStarted: make(chan struct{})}
	if o.pty != nil {
		p.sniff = newSniffer(stdout)
		sess.Stdout = p.sniff
		sess.Stderr = stderr
		modes := xssh.TerminalModes{xssh.ECHO: 1, xssh.TTY_OP_ISPEED: 38400, xssh.TTY_OP_OSPEED: 38400}
		if err := sess.RequestPty(o.pty.term, o.pty.rows, o.pty.cols, modes); err != nil {
			sess.Close()
			rel()
			return nil, fmt.Errorf("ssh %s@%s: requesting a pty: %w: %v", sb.t.user, sb.t.addr(), drivers.ErrTransient, err)
		}
	} else {
		p.sniff = newSniffer(stderr)
		sess.Stdout = stdout
		sess.Stderr = p.sniff
	}
	if o.raw {
		p.sniff.flush()
	}
	if cmd.Stdin != nil {
		w, err := sess.StdinPipe()
		if err != nil {
			sess.Close()
			rel()
			return nil, fmt.Errorf("ssh %s: stdin: %w", sb.t.addr(), err)
		}
		p.stdin = w
	}
	if !sb.track(p) {
		sess.Close()
		rel()
		return nil, sb.errReleased()
	}
	p.started = time.Now()
	if err := sess.Start(script); err != nil {
		sb.untrack(p)
		sess.Close()
		rel()
		if errors.Is(err, io.EOF) {
			// The server closed the session without answering the exec.
			// A conforming server ran nothing, but Dropbear before
			// mkj/dropbear#326 may have started it all the same
			// (startCommand starts it again only behind a claim; the
			// lease's tag finds it at release).
			return nil, fmt.Errorf("ssh %s@%s: starting command: %w: %w: %v", sb.t.user, sb.t.addr(), drivers.ErrTransient, errUnanswered, err)
		}
		return nil, fmt.Errorf("ssh %s@%s: starting command: %w: %v", sb.t.user, sb.t.addr(), drivers.ErrTransient, err)
	}
	if p.stdin != nil {
		driverkit.CopyStdin(p.stdin, cmd.Stdin, p.done)
	}
	p.stop = context.AfterFunc(ctx, func() { p.cancel(ctx.Err()) })
	go p.wait()
	return p, nil
}

func (p *process) wait() {
	err := p.sess.Wait()
	p.sniff.flush()
	p.stop()
	code, sig, werr := exitOf(err)
	p.res = &drivers.Result{ExitCode: code, Signal: sig, Duration: time.Since(p.started)}
	if werr != nil {
		p.err = fmt.Errorf("ssh %s@%s: command: %w: %v", p.sb.t.user, p.sb.t.addr(), drivers.ErrTransient, werr)
	}
	p.sb.untrack(p)
	_ = p.sess.Close()
	p.rel()
	close(p.done)
}

// exitOf reads the exit status from a Session.Wait error: code, signal name,
// or an error when the status is missing (connection lost).
func exitOf(err error) (int, string, error) {
	if err == nil {
		return 0, "", nil
	}
	var ee *xssh.ExitError
	if errors.As(err, &ee) {
		if ee.Signal() != "" {
			return -1, ee.Signal(), nil
		}
		return ee.ExitStatus(), "", nil
	}
	var em *xssh.ExitMissingError
	if errors.As(err, &em) {
		return -1, "", errors.New("the session ended without an exit status (connection lost?)")
	}
	return -1, "", err
}

func (p *process) finished() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitGroup waits until the pgid marker arrived (or the session ended) and
// returns the group, 0 if unknown.
func (p *process) waitGroup(ctx context.Context) int {
	t := time.NewTimer(killGrace)
	defer t.Stop()
	select {
	case <-p.sniff.found:
	case <-p.done:
	case <-ctx.Done():
	case <-t.C:
	}
	return p.sniff.group()
}

// cancel kills the process group after the caller's context ended.
func (p *process) cancel(cause error) {
	p.mu.Lock()
	if p.cancelErr != nil || p.finished() {
		p.mu.Unlock()
		return
	}
	p.cancelErr = cause
	p.cancelDone = make(chan struct{})
	close(p.cancelStarted)
	p.mu.Unlock()
	defer close(p.cancelDone)

	ctx, cancel := context.WithTimeout(context.Background(), killGrace)
	defer cancel()
	log := p.sb.d.log
	g := p.waitGroup(ctx)
	if (g > 0 || p.tag != "") && !p.finished() {
		var groups []int
		if g > 0 {
			groups = []int{g}
		}
		if _, _, err := p.sb.c.control(ctx, killScript("KILL", groups, tagPattern(p.tag, false), false)); err != nil {
			log.Warn("ssh: killing cancelled command's process group failed", "id", p.sb.id, "pgid", g, "error", err)
		} else {
			log.Debug("ssh: killed cancelled command's process group", "id", p.sb.id, "pgid", g)
		}
	}
	select {
	case <-p.done:
		return
	case <-ctx.Done():
	}
	// The kill did not end the session (connection lost, or the group was
	// unknown). Closing the channel does not stop a remote process, so the
	// outcome is reported as unconfirmed rather than waited for.
	log.Warn("ssh: cancelled command did not end; its process group may still run", "id", p.sb.id, "pgid", g)
	_ = p.sess.Close()
	p.mu.Lock()
	p.leftErr = fmt.Errorf("ssh %s: cancelled command (process group %d) was not seen to end; it may still run on the server", p.sb.id, g)
	p.mu.Unlock()
}

// Wait blocks until the command ended and returns its exit status. After
// cancellation of Start's context it returns once the process group was
// killed, with an error wrapping that context's error. If ctx ends first,
// Wait returns an error wrapping ctx.Err() and the command keeps running.
func (p *process) Wait(ctx context.Context) (*drivers.Result, error) {
	if ctx.Done() == nil {
		return p.result()
	}
	type outcome struct {
		res *drivers.Result
		err error
	}
	// The helper ends when the command's outcome is known: it never
	// outlives the process.
	ch := make(chan outcome, 1)
	go func() {
		res, err := p.result()
		ch <- outcome{res, err}
	}()
	select {
	case o := <-ch:
		return o.res, o.err
	case <-ctx.Done():
		select {
		case o := <-ch:
			return o.res, o.err
		default:
		}
		return nil, fmt.Errorf("ssh %s: wait: %w", p.sb.id, ctx.Err())
	}
}

// result blocks until the command's outcome is known (its end, or the end
// of the kill that Start's cancellation began).
func (p *process) result() (*drivers.Result, error) {
	for {
		p.mu.Lock()
		cerr, cdone := p.cancelErr, p.cancelDone
		p.mu.Unlock()
		if cerr == nil {
			select {
			case <-p.done:
			case <-p.cancelStarted:
				continue
			}
			p.mu.Lock()
			cerr, cdone = p.cancelErr, p.cancelDone
			p.mu.Unlock()
			if cerr == nil {
				return p.res, p.err
			}
		}
		<-cdone
		p.mu.Lock()
		left := p.leftErr
		p.mu.Unlock()
		if left != nil {
			return nil, fmt.Errorf("%w: %w", left, cerr)
		}
		<-p.done
		return p.res, fmt.Errorf("ssh %s@%s: command cancelled: %w", p.sb.t.user, p.sb.t.addr(), cerr)
	}
}

// Signal sends sig, one of driverkit.Signals (as driverkit.ParseSignal reads
// it; another name is an error wrapping drivers.ErrUnsupported), to the
// command's whole process group on the server. A process that already
// ended is not an error.
func (p *process) Signal(ctx context.Context, sig string) error {
	sig, err := driverkit.ParseSignal(sig)
	if err != nil {
		return fmt.Errorf("ssh %s: %w", p.sb.id, err)
	}
	g := p.waitGroup(ctx)
	if p.finished() {
		return nil
	}
	if g <= 0 {
		if ctx.Err() != nil {
			return fmt.Errorf("ssh %s: signal: %w", p.sb.id, ctx.Err())
		}
		return fmt.Errorf("ssh %s: signal: the command's process group is unknown", p.sb.id)
	}
	_, _, err = p.sb.c.control(ctx, killScript(sig, []int{g}, "", false))
	return err
}

// CloseStdin closes the command's standard input (a no-op when the
// command was started without Stdin, whose input is empty).
func (p *process) CloseStdin() error {
	if p.stdin == nil {
		return nil
	}
	return p.stdin.Close()
}
