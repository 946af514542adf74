package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
	"k8s.io/streaming/pkg/httpstream"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/driverkit"
	"github.com/berthdev/berth/images"
)

// How commands run. The API server's exec takes an argv and nothing else:
// no environment, no working directory, no kill. Every command runs as
//
//	env BERTH_EXEC_ID=<random id> sh -c WRAPPER berth-exec DIR HASENV NONCE ARGV...
//
// env puts the marker in the wrapper's environment from its start, and
// every descendant inherits it; the wrapper reads the command's
// environment from its standard input when HASENV is 1 (one NAME=VALUE
// line each, the value escaped for printf %b, ended by an empty line:
// the values, secrets among them, never appear in an exec request's URL,
// which the API server's audit log may keep) and changes to DIR. A
// command with stdin of its own (NONCE empty) is then exec'd in the
// wrapper's place; runc starts each exec'd process as the leader of its
// own session and process group, so the command leads its group. A
// command without (NONCE set) runs as the wrapper's child, its stdin
// /dev/null, and the wrapper proves the end of its output (endmark.go):
// it writes the end mark to both streams and exits with the command's
// status only once the host, having read both marks, has closed its
// stdin. The wrapper catches the signals Process.Signal sends (they reach
// the command) and exits after it. Signals and cancellation run a second
// exec that sends the signal to every process carrying the marker and to
// the group each leads; a cancellation repeats the kill until none is
// left and the exec's stream has ended. The image needs env, sh, grep and
// kill.
const (
	markerEnv = "BERTH_EXEC_ID"

	// wrapperScript: $1 the directory, $2 "1" when the environment
	// follows on stdin, $3 the end mark's nonce ("": the command has stdin
	// of its own and is exec'd).
	wrapperScript = `d=$1; e=$2; m=$3; shift 3
if [ "$e" = 1 ]; then
while IFS= read -r l && [ -n "$l" ]; do v=$(printf '%bx' "${l#*=}"); export "${l%%=*}=${v%x}"; done
fi
if [ -z "$m" ]; then cd -- "$d" || exit 126; exec "$@"; fi
trap : HUP INT QUIT TERM USR1 USR2
if cd -- "$d"; then "$@" </dev/null; s=$?; else s=126; fi
printf '\000berth-exec-end-%s\000' "$m"; printf '\000berth-exec-end-%s\000' "$m" >&2
while read -r l; do :; done
exit $s`

	// killScript: $1 is the signal, $2 the marker id. It prints how many
	// marked processes it found.
	killScript = `sig=$1; id=$2; n=0
for d in /proc/[0-9]*; do p=${d#/proc/}
if grep -q "` + markerEnv + `=$id" "$d/environ" 2>/dev/null; then n=$((n+1)); kill -s "$sig" -- "-$p" 2>/dev/null; kill -s "$sig" "$p" 2>/dev/null; fi
done; echo $n`
)

// signalNumbers maps the signals Result.Signal reports (exit status 128+n).
var signalNumbers = map[string]int{"HUP": 1, "INT": 2, "QUIT": 3, "KILL": 9, "USR1": 10, "USR2": 12, "TERM": 15}

// sandbox is one pod. It is safe for concurrent use.
type sandbox struct {
	d        *driver
	c        *cluster
	cfg      *settings
	name     string
	uid      string
	node     string
	released atomic.Bool
	runner   runnerState
	// runnerDir: the pod has the runner's emptyDir (HostRunner works)
	runnerDir bool
}

var (
	_ drivers.Sandbox       = (*sandbox)(nil)
	_ drivers.StreamExecer  = (*sandbox)(nil)
	_ drivers.ImageReporter = (*sandbox)(nil)
	_ drivers.Terminal      = (*sandbox)(nil)
	_ drivers.Files         = (*sandbox)(nil)
)

// ID returns the pod's name.
func (s *sandbox) ID() string { return s.name }

func (s *sandbox) target() string { return s.c.target(s.cfg.namespace, s.name) }

func (s *sandbox) checkLive() error {
	if s.released.Load() {
		return fmt.Errorf("%s: %w", s.target(), drivers.ErrReleased)
	}
	return nil
}

// executor returns client-go's executor for one exec of argv in the pod's
// container: SPDY, which the API server proxies to the kubelet as it is,
// falling back to WebSocket (the v5 protocol) on an API server that does
// not upgrade SPDY. WebSocket first (kubectl's order) goes through the API
// server's translation to SPDY, whose abnormal closures (1006) client-go
// only logs.
func (s *sandbox) executor(argv []string, stdin, tty bool) (remotecommand.Executor, error) {
	u := s.c.cs.CoreV1().RESTClient().Post().Namespace(s.cfg.namespace).Resource("pods").Name(s.name).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: containerName, Command: argv, Stdin: stdin, Stdout: true, Stderr: !tty, TTY: tty},
			scheme.ParameterCodec).URL()
	return newExecutor(s.c, u)
}

func newExecutor(c *cluster, u *url.URL) (remotecommand.Executor, error) {
	ws, err := remotecommand.NewWebSocketExecutor(c.rest, "GET", u.String())
	if err != nil {
		return nil, err
	}
	spdy, err := remotecommand.NewSPDYExecutor(c.rest, "POST", u)
	if err != nil {
		return nil, err
	}
	return remotecommand.NewFallbackExecutor(spdy, ws, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
}

// execEnv is the environment of one exec: the config's env (secret
// values, never in the pod spec), overridden by the command's own.
func (s *sandbox) execEnv(cmd map[string]string) map[string]string {
	env := maps.Clone(s.cfg.env)
	if env == nil {
		env = map[string]string{}
	}
	maps.Copy(env, cmd)
	return env
}

// envPreamble renders env for the wrapper: NAME=VALUE lines, each value
// escaped for printf %b, then an empty line. A name a shell cannot export
// is an error naming it.
func envPreamble(env map[string]string) ([]byte, error) {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(env)) {
		if !validEnvName(k) {
			return nil, fmt.Errorf("kubernetes: exec: environment variable name %q: want letters, digits and _", k)
		}
		b.WriteString(k)
		b.WriteByte('=')
		for _, c := range []byte(env[k]) {
			switch {
			case c == '\\':
				b.WriteString(`\\`)
			case c < 0x20 || c == 0x7f:
				b.WriteString(`\0` + strconv.FormatUint(uint64(c), 8))
			default:
				b.WriteByte(c)
			}
		}
		b.WriteByte('\n')
	}
	b.WriteByte('\n')
	return []byte(b.String()), nil
}

// Exec runs cmd in the pod and returns its output and exit status. On
// cancellation the command's processes are killed, the kill is verified,
// and the error wraps ctx.Err().
func (s *sandbox) Exec(ctx context.Context, cmd drivers.Command) (*drivers.Result, error) {
	out := driverkit.NewOutputBuffer(cmd.Limit())
	errb := driverkit.NewOutputBuffer(cmd.Limit())
	p, err := s.start(ctx, cmd, out, errb)
	if err != nil {
		return nil, err
	}
	<-p.finished
	res, err := p.res, p.err
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
		return nil, errors.New("kubernetes: exec: empty argv")
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s: exec: %w", s.target(), err)
	}
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	env := s.execEnv(cmd.Env)
	var preamble []byte
	if len(env) > 0 {
		var err error
		if preamble, err = envPreamble(env); err != nil {
			return nil, err
		}
	}
	dir := cmd.Dir
	if dir == "" {
		dir = s.cfg.workdir
	}
	marker := randomHex(8)
	hasEnv := "0"
	if preamble != nil {
		hasEnv = "1"
	}
	// A command without stdin of its own proves the end of its output
	// (endmark.go); the exec's stdin then carries the host's answer.
	var nonce string
	if cmd.Stdin == nil {
		nonce = randomHex(8)
	}
	argv := append([]string{"env", markerEnv + "=" + marker, "sh", "-c", wrapperScript, "berth-exec", dir, hasEnv, nonce}, cmd.Argv...)
	withStdin := preamble != nil || cmd.Stdin != nil || nonce != ""
	ex, err := s.executor(argv, withStdin, false)
	if err != nil {
		return nil, fmt.Errorf("%s: exec: %w", s.target(), err)
	}
	p := &process{s: s, marker: marker, started: time.Now(), done: make(chan struct{}), finished: make(chan struct{})}
	if nonce != "" {
		p.marks = make(chan struct{})
		mark := endMark(nonce)
		p.stdout = newEndWriter(stdout, mark, p.markArrived)
		p.stderr = newEndWriter(stderr, mark, p.markArrived)
		stdout, stderr = p.stdout, p.stderr
	}
	opts := remotecommand.StreamOptions{Stdout: stdout, Stderr: stderr}
	if withStdin {
		pr, pw := io.Pipe()
		p.stdin = pw
		opts.Stdin = pr
		go feedStdin(pw, preamble, cmd.Stdin, p.marks, p.finished)
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p.cancelStream = cancel
	go func() {
		p.streamErr = ex.StreamWithContext(sctx, opts)
		close(p.done)
	}()
	go p.run(ctx)
	return p, nil
}

// feedStdin writes the preamble, then copies src (if any) to pw until it
// ends or the process does (driverkit.CopyStdin), then closes pw. With no
// src, it closes pw after the preamble, or, when marks is not nil, once
// both end marks have arrived or the process has ended.
func feedStdin(pw *io.PipeWriter, preamble []byte, src io.Reader, marks, ended <-chan struct{}) {
	if len(preamble) > 0 {
		_, _ = pw.Write(preamble)
	}
	if src != nil {
		driverkit.CopyStdin(pw, src, ended)
		return
	}
	if marks != nil {
		select {
		case <-marks:
		case <-ended:
		}
	}
	_ = pw.Close()
}

// process is one exec started by start. Its outcome is decided by run, the
// one goroutine that holds Start's context.
type process struct {
	s            *sandbox
	marker       string
	started      time.Time
	stdin        *io.PipeWriter // the exec's stdin, written by feedStdin; nil: none attached
	cancelStream context.CancelFunc
	done         chan struct{} // the exec's stream ended
	streamErr    error

	finished chan struct{} // closed by run once res and err are set
	res      *drivers.Result
	err      error

	signalled atomic.Value // last signal name sent by Signal

	// The end marks (endmark.go), for a command without stdin of its
	// own: stdout and stderr swallow them, and marks is closed once both
	// have arrived. All nil otherwise.
	stdout, stderr *endWriter
	marks          chan struct{}
	markCount      atomic.Int32
}

// markArrived counts an end mark; the second closes marks.
func (p *process) markArrived() {
	if p.markCount.Add(1) == 2 {
		close(p.marks)
	}
}

// run decides the outcome: the exit status once the stream ended, or,
// when ctx ends first, a verified kill of the process tree and an error
// wrapping ctx.Err().
func (p *process) run(ctx context.Context) {
	defer close(p.finished)
	defer p.cancelStream()
	p.res, p.err = p.outcome(ctx)
	if p.stdin != nil {
		// Ends client-go's copy of stdin, which would wait on for input:
		// it reads an end, not an error (which it would log).
		p.stdin.Close()
	}
}

func (p *process) outcome(ctx context.Context) (*drivers.Result, error) {
	select {
	case <-p.done:
		if p.marks != nil {
			p.stdout.flush()
			p.stderr.flush()
		}
		return p.exited()
	case <-ctx.Done():
	}
	if p.stdin != nil {
		// A command that reads its stdin to the end (a relay) ends on
		// its own; one the kill cannot see (a non-dumpable process, whose
		// environ a capability-less root cannot read) ends so.
		p.stdin.Close()
	}
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	killErr := p.killVerified(kctx)
	p.cancelStream()
	<-p.done
	res := &drivers.Result{ExitCode: -1, Signal: "KILL", Duration: time.Since(p.started)}
	if killErr != nil {
		return res, fmt.Errorf("%s: cancelled, but ending the process tree failed: %v: %w", p.s.target(), killErr, ctx.Err())
	}
	return res, fmt.Errorf("%s: exec cancelled: %w", p.s.target(), ctx.Err())
}

// exited is the result of an exec whose stream ended: its exit status
// (client-go's CodeExitError for a non-zero one).
func (p *process) exited() (*drivers.Result, error) {
	res := &drivers.Result{Duration: time.Since(p.started)}
	if p.streamErr != nil {
		var ce utilexec.CodeExitError
		if !errors.As(p.streamErr, &ce) {
			return nil, p.s.c.apiErr(p.s.target(), "exec", p.streamErr)
		}
		res.ExitCode = ce.Code
	}
	sig, _ := p.signalled.Load().(string)
	if sig != "" && res.ExitCode == 128+signalNumbers[sig] {
		res.ExitCode, res.Signal = -1, sig
	}
	if p.marks != nil && sig != "KILL" && !(p.stdout.marked() && p.stderr.marked()) {
		// The wrapper exits only after the host's answer to both marks:
		// without them, the stream was cut (or the task killed its
		// wrapper), and what arrived may lack its end.
		return res, fmt.Errorf("%s: exec: the command ended (exit status %d), but the end of its output did not arrive, so the output may be incomplete: %w",
			p.s.target(), res.ExitCode, drivers.ErrTransient)
	}
	return res, nil
}

// killVerified kills every marked process until none is left and the
// exec's stream has ended (a command that had not yet started when the
// first kill ran is caught by a later round).
func (p *process) killVerified(ctx context.Context) error {
	delay := 10 * time.Millisecond
	for {
		n, err := p.s.signalMarked(ctx, p.marker, "KILL")
		if err != nil {
			return err
		}
		if n == 0 {
			select {
			case <-p.done:
				return nil
			default:
			}
		}
		if err := sleepCtx(ctx, delay); err != nil {
			return fmt.Errorf("%s: process tree still running after kill: %w", p.s.target(), err)
		}
		delay = min(delay*2, 250*time.Millisecond)
	}
}

// signalMarked sends sig to every process in the pod carrying the marker
// and to the groups they lead, through one exec; it returns how many it
// found.
func (s *sandbox) signalMarked(ctx context.Context, marker, sig string) (int, error) {
	ex, err := s.executor([]string{"sh", "-c", killScript, "berth-kill", sig, marker}, false, false)
	if err != nil {
		return 0, fmt.Errorf("%s: kill: %w", s.target(), err)
	}
	var out, errb strings.Builder
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &limited{w: &out, n: 64}, Stderr: &limited{w: &errb, n: 512}})
	if err != nil {
		return 0, s.c.apiErr(s.target(), "exec kill", err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(out.String()))
	if err != nil {
		return 0, fmt.Errorf("%s: kill: unexpected output %q (stderr %q): the image needs sh, grep and kill", s.target(), out.String(), errb.String())
	}
	return n, nil
}

// limited keeps the first n bytes written to it; writes never fail.
type limited struct {
	w io.Writer
	n int
}

func (l *limited) Write(b []byte) (int, error) {
	if l.n > 0 {
		k := min(len(b), l.n)
		l.n -= k
		_, _ = l.w.Write(b[:k])
	}
	return len(b), nil
}

// Wait waits for the exec to end. After a cancellation of Start's context
// it returns the result with Signal "KILL" and an error wrapping that
// context's error, once the kill has been verified. If ctx ends first,
// Wait returns an error wrapping ctx.Err() and the command keeps running.
func (p *process) Wait(ctx context.Context) (*drivers.Result, error) {
	if err := driverkit.AwaitDone(ctx, p.finished); err != nil {
		return nil, fmt.Errorf("%s: wait: %w", p.s.target(), err)
	}
	return p.res, p.err
}

// Signal sends sig, one of driverkit.Signals (another name is an error
// wrapping drivers.ErrUnsupported), to the command's processes and their
// process groups, through a kill exec.
func (p *process) Signal(ctx context.Context, sig string) error {
	sig, err := driverkit.ParseSignal(sig)
	if err != nil {
		return fmt.Errorf("%s: %w", p.s.target(), err)
	}
	p.signalled.Store(sig)
	_, err = p.s.signalMarked(ctx, p.marker, sig)
	return err
}

// CloseStdin closes the command's standard input (a no-op when it had
// none: its stdin is /dev/null, and the exec's carries the answer to the
// end marks).
func (p *process) CloseStdin() error {
	if p.stdin != nil && p.marks == nil {
		p.stdin.Close()
	}
	return nil
}

// ImageIdentity reads the image the pod's container runs from its status
// (the kubelet's imageID, a repository and digest) and never echoes the
// configured reference.
func (s *sandbox) ImageIdentity(ctx context.Context) (images.Identity, error) {
	if err := s.checkLive(); err != nil {
		return images.Identity{}, err
	}
	pod, err := s.get(ctx)
	if err != nil {
		return images.Identity{}, err
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != containerName {
			continue
		}
		return identityOf(cs.ImageID)
	}
	return images.Identity{}, fmt.Errorf("%s: the pod's status has no container %s yet", s.target(), containerName)
}

// identityOf reads a container status's imageID: "REPO@sha256:..." (the
// kubelet's form for an image that came from a registry; a
// "docker-pullable://" prefix is dropped). A bare "sha256:..." (an image
// imported without a repository digest) is the image's config digest,
// which names no manifest: an error.
func identityOf(imageID string) (images.Identity, error) {
	id := strings.TrimPrefix(imageID, "docker-pullable://")
	if repo, dig, ok := strings.Cut(id, "@"); ok {
		return images.DigestIdentity(repo, dig)
	}
	return images.Identity{}, fmt.Errorf("kubernetes: container image id %q names no repository digest (an image imported into the node, not pulled): its identity is unknown", imageID)
}

// closeOnce is a sync.Once that returns the first call's error.
type closeOnce struct {
	once sync.Once
	err  error
}

func (c *closeOnce) do(f func() error) error {
	c.once.Do(func() { c.err = f() })
	return c.err
}
