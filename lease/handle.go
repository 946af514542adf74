package lease

import (
	"context"
	"fmt"
	"io"
	"maps"
	"math"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/images"
	"github.com/berthdev/berth/internal/leasehook"
)

func init() {
	leasehook.HostRunner = func(h any, ctx context.Context) (drivers.RunnerIngress, error) { return h.(*Handle).hostRunner(ctx) }
	leasehook.Capture = func(h any, ctx context.Context, req drivers.CaptureRequest) (images.Identity, error) {
		return h.(*Handle).capture(ctx, req)
	}
	leasehook.OpenTerminal = func(h any, ctx context.Context, req drivers.TerminalRequest) (drivers.TerminalSession, error) {
		return h.(*Handle).openTerminal(ctx, req)
	}
	leasehook.ImageIdentity = func(h any, ctx context.Context) (images.Identity, error) { return h.(*Handle).imageIdentity(ctx) }
	leasehook.Kind = func(h any) drivers.Kind { return h.(*Handle).kind() }
	leasehook.Isolation = func(h any) drivers.Isolation {
		hd := h.(*Handle)
		return drivers.IsolationOf(hd.driver, hd.lease.Config)
	}
	leasehook.Files = func(h any) (drivers.Files, error) {
		hd := h.(*Handle)
		f, err := capability(hd, drivers.SandboxAs[drivers.Files])
		if err != nil {
			return nil, hd.wrap(err)
		}
		return f, nil
	}
}

// Handle is an acquired lease with its live sandbox: a portable value
// whose methods run commands through the driver's sandbox (Exec) or
// berth's runner (Run), and whose Release goes through Manager.Release
// (receipts, pending cleanup, the lease record). The raw drivers.Sandbox is not handed out, except inside
// Raw, an explicit and scoped escape hatch.
//
// A Handle is the authority over its lease: Manager.Acquire authorized the
// principal who acquired it, and its methods take no principal, as the
// methods of an *os.File need no permission check once the file is open.
// Whoever the holder gives the Handle to acts with the acquirer's grant
// until the lease is released; a host that must not share that grant keeps
// the Handle to itself. Handles returned for the same lease
// (same-run or concurrent acquisitions) share the sandbox; releasing any of
// them releases the lease. After the release the methods fail with
// drivers.ErrReleased. A Handle is safe for concurrent use.
type Handle struct {
	m       *Manager
	lease   *Lease // as stored at acquisition
	shown   *Lease // as the acquiring principal may see it (nil: lease)
	driver  drivers.Driver
	sandbox drivers.Sandbox
	resumed bool
	beat    *beat // the holder's heartbeat of a host lease; nil otherwise
	// p is the principal the handle was acquired (or opened) for, whose
	// authority Run acts with; acquired says it was set (forCaller).
	p        authz.Principal
	acquired bool
}

// Lease returns a copy of the lease record as of the acquisition, as the
// acquiring principal may read it (redacted for those who may not read
// configs, see Manager.Get).
func (h *Handle) Lease() *Lease {
	if h.shown != nil {
		return h.shown.clone()
	}
	return h.lease.clone()
}

// ID returns the lease id.
func (h *Handle) ID() string { return h.lease.ID }

// SandboxID returns the provider lease id of the live sandbox.
func (h *Handle) SandboxID() string { return h.sandbox.ID() }

// kind says whether the lease is a sandbox or a host session
// (leasehook.Kind).
func (h *Handle) kind() drivers.Kind { return h.driver.Capabilities().Kind }

// Resumed reports whether the acquisition resumed a recorded sandbox rather
// than creating one.
func (h *Handle) Resumed() bool { return h.resumed }

// Release releases the lease; see Manager.Release. The principal that
// acquired the handle was authorized then; holding the handle is enough.
func (h *Handle) Release(ctx context.Context, opts ReleaseOptions) (*Lease, error) {
	l, err := h.m.release(ctx, h.lease.ID, opts)
	h.m.afterRelease(ctx, l)
	switch {
	case l == nil:
	case h.shown != nil && h.shown.Redacted:
		l = l.redact()
	default:
		l = l.own() // its maps are the store's (see Store); the struct is this call's
	}
	return l, err
}

// Exec runs a bounded command in the sandbox (drivers.Sandbox.Exec): a
// non-zero exit is not an error; on cancellation, or at cmd.Deadline, the
// process tree is ended. cmd is Run's type: Argv, Env, Dir, Stdin and
// OutputLimit (here per stream, 0: 1 MiB) are the driver's
// drivers.Command; TaskID and StopGrace mean nothing here, and Secrets is
// refused (errcode.ErrInvalid): only a task gets them.
// Exec is the driver's own process, for targets without a runner and short
// checks: its output is returned whole, nothing of it is stored, and it
// ends with ctx. An agent's tasks run with Run (through berth's runner:
// output stored and streamed, a stop with proof).
// Like every command a Handle runs, its environment carries the variable BERTH_LEASE set to
// the lease id.
func (h *Handle) Exec(ctx context.Context, cmd Command) (*drivers.Result, error) {
	if len(cmd.Secrets) > 0 {
		return nil, h.wrap(fmt.Errorf("exec %q: field Secrets is for a task (Run): Exec would run without them: %w", argv0(cmd.Argv), errcode.ErrInvalid))
	}
	if cmd.OutputLimit > math.MaxInt32 {
		cmd.OutputLimit = math.MaxInt32
	}
	if !cmd.Deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, cmd.Deadline)
		defer cancel()
	}
	dc := drivers.Command{Argv: cmd.Argv, Env: cmd.Env, Dir: cmd.Dir, Stdin: cmd.Stdin, OutputLimit: int(cmd.OutputLimit)}
	return h.sandbox.Exec(ctx, tagged(dc, h.lease.ID))
}

// start starts a streamed process (drivers.StreamExecer); an error wraps
// drivers.ErrUnsupported when the driver cannot stream.
func (h *Handle) start(ctx context.Context, cmd drivers.Command, stdout, stderr io.Writer) (drivers.Process, error) {
	se, err := capability(h, drivers.SandboxAs[drivers.StreamExecer])
	if err != nil {
		return nil, h.wrap(err)
	}
	return se.Start(ctx, tagged(cmd, h.lease.ID), stdout, stderr)
}

// imageIdentity reports the live image of the sandbox
// (drivers.ImageReporter, leasehook.ImageIdentity); an error wraps
// drivers.ErrUnsupported when the driver cannot report it.
func (h *Handle) imageIdentity(ctx context.Context) (images.Identity, error) {
	ir, err := capability(h, drivers.SandboxAs[drivers.ImageReporter])
	if err != nil {
		return images.Identity{}, h.wrap(err)
	}
	return ir.ImageIdentity(ctx)
}

// openTerminal opens an interactive terminal in the sandbox
// (drivers.Terminal, leasehook.OpenTerminal); an error wraps
// drivers.ErrUnsupported when the driver has none.
func (h *Handle) openTerminal(ctx context.Context, req drivers.TerminalRequest) (drivers.TerminalSession, error) {
	t, err := capability(h, drivers.SandboxAs[drivers.Terminal])
	if err != nil {
		return nil, h.wrap(err)
	}
	env := make(map[string]string, len(req.Env)+1)
	for k, v := range req.Env {
		env[k] = v
	}
	env[envTag] = h.lease.ID
	req.Env = env
	return t.OpenTerminal(ctx, req)
}

// capture captures the sandbox's filesystem as a provider template
// (drivers.Capturer, leasehook.Capture); an error wraps
// drivers.ErrUnsupported when the driver cannot.
func (h *Handle) capture(ctx context.Context, req drivers.CaptureRequest) (images.Identity, error) {
	c, err := capability(h, drivers.SandboxAs[drivers.Capturer])
	if err != nil {
		return images.Identity{}, h.wrap(err)
	}
	return c.Capture(ctx, req)
}

// hostRunner installs the runner the lease was acquired for (Lease.Runner:
// AcquireRequest.Runner's binary for the target's architecture) in the
// sandbox and opens the ingress through which it reaches the host
// (drivers.RunnerHost, leasehook.HostRunner); an error wraps
// drivers.ErrUnsupported when the driver cannot host a runner or the
// lease was acquired without one. The caller closes the ingress; the
// runner it launches carries the lease's process tag, so a host lease's
// cleanup finds it.
func (h *Handle) hostRunner(ctx context.Context) (drivers.RunnerIngress, error) {
	if h.lease.Runner == nil {
		return nil, fmt.Errorf("lease %s was acquired without a runner (AcquireRequest.Runner): %w", h.lease.ID, drivers.ErrUnsupported)
	}
	spec := *h.lease.Runner
	rh, err := capability(h, drivers.SandboxAs[drivers.RunnerHost])
	if err != nil {
		return nil, h.wrap(err)
	}
	in, err := rh.HostRunner(ctx, spec)
	if err != nil {
		return nil, h.wrap(err)
	}
	return taggedIngress{in, h}, nil
}

// Raw is the escape hatch to the driver's own sandbox value, scoped as
// database/sql.Conn.Raw scopes its driver connection: it calls f with the
// live drivers.Sandbox (the driver's own type: assert it to an interface
// or to that type) and returns f's error. The value is valid only inside
// f: f must not keep it, start work with it that outlives f, or hand it
// on; after f returns the lease may be released at any time. A nil f is
// an error wrapping drivers.ErrUnsupported.
//
// UNSAFE for lifecycle: the raw value bypasses the manager. Calling its
// Release (or a driver-specific stop) leaves the lease record active,
// without a receipt and unknown to sweeps. Use it for driver-specific reads
// (a host session's working directory, a container id); end the lease only
// with Handle.Release or Manager.Release. Commands run on the raw value
// carry no BERTH_LEASE tag, so a check on the host cannot find them.
func (h *Handle) Raw(f func(sandbox any) error) error {
	if f == nil {
		return fmt.Errorf("lease %s: Raw needs a function: %w", h.lease.ID, drivers.ErrUnsupported)
	}
	return f(h.sandbox)
}

// capability looks the handle's live sandbox up as a capability T with the
// drivers.SandboxAs call as, narrowed by everything the driver does not
// effectively offer (drivers.Narrowing: undeclared, unimplemented, or an
// unavailable provider). Every capability lookup of a Handle goes through
// this one function.
func capability[T any](h *Handle, as func(drivers.Sandbox, drivers.Set) (T, error)) (T, error) {
	return as(h.sandbox, drivers.Narrowing(h.driver, 0))
}

func (h *Handle) wrap(err error) error { return fmt.Errorf("lease %s: %w", h.lease.ID, err) }

// taggedIngress launches runners with the lease's process tag (envTag) in
// their environment, as every handle command carries it.
type taggedIngress struct {
	drivers.RunnerIngress
	h *Handle
}

// Launch starts the runner with the lease's tag added to req.Env.
func (t taggedIngress) Launch(ctx context.Context, req drivers.RunnerLaunch) error {
	env := make(map[string]string, len(req.Env)+1)
	maps.Copy(env, req.Env)
	env[envTag] = t.h.lease.ID
	req.Env = env
	if err := t.RunnerIngress.Launch(ctx, req); err != nil {
		return t.h.wrap(err)
	}
	return nil
}

// LogTail returns the tail of the runner's log (drivers.RunnerIngress),
// an error naming the lease.
func (t taggedIngress) LogTail(ctx context.Context, limit int) ([]byte, error) {
	b, err := t.RunnerIngress.LogTail(ctx, limit)
	if err != nil {
		return nil, t.h.wrap(err)
	}
	return b, nil
}
