package execrelay

import (
	"context"
	"fmt"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/driverkit"
)

// IngressConfig says where a relay ingress (OpenIngress) finds and puts
// things in the sandbox. Binary, Socket and StateDir are required.
type IngressConfig struct {
	// Binary is the absolute path, in the sandbox, of the runner binary
	// the driver installed: it runs both the relay and the runner.
	Binary string
	// Socket is the absolute path, in the sandbox, of the relay's unix
	// socket; the ingress's Endpoint is "unix:" and Socket.
	Socket string
	// StateDir is the runner's state directory in the sandbox, as
	// driverkit.LaunchRunnerByExec takes it.
	StateDir string
	// Options tune the listener; nil means Listen's defaults.
	Options *Options
}

// OpenIngress opens a drivers.RunnerIngress over sb's streaming exec (sb
// must implement drivers.StreamExecer): it starts the relay of
// cfg.Binary at cfg.Socket through Listen and returns once the relay has
// bound its socket (Listener.Ready), so that a runner launched next finds
// it. Launch starts the runner through driverkit.LaunchRunnerByExec (the
// ticket in a 0600 file, nothing secret in an argv), LogTail reads its log
// through driverkit.RunnerLogTailByExec (also after Close), and Close
// closes the listener as Listener.Close does (the relay ends, removing its
// socket, once the connections it carries have ended); no runner is
// stopped.
// ctx bounds only the wait for the relay; a relay that does not come up
// within it, or within Options.GreetingTimeout (30 s), is an error wrapping
// drivers.ErrUnavailable that says what the relay said.
func OpenIngress(ctx context.Context, sb drivers.Sandbox, cfg IngressConfig) (drivers.RunnerIngress, error) {
	for _, f := range []struct{ name, v string }{{"binary", cfg.Binary}, {"socket", cfg.Socket}, {"state directory", cfg.StateDir}} {
		if !path.IsAbs(f.v) || strings.ContainsRune(f.v, 0) {
			return nil, fmt.Errorf("execrelay: open the runner ingress in %s: %s %q: want an absolute path", sb.ID(), f.name, f.v)
		}
	}
	se, err := drivers.SandboxAs[drivers.StreamExecer](sb, 0)
	if err != nil {
		return nil, fmt.Errorf("execrelay: open the runner ingress in %s: the relay needs a streaming exec: %w", sb.ID(), err)
	}
	o := Options{}
	if cfg.Options != nil {
		o = *cfg.Options
	}
	wait := o.GreetingTimeout
	if wait <= 0 {
		wait = 30 * time.Second
	}
	ln := Listen(context.WithoutCancel(ctx), StreamExec(se, drivers.Command{Argv: Command(cfg.Binary, cfg.Socket)}), &o)
	rctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if err := ln.Ready(rctx); err != nil {
		ln.Close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("execrelay: open the runner ingress in %s: %w", sb.ID(), err)
		}
		return nil, fmt.Errorf("execrelay: open the runner ingress in %s: the relay (%s relay) did not come up within %v; check that the runner binary is installed there and runs: %v: %w",
			sb.ID(), cfg.Binary, wait, err, drivers.ErrUnavailable)
	}
	return &ingress{Listener: ln, sb: sb, cfg: cfg}, nil
}

// ingress is OpenIngress's drivers.RunnerIngress.
type ingress struct {
	*Listener
	sb  drivers.Sandbox
	cfg IngressConfig

	mu       sync.Mutex
	closed   bool
	launched bool
}

var _ drivers.RunnerIngress = (*ingress)(nil)

// Endpoint returns "unix:" and the relay's socket path.
func (in *ingress) Endpoint() string { return "unix:" + in.cfg.Socket }

// Close closes the listener (Listener.Close: the relay ends and removes
// its socket once its connections have ended); it stops no runner.
func (in *ingress) Close() error {
	in.mu.Lock()
	in.closed = true
	in.mu.Unlock()
	return in.Listener.Close()
}

// Launch starts the runner in the sandbox, detached, dialing Endpoint.
func (in *ingress) Launch(ctx context.Context, req drivers.RunnerLaunch) error {
	in.mu.Lock()
	closed := in.closed
	if !closed {
		in.launched = true
	}
	in.mu.Unlock()
	if closed {
		return fmt.Errorf("execrelay: launch runner in %s: the ingress is closed; open another", in.sb.ID())
	}
	return driverkit.LaunchRunnerByExec(ctx, in.sb, in.cfg.Binary, in.Endpoint(), in.cfg.StateDir, req)
}

// LogTail returns the tail of the runner's log (nil before any Launch).
func (in *ingress) LogTail(ctx context.Context, limit int) ([]byte, error) {
	in.mu.Lock()
	launched := in.launched
	in.mu.Unlock()
	if !launched {
		return nil, nil
	}
	return driverkit.RunnerLogTailByExec(ctx, in.sb, in.cfg.StateDir, limit)
}
