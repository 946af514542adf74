package ssh

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/driverkit"
)

// sandbox is an ssh lease: a session on the host through the pooled
// connection of its config. It is safe for concurrent use; commands run at
// once up to the server's MaxSessions (max_sessions) and queue beyond.
type sandbox struct {
	d   *driver
	c   *conn
	t   *target
	id  string
	cwd string

	mu       sync.Mutex
	running  map[*process]struct{}
	released bool
	receipt  drivers.Receipt
	relDone  chan struct{}
	relErr   error

	// nonce tags the session's commands (random per session); dirKey
	// names the lease directory on the server (runner.go), fixed for the
	// berth lease across processes (leaseDirKey); leaseDir is its path
	// once created.
	nonce    string
	dirKey   string
	runnerMu sync.Mutex
	ingress  *ingress
	leaseDir string
	cmds     atomic.Int64 // commands started: numbers their tags
}

// ID returns the provider lease id "ssh://user@host:port/path", where path
// is the verified workspace directory.
func (sb *sandbox) ID() string { return sb.id }

// Cwd returns the workspace directory as the server resolved it at Acquire
// (absolute, symlinks resolved): the default directory of commands.
func (sb *sandbox) Cwd() string { return sb.cwd }

// Exec runs cmd in its own process group on the server and returns its
// output (each stream capped at cmd.Limit()) and exit status; a non-zero
// exit is not an error. Env is exported by the remote shell (no AcceptEnv
// needed); Dir "" is Cwd, relative Dirs are under Cwd. A Dir that cannot
// be entered makes the command exit 125, a program not found exits 127,
// each with the shell's message on stderr. On cancellation the
// command's whole process group is killed on the server before Exec returns
// an error wrapping ctx.Err(). After Release it returns drivers.ErrReleased.
func (sb *sandbox) Exec(ctx context.Context, cmd drivers.Command) (*drivers.Result, error) {
	out := driverkit.NewOutputBuffer(cmd.Limit())
	errb := driverkit.NewOutputBuffer(cmd.Limit())
	p, err := sb.startCommand(ctx, cmd, out, errb)
	if err != nil {
		return nil, err
	}
	res, err := p.result()
	if res != nil {
		var t1, t2 bool
		res.Stdout, t1 = out.Bytes(), out.Truncated()
		res.Stderr, t2 = errb.Bytes(), errb.Truncated()
		res.Truncated = t1 || t2
	}
	return res, err
}

func (sb *sandbox) startCommand(ctx context.Context, cmd drivers.Command, stdout, stderr io.Writer) (*process, error) {
	dir := sb.cwd
	switch {
	case cmd.Dir == "":
	case strings.HasPrefix(cmd.Dir, "/"):
		dir = cmd.Dir
	default:
		dir = strings.TrimSuffix(sb.cwd, "/") + "/" + cmd.Dir
	}
	tag := sb.nextTag()
	for attempt := 1; ; attempt++ {
		// On Dropbear each start claims a path first, so that a start
		// whose session the server closed unanswered is started again only
		// once the driver holds that claim: the first session's command
		// (which Dropbear may run all the same) then never runs.
		claim := ""
		if sb.c.dropbear() {
			claim = claimPath(tag, attempt)
		}
		script, err := execScript(dir, cmd.Env, cmd.Argv, false, tag, claim)
		if err != nil {
			return nil, err
		}
		p, err := sb.start(ctx, sb.c.command(script), cmd, stdout, stderr, startOpts{tag: tag})
		if err == nil || claim == "" || !errors.Is(err, errUnanswered) || attempt == maxStartAttempts {
			return p, err
		}
		if !sb.c.stealClaim(ctx, claim) {
			return nil, fmt.Errorf("%w (its claim %s is taken: it started)", err, claim)
		}
		sb.d.log.Info("ssh: the server closed a session before it answered its exec; its command cannot run now, starting it again", "addr", sb.t.addr(), "attempt", attempt)
	}
}

// maxStartAttempts bounds how often startCommand starts a command again
// after the server closed its session unanswered (Dropbear only).
const maxStartAttempts = 5

// errUnanswered marks a start whose session the server closed before it
// answered the exec (x/crypto's io.EOF): Dropbear before mkj/dropbear#326
// may still run such a command.
var errUnanswered = errors.New("the server closed the session before it answered (the command may have started)")

// dropbear reports whether the server says it is Dropbear.
func (c *conn) dropbear() bool {
	c.mu.Lock()
	cl := c.client
	c.mu.Unlock()
	return cl != nil && strings.HasPrefix(strings.ToLower(string(cl.ServerVersion())), "ssh-2.0-dropbear")
}

// stealClaim makes the start claim path on the server over the control
// channel; true only when this call made it (so the command whose script
// claims path can no longer run).
func (c *conn) stealClaim(ctx context.Context, path string) bool {
	out, code, err := c.control(ctx, "mkdir "+shQuote(path)+" 2>/dev/null && echo claimed")
	return err == nil && code == 0 && strings.TrimSpace(out) == "claimed"
}

// run executes a driver-built script (no pgid marker) and collects output.
func (sb *sandbox) run(ctx context.Context, script string, cmd drivers.Command) (*drivers.Result, error) {
	out := driverkit.NewOutputBuffer(cmd.Limit())
	errb := driverkit.NewOutputBuffer(cmd.Limit())
	p, err := sb.start(ctx, script, cmd, out, errb, startOpts{raw: true})
	if err != nil {
		return nil, err
	}
	res, err := p.result()
	if res != nil {
		res.Stdout = out.Bytes()
		res.Stderr = errb.Bytes()
	}
	return res, err
}

// nextTag returns the leaseTagEnv value of the lease's next command: the
// lease nonce, "-", the command's number.
func (sb *sandbox) nextTag() string {
	return sb.nonce + "-" + strconv.FormatInt(sb.cmds.Add(1), 10)
}

func (sb *sandbox) errReleased() error {
	return fmt.Errorf("ssh %s: %w", sb.id, drivers.ErrReleased)
}

func (sb *sandbox) track(p *process) bool {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.released {
		return false
	}
	sb.running[p] = struct{}{}
	return true
}

func (sb *sandbox) untrack(p *process) {
	sb.mu.Lock()
	delete(sb.running, p)
	sb.mu.Unlock()
}

// control runs a short driver script on the control slot, outside any
// lease bookkeeping, and returns its stdout and exit status.
func (c *conn) control(ctx context.Context, script string) (string, int, error) {
	rel, err := c.slot(ctx, true)
	if err != nil {
		return "", -1, err
	}
	defer rel()
	s, err := c.controlSession(ctx)
	if err != nil {
		return "", -1, err
	}
	defer s.Close()
	var out bytes.Buffer
	s.Stdout = &out
	stop := context.AfterFunc(ctx, func() { _ = s.Close() })
	defer stop()
	err = s.Run(c.command(script))
	code, _, werr := exitOf(err)
	if werr != nil {
		if ctx.Err() != nil {
			return out.String(), -1, fmt.Errorf("ssh %s@%s: control command: %w", c.t.user, c.t.addr(), ctx.Err())
		}
		return out.String(), -1, fmt.Errorf("ssh %s@%s: control command: %w", c.t.user, c.t.addr(), werr)
	}
	return out.String(), code, nil
}

// Release ends the session, whatever the disposition (a host is never
// stopped or destroyed): it kills the process groups of the lease's
// commands still running, waits until the server no longer has them, and
// drops the lease's reference on the pooled connection. It first closes the
// runner ingress, if open, ends the runners the lease launched (and every
// process that inherited their mark: SIGTERM, then SIGKILL; survivors make
// the receipt unconfirmed) and removes the runner's lease directory (its
// socket and state directories) on the server; the uploaded runner binary
// stays. The receipt is
// StateDestroyed and confirmed once no process group of the lease is left
// (read back with kill -0 on the server); if that cannot be confirmed the
// receipt is unconfirmed and an error is returned. Releasing again returns
// the first receipt.
func (sb *sandbox) Release(ctx context.Context, d drivers.Disposition) (drivers.Receipt, error) {
	sb.mu.Lock()
	if sb.released {
		done := sb.relDone
		sb.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
			return drivers.Receipt{ProviderLeaseID: sb.id}, fmt.Errorf("ssh %s: release: %w", sb.id, ctx.Err())
		}
		return sb.receipt, sb.relErr
	}
	sb.released = true
	sb.relDone = make(chan struct{})
	procs := make([]*process, 0, len(sb.running))
	for p := range sb.running {
		procs = append(procs, p)
	}
	sb.mu.Unlock()

	runners, rerr := sb.closeRunner(ctx)
	sb.receipt, sb.relErr = sb.endSession(ctx, procs)
	switch {
	case rerr != nil:
		sb.receipt = drivers.Receipt{ProviderLeaseID: sb.id}
		sb.relErr = rerr
	case runners > 0 && sb.relErr == nil:
		sb.receipt.Evidence += fmt.Sprintf("; %d runner processes ended", runners)
	}
	sb.d.pool.put(sb.c)
	close(sb.relDone)
	sb.d.log.Debug("ssh lease released", "id", sb.id, "disposition", d, "confirmed", sb.receipt.Confirmed)
	return sb.receipt, sb.relErr
}

// endSession ends what the lease's commands left on the server: the
// process groups of the commands still running and every process carrying
// the lease's tag (leaseTagEnv), then checks both. The receipt is
// confirmed only when the groups are gone and no process carries the tag.
func (sb *sandbox) endSession(ctx context.Context, procs []*process) (drivers.Receipt, error) {
	r := drivers.Receipt{ProviderLeaseID: sb.id}
	groups, err := sb.runningGroups(ctx, procs)
	if err != nil {
		return r, err
	}
	if err := sb.killLease(ctx, groups); err != nil {
		return r, err
	}
	if sb.c.dropbear() {
		// The lease's start claims (startCommand): best effort, they hold
		// nothing but their names.
		_, _, _ = sb.c.control(ctx, "rm -rf -- "+claimDir+"/"+claimPrefix+shQuote(sb.nonce)+"-*")
	}
	for _, p := range procs {
		select {
		case <-p.done:
		case <-ctx.Done():
			return r, fmt.Errorf("ssh %s: release: waiting for sessions to end: %w", sb.id, ctx.Err())
		}
	}
	r.State = drivers.StateDestroyed
	r.Confirmed = true
	r.ConfirmedAt = time.Now()
	r.EvidenceKind = drivers.EvidenceTagScan // berth's group and tag check over its own control channel
	if len(groups) == 0 {
		r.Evidence = "session ended; no command of the lease was running and no process carries the lease's tag"
	} else {
		gs := make([]string, len(groups))
		for i, g := range groups {
			gs[i] = strconv.Itoa(g)
		}
		r.Evidence = "session ended; killed process groups " + strings.Join(gs, ",") +
			" (made by the driver's wrapper), which are gone, and no process carries the lease's tag"
	}
	return r, nil
}

// runningGroups returns the process groups of the lease's commands still
// running; a running command whose group is unknown (its wrapper could not
// make one) is an error: nothing could confirm it ended.
func (sb *sandbox) runningGroups(ctx context.Context, procs []*process) ([]int, error) {
	var groups []int
	for _, p := range procs {
		if p.finished() {
			continue
		}
		if g := p.waitGroup(ctx); g > 0 {
			groups = append(groups, g)
		} else if !p.finished() {
			return nil, fmt.Errorf("ssh %s: release: the process group of a running command is unknown; cannot confirm it ended", sb.id)
		}
	}
	return groups, nil
}

// killLease kills groups and every process of the login user carrying the
// lease's tag, and returns nil once none of them is left (read back on the
// server: pgrep -s and kill -0 for the groups, /proc/PID/environ for the
// tag).
func (sb *sandbox) killLease(ctx context.Context, groups []int) error {
	out, code, err := sb.c.control(ctx, killScript("KILL", groups, tagPattern(sb.nonce+"-", true), true))
	if err != nil {
		return fmt.Errorf("ssh %s: release: killing the lease's processes: %w", sb.id, err)
	}
	switch out = strings.TrimSpace(out); {
	case code == 3 && out == "noproc":
		return fmt.Errorf("ssh %s: release: the server has no /proc to read process environments from; cannot confirm that no process of the lease is left", sb.id)
	case code != 0:
		return fmt.Errorf("ssh %s: release: processes of the lease still present after KILL: %s", sb.id, out)
	}
	return nil
}
