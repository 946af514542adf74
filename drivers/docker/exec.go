package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/driverkit"
	"github.com/berthdev/berth/drivers/internal/handoff"
	"github.com/berthdev/berth/images"
)

// How commands are run so that they can be ended (docker exec has no kill):
// every command runs under a small sh wrapper that exports the
// environment variable BERTH_EXEC_ID=<random id>, which all its
// descendants inherit, and then execs it in its own place (same pid): the
// engine starts every exec'd process as the leader of its own session and
// process group (runc's nsexec calls setsid for each process it starts;
// gVisor's runsc does the same), so the command leads its group without a
// setsid of ours and without a shell left waiting for it. Signals and
// cancellation run a second exec that sends the signal to every process
// carrying the marker and to the process group each of them leads; a
// cancellation repeats the kill until the engine reports the exec ended
// and no marked process is left. The image must provide sh, grep and kill
// (busybox, Debian, Alpine and most distros do).
const (
	markerEnv = "BERTH_EXEC_ID"

	// wrapperScript: $1 is the marker id, the rest is argv, exec'd in
	// the wrapper's place: no fork, no setsid and no waiting shell, which
	// under gVisor (ptrace platform) cost about a third of an exec of
	// "true" (each process start there is a round of ptrace stubs). A
	// command argv[0] that is not found exits 127, as before.
	wrapperScript = `id=$1; shift
export ` + markerEnv + `=$id
exec "$@"`

	// killScript: $1 is the signal, $2 the marker id. It prints how many
	// marked processes it found.
	killScript = `sig=$1; id=$2; n=0
for d in /proc/[0-9]*; do p=${d#/proc/}
if grep -q "` + markerEnv + `=$id" "$d/environ" 2>/dev/null; then n=$((n+1)); kill -s "$sig" -- "-$p" 2>/dev/null; kill -s "$sig" "$p" 2>/dev/null; fi
done; echo $n`
)

// signalNumbers maps the signals Result.Signal reports (exit status 128+n).
var signalNumbers = map[string]int{"HUP": 1, "INT": 2, "QUIT": 3, "KILL": 9, "USR1": 10, "USR2": 12, "TERM": 15}

// sandbox is one container. It is safe for concurrent use.
type sandbox struct {
	d        *driver
	cli      *client.Client
	cfg      *settings
	id       string
	released atomic.Bool
	runner   *runnerMounts // nil: made without AcquireRequest.Runner
	// pinned is the identity Acquire proved for a pinned reference (see
	// provenIdentity); zero otherwise (a tag, a resumed container).
	pinned images.Identity

	ingressMu sync.Mutex
	ingress   *ingress // the open ingress, if any

	// kills has room for one token (Acquire and Resume make it so): the
	// kill execs of one container run one at a time (signalMarked).
	kills chan struct{}

	primedMu sync.Mutex
	primed   *primedExec // the exec a warm sandbox's first command runs through (prime.go)
}

var (
	_ drivers.Sandbox       = (*sandbox)(nil)
	_ drivers.StreamExecer  = (*sandbox)(nil)
	_ drivers.ImageReporter = (*sandbox)(nil)
	_ drivers.Terminal      = (*sandbox)(nil)
	_ drivers.Capturer      = (*sandbox)(nil)
	_ drivers.RunnerHost    = (*sandbox)(nil)
)

// ID returns the container id.
func (s *sandbox) ID() string { return s.id }

func (s *sandbox) checkLive() error {
	if s.released.Load() {
		return fmt.Errorf("docker: container %s: %w", s.id, drivers.ErrReleased)
	}
	return nil
}

// Exec runs cmd in the container and returns its output (demultiplexed)
// and exit status. On cancellation the command's processes are killed, the
// kill is verified, and the error wraps ctx.Err().
func (s *sandbox) Exec(ctx context.Context, cmd drivers.Command) (*drivers.Result, error) {
	out := driverkit.NewOutputBuffer(cmd.Limit())
	errb := driverkit.NewOutputBuffer(cmd.Limit())
	p, err := s.start(ctx, cmd, out, errb)
	if err != nil {
		return nil, err
	}
	res, err := p.result()
	if res != nil {
		res.Stdout, res.Stderr = out.Bytes(), errb.Bytes()
		res.Truncated = out.Truncated() || errb.Truncated()
	}
	return res, err
}

// Start runs cmd and streams its output; see drivers.StreamExecer.
func (s *sandbox) Start(ctx context.Context, cmd drivers.Command, stdout, stderr io.Writer) (drivers.Process, error) {
	return s.start(ctx, cmd, stdout, stderr)
}

func (s *sandbox) start(ctx context.Context, cmd drivers.Command, stdout, stderr io.Writer) (*process, error) {
	if err := s.checkLive(); err != nil {
		return nil, err
	}
	if len(cmd.Argv) == 0 || cmd.Argv[0] == "" {
		return nil, errors.New("docker: exec: empty argv")
	}
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	if pr := s.takePrimed(); pr != nil {
		if p := s.startPrimed(ctx, pr, cmd, stdout, stderr); p != nil {
			return p, nil
		}
	}
	marker := randomHex(8)
	dir := cmd.Dir
	if dir == "" {
		dir = s.cfg.workdir
	}
	opts := container.ExecOptions{
		AttachStdout: true,
		AttachStderr: true,
		AttachStdin:  cmd.Stdin != nil,
		Env:          s.execEnv(cmd.Env),
		WorkingDir:   dir,
		Cmd:          append([]string{"/bin/sh", "-c", wrapperScript, "berth-exec", marker}, cmd.Argv...),
	}
	started := time.Now()
	created, err := s.cli.ContainerExecCreate(ctx, s.id, opts)
	if err != nil {
		return nil, engineErr(s.cfg.host, "exec in container "+s.id, err)
	}
	hj, err := s.cli.ContainerExecAttach(ctx, created.ID, container.ExecAttachOptions{})
	if err != nil {
		return nil, engineErr(s.cfg.host, "attach exec in container "+s.id, err)
	}
	p := &process{s: s, execID: created.ID, marker: marker, hj: hj, started: started, stdin: cmd.Stdin != nil,
		done: make(chan struct{}), finished: make(chan struct{})}
	p.copyOutput(stdout, stderr)
	if cmd.Stdin != nil {
		driverkit.CopyStdin(closeWriter{hj}, cmd.Stdin, p.finished)
	}
	go p.run(ctx)
	return p, nil
}

// copyOutput copies the exec's output to stdout and stderr, demultiplexed,
// and closes p.done at its end. A stdout that takes the output itself (a
// plugin's, drivers/plugin, which passes the connection to its host) is
// handed the connection instead, when it is a socket of this machine
// (not TLS); p.done is then closed when the taker stopped reading. The
// connection is then closed here unless the command's stdin is written
// to it: a descriptor of it left open in this process would wake this
// process's poller at each piece of output that arrives for the taker.
// (A primed exec without stdin half-closes it before.)
func (p *process) copyOutput(stdout, stderr io.Writer) {
	if t, ok := stdout.(handoff.Taker); ok {
		if done, ok := handOver(t, p.hj); ok {
			if !p.stdin {
				p.closeConn()
			}
			go func() {
				p.copyErr = <-done
				close(p.done)
			}()
			return
		}
	}
	go func() {
		_, p.copyErr = stdcopy.StdCopy(stdout, stderr, p.hj.Reader)
		close(p.done)
	}()
}

// handOver offers t the connection of hj: a duplicate of its descriptor
// and what its reader buffered. ok is false when the connection has no
// descriptor of its own (TLS) or t declines.
func handOver(t handoff.Taker, hj types.HijackedResponse) (<-chan error, bool) {
	fc, ok := hj.Conn.(interface{ File() (*os.File, error) })
	if !ok {
		return nil, false
	}
	f, err := fc.File()
	if err != nil {
		return nil, false
	}
	var buffered []byte
	if n := hj.Reader.Buffered(); n > 0 {
		b, _ := hj.Reader.Peek(n)
		buffered = bytes.Clone(b)
	}
	return t.TakeOutput(handoff.Output{File: f, Buffered: buffered, Format: handoff.DockerMultiplexed})
}

// closeWriter writes to an attached exec's stdin; Close half-closes it.
type closeWriter struct{ hj types.HijackedResponse }

func (w closeWriter) Write(b []byte) (int, error) { return w.hj.Conn.Write(b) }
func (w closeWriter) Close() error                { return w.hj.CloseWrite() }

// execEnv is the environment of one exec: the config's env (secret values,
// never part of the container's own environment), overridden by the
// command's own env.
func (s *sandbox) execEnv(cmd map[string]string) []string {
	env := maps.Clone(s.cfg.env)
	if env == nil {
		env = map[string]string{}
	}
	maps.Copy(env, cmd)
	return envList(env)
}

func envList(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for _, k := range sortedKeys(env) {
		out = append(out, k+"="+env[k])
	}
	return out
}

// process is one exec started by start. Its outcome is decided by run, the
// one goroutine that holds Start's context.
type process struct {
	s       *sandbox
	execID  string
	marker  string
	hj      types.HijackedResponse
	started time.Time
	done    chan struct{} // output copied to the end
	copyErr error
	stdin   bool // the command's stdin is attached

	finished chan struct{} // closed by run once res and err are set
	res      *drivers.Result
	err      error

	signalled atomic.Value // last signal name sent by Signal
	closeOnce sync.Once
}

// run decides the outcome: the exit status once the output ended and the
// engine reports the exec ended, or, when ctx ends first, a verified kill of
// the process tree and an error wrapping ctx.Err().
func (p *process) run(ctx context.Context) {
	defer close(p.finished)
	p.res, p.err = p.outcome(ctx)
	p.closeConn()
}

func (p *process) outcome(ctx context.Context) (*drivers.Result, error) {
	select {
	case <-p.done:
		exit, err := p.exitCode(ctx)
		if err == nil {
			return p.exited(exit)
		}
		if ctx.Err() == nil {
			return nil, err
		}
	case <-ctx.Done():
	}
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	killErr := p.killVerified(kctx)
	p.closeConn()
	<-p.done
	res := &drivers.Result{ExitCode: -1, Signal: "KILL", Duration: time.Since(p.started)}
	if killErr != nil {
		return res, fmt.Errorf("docker %s: container %s: cancelled, but ending the process tree failed: %v: %w", p.s.cfg.host, p.s.id, killErr, ctx.Err())
	}
	return res, fmt.Errorf("docker %s: container %s: exec cancelled: %w", p.s.cfg.host, p.s.id, ctx.Err())
}

// exited is the result of an exec that ended with status exit.
func (p *process) exited(exit int) (*drivers.Result, error) {
	res := &drivers.Result{ExitCode: exit, Duration: time.Since(p.started)}
	if sig, _ := p.signalled.Load().(string); sig != "" && exit == 128+signalNumbers[sig] {
		res.ExitCode, res.Signal = -1, sig
	}
	if p.copyErr != nil && !errors.Is(p.copyErr, io.EOF) {
		return res, fmt.Errorf("docker %s: container %s: reading exec output: %v: %w", p.s.cfg.host, p.s.id, p.copyErr, drivers.ErrTransient)
	}
	return res, nil
}

func (p *process) closeConn() { p.closeOnce.Do(func() { p.hj.Close() }) }

// killVerified kills every marked process until the engine reports that the
// wrapper ended and no marked process is left (a command that had not yet
// exec'd when the first kill ran is caught by a later round).
func (p *process) killVerified(ctx context.Context) error {
	delay := 10 * time.Millisecond
	for {
		n, err := p.s.signalMarked(ctx, p.marker, "KILL")
		if err != nil {
			return err
		}
		if n == 0 {
			ins, err := p.s.cli.ContainerExecInspect(ctx, p.execID)
			if err != nil {
				return engineErr(p.s.cfg.host, "inspect exec", err)
			}
			if execEnded(ins) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("docker %s: container %s: process tree still running after kill: %w", p.s.cfg.host, p.s.id, ctx.Err())
		case <-time.After(delay):
		}
		delay = min(delay*2, 250*time.Millisecond)
	}
}

// signalMarked sends sig to every process in the container carrying the
// marker and to the groups they lead; it returns how many it found.
//
// The kill execs of one container run one at a time, whoever sends them:
// under gVisor (Debian's runsc 0.0~20221219, ptrace platform) two
// processes reading /proc/<pid>/ files while processes come and go end
// the whole sandbox within seconds (the container exits with status 2,
// and every exec still attached waits forever: "urpc method
// containerManager.WaitPID failed: EOF"). Seven commands signalled at
// once, each signal resent until its command ends, did that every time;
// one scan at a time never did. A signal or a cancellation waits for the
// kill before it (one exec: about 50 ms under runc, 85 under runsc) or
// for ctx.
func (s *sandbox) signalMarked(ctx context.Context, marker, sig string) (int, error) {
	select {
	case s.kills <- struct{}{}:
		defer func() { <-s.kills }()
	case <-ctx.Done():
		return 0, fmt.Errorf("docker %s: kill in container %s: waiting for the kill before it: %w", s.cfg.host, s.id, ctx.Err())
	}
	created, err := s.cli.ContainerExecCreate(ctx, s.id, container.ExecOptions{
		AttachStdout: true, AttachStderr: true,
		Cmd: []string{"/bin/sh", "-c", killScript, "berth-kill", sig, marker},
	})
	if err != nil {
		return 0, engineErr(s.cfg.host, "exec kill in container "+s.id, err)
	}
	hj, err := s.cli.ContainerExecAttach(ctx, created.ID, container.ExecAttachOptions{})
	if err != nil {
		return 0, engineErr(s.cfg.host, "attach kill in container "+s.id, err)
	}
	defer hj.Close()
	// The output's end is the kill's: a stream that never ends (seen under
	// runsc when the container's main process exited meanwhile) must not
	// outlive ctx.
	stop := context.AfterFunc(ctx, hj.Close)
	defer stop()
	var out, errb bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, &errb, hj.Reader); err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return 0, fmt.Errorf("docker %s: kill in container %s: %w", s.cfg.host, s.id, err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(out.String()))
	if err != nil {
		return 0, fmt.Errorf("docker %s: kill in container %s: unexpected output %q (stderr %q): the image needs sh, grep and kill", s.cfg.host, s.id, out.String(), errb.String())
	}
	return n, nil
}

// Wait waits for the output to end and reads the exit status from the
// engine. After a cancellation of Start's context it returns the result
// with Signal "KILL" and an error wrapping that context's error, once the
// kill has been verified. If ctx ends first, Wait returns an error wrapping
// ctx.Err() and the command keeps running.
func (p *process) Wait(ctx context.Context) (*drivers.Result, error) {
	if err := driverkit.AwaitDone(ctx, p.finished); err != nil {
		return nil, fmt.Errorf("docker %s: container %s: wait: %w", p.s.cfg.host, p.s.id, err)
	}
	return p.res, p.err
}

// result blocks until run decided the outcome.
func (p *process) result() (*drivers.Result, error) {
	<-p.finished
	return p.res, p.err
}

// exitCode polls exec inspect until the engine reports the exec ended (it
// may lag the end of the output stream slightly, and a command that closed
// its output keeps running). It gives up when ctx ends.
func (p *process) exitCode(ctx context.Context) (int, error) {
	delay := time.Millisecond
	for {
		ins, err := p.s.cli.ContainerExecInspect(ctx, p.execID)
		if err != nil {
			return 0, engineErr(p.s.cfg.host, "inspect exec", err)
		}
		if execEnded(ins) {
			return ins.ExitCode, nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(delay):
		}
		delay = min(delay*2, 100*time.Millisecond)
	}
}

// execEnded reports whether an exec has started and ended. Right after
// the attach returns, the engine may not have started the process yet
// (not running, no pid): that is not an end.
func execEnded(ins container.ExecInspect) bool {
	return !ins.Running && (ins.Pid != 0 || ins.ExitCode != 0)
}

// Signal sends sig, one of driverkit.Signals (as driverkit.ParseSignal reads
// it; another name is an error wrapping drivers.ErrUnsupported), to the
// command's processes and their process groups.
func (p *process) Signal(ctx context.Context, sig string) error {
	sig, err := driverkit.ParseSignal(sig)
	if err != nil {
		return fmt.Errorf("docker %s: %w", p.s.id, err)
	}
	p.signalled.Store(sig)
	_, err = p.s.signalMarked(ctx, p.marker, sig)
	return err
}

// CloseStdin closes the command's standard input (a no-op when the command
// had none).
func (p *process) CloseStdin() error {
	if !p.stdin {
		return nil
	}
	return p.hj.CloseWrite()
}
