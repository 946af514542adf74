package ssh

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"path"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
)

// Name is the driver name (the driver's Name and its schema's driver).
const driverName = "ssh"

// Options configure a driver. A nil *Options means defaults.
type Options struct {
	// Logger receives connection events (connect, redial, cancellation
	// kills). Nil discards them. Nothing logged ever holds key material.
	Logger *slog.Logger
}

// driver is the ssh driver: a host driver (drivers.KindHost) whose leases are
// sessions on an SSH server, reached with public-key authentication and
// strict host key checking. It is safe for concurrent use; connections are
// shared by leases of the same config through a reference-counted pool.
type driver struct {
	log    *slog.Logger
	schema *config.Schema
	pool   *pool

	uploads atomic.Int64 // runner binaries uploaded (runner.go)
}

var (
	_ drivers.Driver       = (*driver)(nil)
	_ drivers.Sandbox      = (*sandbox)(nil)
	_ drivers.StreamExecer = (*sandbox)(nil)
	_ drivers.Terminal     = (*sandbox)(nil)
	_ drivers.RunnerHost   = (*sandbox)(nil)
)

// New returns the ssh driver: a host driver (drivers.KindHost) whose leases
// are sessions on an SSH server, reached with public-key authentication and
// strict host key checking. The driver also implements drivers.ArchReporter
// and drivers.ConfigNarrower; its sandboxes implement
// drivers.StreamExecer, drivers.Terminal and drivers.RunnerHost. It is safe
// for concurrent use; connections are shared by leases of the same config
// through a reference-counted pool. opts may be nil.
func New(opts *Options) drivers.Driver { return newDriver(opts) }

func newDriver(opts *Options) *driver {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &driver{
		log:    o.Logger,
		schema: newSchema(),
		pool:   &pool{log: o.Logger, conns: map[string]*conn{}},
	}
}

// Name returns "ssh".
func (d *driver) Name() string { return driverName }

// Capabilities declares a host driver with exec, streaming exec, terminals,
// runner ingress and files. It does no I/O.
func (d *driver) Capabilities() drivers.Capabilities {
	return drivers.Capabilities{
		Kind:     drivers.KindHost,
		Declared: drivers.NewSet(drivers.CapExec, drivers.CapStreamExec, drivers.CapTerminal, drivers.CapRunnerIngress, drivers.CapFiles),
	}
}

// NarrowedBy implements drivers.ConfigNarrower: a config whose forwarding
// is "none" (a probe found that the server forwards neither a unix socket
// nor a TCP port) narrows runner_ingress away. No I/O.
func (d *driver) NarrowedBy(cfg config.Config) drivers.Set {
	if cfg.String(fieldForwarding) == forwardingNone {
		return drivers.NewSet(drivers.CapRunnerIngress)
	}
	return 0
}

// Schema returns the config schema (see the Field constants). The same
// pointer is returned on every call.
func (d *driver) Schema() *config.Schema { return d.schema }

// Acquire opens a session on the host: it connects (or shares the pooled
// connection of the same config) with strict host key checking, makes sure
// the workspace directory exists and reads back its physical path, which
// becomes the sandbox's Cwd and the path of its id
// "ssh://user@host:port/path". req.Workspace, if set, names the workspace
// instead of the config's workdir: absolute as given, relative under the
// workdir. Errors wrap drivers.ErrHostKeyUnknown, ErrHostKeyMismatch,
// ErrAuth, ErrUnreachable, ErrTimeout, config.ErrInvalid or ctx.Err(); none contains the
// private key.
func (d *driver) Acquire(ctx context.Context, cfg config.Config, req drivers.AcquireRequest) (drivers.Sandbox, error) {
	t, err := parseTarget(d.schema, cfg)
	if err != nil {
		return nil, err
	}
	c, err := d.pool.get(ctx, t)
	if err != nil {
		return nil, err
	}
	sb := &sandbox{d: d, c: c, t: t, running: map[*process]struct{}{}, nonce: newNonce(), dirKey: leaseDirKey(req.LeaseID)}
	wd := pathExpr(t.workdir, `"$HOME"`)
	if req.Workspace != "" {
		wd = pathExpr(req.Workspace, wd)
	}
	script := wrapSh(`d=` + wd + ` && mkdir -p -- "$d" && cd -- "$d" && pwd -P && printf '%s\n' "${SHELL:-}"`)
	res, err := sb.run(ctx, script, drivers.Command{OutputLimit: 64 << 10})
	if err != nil {
		d.pool.put(c)
		return nil, err
	}
	lines := strings.Split(strings.TrimSuffix(string(res.Stdout), "\n"), "\n")
	if res.ExitCode != 0 || len(lines) != 2 || !strings.HasPrefix(lines[0], "/") {
		d.pool.put(c)
		return nil, fmt.Errorf("ssh %s@%s: preparing workspace %q: exit %d: %s: %w",
			t.user, t.addr(), t.workdir, res.ExitCode, clip(res.Stderr), drivers.ErrUnavailable)
	}
	cwd := lines[0]
	if posixShells[path.Base(lines[1])] {
		c.posix.Store(true)
	}
	sb.cwd = cwd
	sb.id = (&url.URL{Scheme: "ssh", User: url.User(t.user), Host: t.addr(), Path: cwd}).String()
	if req.Allocated != nil {
		if err := req.Allocated(ctx, sb.id); err != nil {
			d.pool.put(c)
			return nil, err
		}
	}
	d.log.Debug("ssh lease acquired", "id", sb.id, "lease", req.LeaseID)
	return sb, nil
}

// clip returns at most a short line of b for error messages.
func clip(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return strconv.Quote(s)
}

// String returns the lease id; it never contains key material.
func (sb *sandbox) String() string { return sb.id }

// String describes the target without its key.
func (t *target) String() string { return "ssh://" + t.user + "@" + t.addr() }

// GoString is String, so that %#v does not print the signer.
func (t *target) GoString() string { return t.String() }

// ReopensLeaseSessions reports that an Acquire for a berth lease id
// (drivers.AcquireRequest.LeaseID) opens that lease's session again from
// any process: its workspace follows from the config and the lease's
// workspace, its lease directory (runner state, ingress socket) from the
// lease id. The lease manager's Open uses it to take over a host lease
// whose holder is gone.
func (d *driver) ReopensLeaseSessions() bool { return true }
