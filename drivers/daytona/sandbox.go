package daytona

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/url"
	"sync"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/images"
)

// sandbox is one Daytona sandbox acquired or resumed by the driver. It is
// safe for concurrent use.
type sandbox struct {
	d     *driver
	s     *settings
	id    string
	proxy string // toolboxProxyUrl as the API reported it
	shape execShape

	mu       sync.Mutex
	toolbox  *url.URL
	released bool
	workdir  string // the default cwd of commands (pwd -P), read at the first Files call
}

var (
	_ drivers.Sandbox       = (*sandbox)(nil)
	_ drivers.ImageReporter = (*sandbox)(nil)
	_ drivers.Capturer      = (*sandbox)(nil)
	_ drivers.Terminal      = (*sandbox)(nil)
)

func (d *driver) newSandbox(s *settings, sb *apiSandbox) *sandbox {
	return &sandbox{d: d, s: s, id: sb.ID, proxy: sb.ToolboxProxyURL, shape: shapeFor(sb.DaemonVersion)}
}

// ID returns the Daytona sandbox id.
func (sb *sandbox) ID() string { return sb.id }

// configEnvAllowed refuses a non-empty config env on a sandbox whose
// daemon ignores a request's envs (before v0.167.0, or no version
// reported): those values are secrets and must not travel in the command
// string, and dropping them would run the command without them.
func (sb *sandbox) configEnvAllowed() error {
	if len(sb.s.env) == 0 || sb.shape.envsField {
		return nil
	}
	version := "reports no version"
	if sb.shape.version != "" {
		version = fmt.Sprintf("is version %s", sb.shape.version)
	}
	return fmt.Errorf("the config's env (field %q) is sent only in a request's envs, which the sandbox's daemon ignores before %s and this daemon %s; "+
		"refused rather than inlined into the command or dropped: %w", fieldEnv, daemonEnvs, version, drivers.ErrUnsupported)
}

// commandEnvs returns the envs of one request: the config's env overridden
// by the command's own (nil when both are empty).
func commandEnvs(config, command map[string]string) map[string]string {
	if len(config) == 0 {
		return command
	}
	out := maps.Clone(config)
	maps.Copy(out, command)
	return out
}

func (sb *sandbox) live() error {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.released {
		return fmt.Errorf("daytona: sandbox %s: %w", sb.id, drivers.ErrReleased)
	}
	return nil
}

func (sb *sandbox) toolboxURL(ctx context.Context) (*url.URL, error) {
	sb.mu.Lock()
	u := sb.toolbox
	sb.mu.Unlock()
	if u != nil {
		return u, nil
	}
	u, err := sb.s.c.toolboxBase(ctx, &apiSandbox{ID: sb.id, ToolboxProxyURL: sb.proxy})
	if err != nil {
		return nil, err
	}
	sb.mu.Lock()
	sb.toolbox = u
	sb.mu.Unlock()
	return u, nil
}

// Exec runs cmd through the toolbox's process/execute. The command runs in
// a POSIX sh wrapper (see exec.go) so that stdout and stderr come back
// separately, each capped at cmd.Limit() inside the sandbox, with stdin
// passed through. cmd.Dir is the request's cwd; the request's envs are the
// config's env (secret values) overridden by cmd.Env.
//
// The request is shaped for the sandbox's daemonVersion (see shapeFor):
// from v0.167.0 as above; below it, or when the API reports no version,
// a non-empty config env is refused with drivers.ErrUnsupported naming the
// version (its secrets are never put in the command string), and cmd.Env
// is exported inline in the script (a name that is not a shell identifier
// is refused), never dropped; below v0.156.0 (no shell) the
// script travels base64-encoded through sh -c, and a script too long for
// one argument is refused with drivers.ErrUnsupported naming the version;
// below v0.155.0 a missing time limit is sent as the largest one, since an
// omitted timeout would mean 360 s. Daemons below v0.156.0 start commands
// in no process group of their own, so there the kill of a cancelled
// command may fail (it is logged; the toolbox's timeout still applies).
//
// At-least-once: Daytona's proxy replays a POST once after a stale
// connection error, so a command may run twice. Every command the driver
// itself issues (the kill of a cancelled command, the probe's detection)
// is idempotent; callers whose commands are not should make them so.
//
// The toolbox's timeout is the earlier of the config's exec_timeout and the
// context's deadline (rounded up to whole seconds); when the toolbox gives
// up, Exec returns an error wrapping drivers.ErrTimeout. The toolbox does
// not end a command when its request is cancelled, so on cancellation Exec
// kills the command's process group with a second request (best effort,
// bounded by Options.CleanupTimeout) and returns an error wrapping
// ctx.Err(). Killed by a signal, a command reports the shell's status
// 128+n as its exit code; Result.Signal stays empty because the toolbox
// reports only the status.
func (sb *sandbox) Exec(ctx context.Context, cmd drivers.Command) (*drivers.Result, error) {
	if err := sb.live(); err != nil {
		return nil, err
	}
	if len(cmd.Argv) == 0 {
		return nil, fmt.Errorf("daytona: exec in sandbox %s: empty argv", sb.id)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("daytona: exec in sandbox %s: %w", sb.id, err)
	}
	var stdin []byte
	if cmd.Stdin != nil {
		var err error
		if stdin, err = readStdin(cmd.Stdin); err != nil {
			return nil, fmt.Errorf("daytona: exec in sandbox %s: reading stdin: %w", sb.id, err)
		}
		if stdin == nil {
			stdin = []byte{}
		}
	}
	toolbox, err := sb.toolboxURL(ctx)
	if err != nil {
		return nil, fmt.Errorf("daytona: exec in sandbox %s: %w", sb.id, err)
	}
	if err := sb.configEnvAllowed(); err != nil {
		return nil, fmt.Errorf("daytona: exec in sandbox %s: %w", sb.id, err)
	}
	envs, inline := commandEnvs(sb.s.env, cmd.Env), map[string]string(nil)
	if !sb.shape.envsField && len(cmd.Env) > 0 {
		// The daemon would ignore envs: the variables travel in the script.
		if err := checkEnvNames(cmd.Env); err != nil {
			return nil, fmt.Errorf("daytona: exec in sandbox %s (daemon %q): %w", sb.id, sb.shape.version, err)
		}
		envs, inline = nil, cmd.Env
	}
	ws := buildExec(cmd.Argv, stdin, cmd.Limit(), newToken(), inline)
	command, err := forShape(ws.script, sb.shape)
	if err != nil {
		return nil, fmt.Errorf("daytona: exec in sandbox %s: %w", sb.id, err)
	}
	req := apiExecuteRequest{Command: command, Cwd: cmd.Dir, Envs: envs, Timeout: sb.timeout(ctx)}
	start := time.Now()
	resp, err := sb.s.c.execute(ctx, toolbox, req, execAnswerLimit(cmd.Limit()))
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			sb.kill(toolbox, ws.base)
			return nil, fmt.Errorf("daytona: exec in sandbox %s: %w", sb.id, cerr)
		}
		if errors.Is(err, drivers.ErrTimeout) {
			return nil, fmt.Errorf("daytona: exec in sandbox %s: the toolbox's time limit of %ds passed: %w", sb.id, req.Timeout, err)
		}
		return nil, fmt.Errorf("daytona: exec in sandbox %s: %w", sb.id, err)
	}
	f, perr := parseFrame(resp.Result)
	if perr != nil {
		return nil, fmt.Errorf("daytona: exec in sandbox %s: the command did not run (exit code %d): %s",
			sb.id, resp.ExitCode, shorten(sb.s.c.scrub(resp.Result)))
	}
	limit := cmd.Limit()
	res := &drivers.Result{
		Stdout:   f.stdout,
		Stderr:   append([]byte(f.noise), f.stderr...),
		ExitCode: f.exit,
		Duration: time.Since(start),
	}
	if len(res.Stdout) > limit {
		res.Stdout, res.Truncated = res.Stdout[:limit], true
	}
	if len(res.Stderr) > limit {
		res.Stderr, res.Truncated = res.Stderr[:limit], true
	}
	return res, nil
}

// execAnswerLimit bounds the toolbox's answer to a wrapped command whose
// streams are each cut at limit bytes inside the sandbox: two base64 frames
// of limit+1 bytes (4/3, plus line breaks, plus JSON escapes of them) fit in
// 3*(limit+1), and 64 KiB of slack covers the header and the wrapper's own
// messages. Anything longer (a command writing to the wrapper's own stdout)
// fails the Exec instead of growing without bound on the host.
func execAnswerLimit(limit int) int64 {
	return 3*(int64(limit)+1) + 64<<10
}

// timeout is the toolbox timeout of a request: whole seconds, 0 for none.
func (sb *sandbox) timeout(ctx context.Context) uint32 {
	limit := sb.s.execLimit
	if dl, ok := ctx.Deadline(); ok {
		if rem := time.Until(dl); limit == 0 || rem < limit {
			limit = rem
		}
	}
	if limit <= 0 {
		if sb.shape.needTimeout {
			// An omitted timeout would mean 360 s to this daemon.
			return math.MaxUint32
		}
		return 0
	}
	secs := math.Ceil(limit.Seconds())
	return uint32(min(max(secs, 1), math.MaxUint32))
}

// kill ends a cancelled command's process group through a second request.
func (sb *sandbox) kill(toolbox *url.URL, base string) {
	ctx, cancel := context.WithTimeout(context.Background(), sb.d.opts.CleanupTimeout)
	defer cancel()
	command, err := forShape(killScript(base), sb.shape)
	if err != nil {
		return
	}
	req := apiExecuteRequest{Command: command, Timeout: 10}
	if _, err := sb.s.c.execute(ctx, toolbox, req, execAnswerLimit(0)); err != nil {
		sb.d.opts.Logger.Warn("daytona: killing a cancelled command failed", "sandbox", sb.id, "err", err)
	}
}

// Release ends the lease. Keep leaves the sandbox as it is and returns an
// unconfirmed running receipt (Keep needs no proof). Stop stops it and
// reads it back until it is stopped (or gone, for a sandbox the API deletes
// on stop). Destroy deletes it and reads it back until the API answers 404.
// After a Release that returned no error, Exec returns drivers.ErrReleased
// and a second Release returns drivers.ErrReleased.
func (sb *sandbox) Release(ctx context.Context, disp drivers.Disposition) (drivers.Receipt, error) {
	if err := sb.live(); err != nil {
		return drivers.Receipt{}, err
	}
	var rc drivers.Receipt
	var err error
	switch disp {
	case drivers.Keep:
		rc = drivers.Receipt{ProviderLeaseID: sb.id, State: drivers.StateRunning}
	case drivers.Stop:
		rc, err = sb.d.stop(ctx, sb.s, sb.id)
	case drivers.Destroy:
		rc, err = sb.d.destroy(ctx, sb.s, sb.id)
	default:
		return drivers.Receipt{}, fmt.Errorf("daytona: release of sandbox %s: unknown disposition %s", sb.id, disp)
	}
	if err != nil {
		return drivers.Receipt{}, err
	}
	sb.mu.Lock()
	sb.released = true
	sb.mu.Unlock()
	return rc, nil
}

// ImageIdentity reads the live sandbox and the configured snapshot from the
// API and returns images.SnapshotIdentity("daytona", id) when the sandbox
// runs that snapshot: the snapshot read by its id (which must answer with
// that id) carries the name the sandbox reports. The API reports a
// sandbox's snapshot by name; names are unique in an organization, so the
// pair of reads binds the sandbox to the id (QUAL-6). A deleted snapshot is
// drivers.ErrImageNotFound.
func (sb *sandbox) ImageIdentity(ctx context.Context) (images.Identity, error) {
	if err := sb.live(); err != nil {
		return images.Identity{}, err
	}
	live, err := sb.s.c.getSandbox(ctx, sb.id)
	if err != nil {
		return images.Identity{}, fmt.Errorf("daytona: image identity of sandbox %s: %w", sb.id, err)
	}
	snap, err := sb.s.c.getSnapshot(ctx, sb.s.snapshotID)
	switch {
	case errors.Is(err, errcode.ErrNotFound):
		return images.Identity{}, fmt.Errorf("daytona: image identity of sandbox %s: snapshot id %s: %w: %w",
			sb.id, sb.s.snapshotID, drivers.ErrImageNotFound, err)
	case err != nil:
		return images.Identity{}, fmt.Errorf("daytona: image identity of sandbox %s: %w", sb.id, err)
	case snap.ID != sb.s.snapshotID:
		return images.Identity{}, fmt.Errorf("daytona: image identity of sandbox %s: snapshot id %s answered as %s: %w",
			sb.id, sb.s.snapshotID, snap.ID, drivers.ErrImageNotFound)
	case live.Snapshot != snap.Name:
		return images.Identity{}, fmt.Errorf("daytona: sandbox %s at %s runs snapshot %q, not %q (id %s): %w",
			sb.id, sb.s.c.api.Host, live.Snapshot, snap.Name, snap.ID, drivers.ErrImageNotFound)
	case createdBefore(live.CreatedAt, snap.CreatedAt):
		// Same name, but the sandbox is older than the snapshot: it was
		// made from an earlier snapshot of that name.
		return images.Identity{}, fmt.Errorf("daytona: sandbox %s at %s was created before snapshot %s (%q) existed: %w",
			sb.id, sb.s.c.api.Host, snap.ID, snap.Name, drivers.ErrImageNotFound)
	}
	return images.SnapshotIdentity(driverName, snap.ID)
}

// createdBefore reports whether timestamp a is before b; false when either
// does not parse.
func createdBefore(a, b string) bool {
	ta, err1 := time.Parse(time.RFC3339Nano, a)
	tb, err2 := time.Parse(time.RFC3339Nano, b)
	return err1 == nil && err2 == nil && ta.Before(tb)
}
