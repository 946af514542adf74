package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/errcode"
)

// Name is the driver name.
const driverName = "local"

// Config field names of the local driver.
const (
	fieldWorkdir = "workdir"
	fieldShell   = "shell"
)

// defaultShell is the default of the shell field.
const defaultShell = "/bin/sh"

// Options configure the local driver. nil means defaults.
type Options struct {
	// WaitDelay bounds how long Exec waits for output pipes after the
	// process ended or was killed (grandchildren may hold them); default 2s.
	WaitDelay time.Duration
	// ReleaseGrace bounds how long Release waits for killed processes to
	// disappear before it returns an unconfirmed receipt; default 5s.
	ReleaseGrace time.Duration
}

// driver is the host target: it runs commands on the machine berth runs on.
// Acquire opens a session in a working directory; Release ends it and every
// process it started. It is safe for concurrent use.
type driver struct {
	waitDelay time.Duration
	grace     time.Duration
	schema    *config.Schema
	seq       atomic.Int64
}

var _ drivers.Driver = (*driver)(nil)

// New returns the local driver, the host target: it runs commands on the
// machine berth runs on. Acquire opens a session in a working directory;
// Release ends it and every process it started. The driver also implements
// drivers.ArchReporter, and its sandboxes drivers.StreamExecer and
// drivers.RunnerHost. It is safe for concurrent use; nil opts means defaults.
func New(opts *Options) drivers.Driver {
	var o Options
	if opts != nil {
		o = *opts
	}
	d := &driver{waitDelay: o.WaitDelay, grace: o.ReleaseGrace}
	if d.waitDelay <= 0 {
		d.waitDelay = 2 * time.Second
	}
	if d.grace <= 0 {
		d.grace = 5 * time.Second
	}
	d.schema = &config.Schema{
		Driver: driverName,
		Fields: []config.Field{
			{
				Name: fieldWorkdir, Kind: config.KindIdentity, Type: config.TypeString,
				Doc:   "absolute working directory of the session; absent: the process's working directory at acquire",
				Check: checkAbs,
			},
			{
				Name: fieldShell, Advanced: true, Kind: config.KindKnob, Type: config.TypeString, Default: defaultShell,
				Doc:   "absolute path of the shell that runs commands whose argv[0] is \"sh\"",
				Check: checkAbs,
			},
		},
	}
	return d
}

func checkAbs(v any) error {
	if s, _ := v.(string); !filepath.IsAbs(s) {
		return fmt.Errorf("%q is not an absolute path", s)
	}
	return nil
}

// Name returns "local".
func (d *driver) Name() string { return driverName }

// Capabilities returns Kind host with exec, stream_exec, runner_ingress and files
// declared. No I/O.
func (d *driver) Capabilities() drivers.Capabilities {
	return drivers.Capabilities{Kind: drivers.KindHost, Declared: drivers.NewSet(drivers.CapExec, drivers.CapStreamExec, drivers.CapRunnerIngress, drivers.CapFiles)}
}

// Schema returns the config schema: workdir (identity) and shell (knob).
func (d *driver) Schema() *config.Schema { return d.schema }

// Acquire opens a session. The working directory is the config's workdir,
// else req.Workspace, else the process's working directory; it must be an
// existing directory that the process may enter and read (else an error
// wrapping errcode.ErrNotFound), and is resolved (symlinks evaluated): the
// default directory of commands. The shell must be an executable file (else an
// error wrapping config.ErrInvalid). The provider lease id is
// "local://<hostname><workdir>#<n>".
func (d *driver) Acquire(ctx context.Context, cfg config.Config, req drivers.AcquireRequest) (drivers.Sandbox, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("local: acquire: %w", err)
	}
	dir := cfg.String(fieldWorkdir)
	if dir == "" {
		dir = req.Workspace
	}
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return nil, fmt.Errorf("local: working directory: %w", err)
		}
		dir = wd
	}
	dir, err := usableDir(dir)
	if err != nil {
		return nil, err
	}
	shell := cfg.String(fieldShell)
	if shell == "" {
		shell = defaultShell
	}
	if fi, err := os.Stat(shell); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		return nil, &config.Error{Driver: driverName, Field: fieldShell, Reason: fmt.Sprintf("%q is not an executable file", shell)}
	}
	host, err := os.Hostname()
	if err != nil {
		return nil, fmt.Errorf("local: host name: %w", err)
	}
	id := fmt.Sprintf("local://%s%s#%d", host, dir, d.seq.Add(1))
	if req.Allocated != nil {
		if err := req.Allocated(ctx, id); err != nil {
			return nil, err
		}
	}
	return &sandbox{d: d, id: id, host: host, dir: dir, shell: shell, groups: map[int]bool{}}, nil
}

func usableDir(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err == nil {
		abs, err = filepath.EvalSymlinks(abs)
	}
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("local: workdir %q does not exist: %w", dir, errcode.ErrNotFound)
		}
		return "", fmt.Errorf("local: workdir %q: %w", dir, err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return "", fmt.Errorf("local: workdir %q: %w", dir, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("local: workdir %q is not a directory: %w", dir, errcode.ErrNotFound)
	}
	if err := syscall.Access(abs, 0x1|0x4); err != nil { // X_OK|R_OK
		return "", fmt.Errorf("local: workdir %q is not usable: %v: %w", dir, err, errcode.ErrNotFound)
	}
	return abs, nil
}

// sandbox is a session on the local host. Safe for concurrent use.
type sandbox struct {
	d     *driver
	id    string
	host  string
	dir   string
	shell string

	mu       sync.Mutex
	released bool
	groups   map[int]bool // process group ids started by the session

	// The runner (runner.go): the lease's runner directory, made at the
	// first HostRunner, and the open ingress.
	runnerMu  sync.Mutex
	runnerDir string
	ingress   *ingress
}

var (
	_ drivers.Sandbox      = (*sandbox)(nil)
	_ drivers.StreamExecer = (*sandbox)(nil)
	_ drivers.RunnerHost   = (*sandbox)(nil)
)

// ID returns "local://<hostname><workdir>#<n>".
func (s *sandbox) ID() string { return s.id }

// Hostname returns the host name read at Acquire (PRB-1).
func (s *sandbox) Hostname() string { return s.host }

// Dir returns the session's working directory, absolute with symlinks
// resolved, verified usable at Acquire (PRB-1).
func (s *sandbox) Dir() string { return s.dir }

// Shell returns the shell that runs "sh" commands.
func (s *sandbox) Shell() string { return s.shell }
