package runner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/prpwire"
	"github.com/berthdev/berth/internal/qualify"
	"github.com/berthdev/berth/qualification"
)

// TicketEnv is the environment variable that may carry the bootstrap
// ticket; the runner unsets it before any child starts, and no task sees it.
const TicketEnv = "BERTH_PRP_TICKET"

// TagEnv is the environment variable that tags every process of a task
// with "<runner id>:<task id>"; the stop proof scans /proc for it (PRP-6).
const TagEnv = "BERTH_TASK_TAG"

// Version is the runner version reported in the hello unless
// Options.Version says otherwise.
const Version = "berth-runner/0.1"

// Options configure a Runner. The zero value (or nil) means every default.
type Options struct {
	// Lease is the lease the ticket was minted for; required with Ticket.
	Lease string
	// Ticket is the bootstrap ticket's text: a fresh ticket, or for a
	// runner restarted on its state directory a resume ticket of its
	// session (controller.Controller.MintResumeTicket; Attach mints one
	// when it relaunches the runner). Required: the runner keeps its
	// token in memory only.
	Ticket string
	// Platform returns the platform the hello reports. Default:
	// DefaultPlatform (the probe's detection script and parser).
	Platform func(ctx context.Context) (qualification.Platform, error)
	// Version is the runner version in the hello. Default: Version.
	Version string
	// BinarySHA256 is the hex SHA-256 of the runner's binary. Default: the
	// digest of os.Executable().
	BinarySHA256 string
	// HTTPClient does the ticket exchange and the upgrade. Default: a
	// client with a 30 s timeout for the exchange.
	HTTPClient *http.Client
	// Backoff returns the pause before reconnect attempt n (0, 1, ...).
	// Default: jittered exponential from 100 ms up to 10 s.
	Backoff func(attempt int) time.Duration
	// MaxUnackedBytes bounds the outbox before the first welcome and caps
	// the welcome's bound. Default: prpwire.DefaultMaxUnackedBytes.
	MaxUnackedBytes int64
	// StopGrace is the grace between SIGTERM and SIGKILL when the runner
	// stops tasks itself (deadline, orphan grace, shutdown). Default: 5 s.
	StopGrace time.Duration
	// BaseEnv is the environment tasks start from (their own env is added
	// on top). Default: os.Environ() without TicketEnv and TagEnv.
	BaseEnv []string
	// Subreaper makes the runner's process a child subreaper (Linux), so
	// that processes orphaned by a task become its children and are reaped
	// by it. Set it only when the runner owns its process, as the binary
	// does: it reaps every zombie child it did not start itself. Default:
	// false (orphans go to init; the stop proof counts zombies as gone).
	Subreaper bool
	// Logger receives the runner's diagnostics; never secrets. Default:
	// discard.
	Logger *slog.Logger
	// TaskDir, if set, gives the directory a task runs in for the working
	// directory its command named (prp.TaskStart.Cwd, "" for none) and a
	// function the runner calls once the task's leader was reaped, before
	// its exit is reported. An error fails the start (start_failed). The
	// fake driver sets it: its sandboxes keep their files in memory while
	// its runner's tasks are processes of this host. Default nil: the
	// named directory itself ("" is the runner's own).
	TaskDir func(cwd string) (dir string, done func(), err error)
	// SimulateTask, if not nil, runs every task in this process instead
	// of starting its argv: it writes the task's stdout to stdout until
	// it returns the exit code; a task.stop (or the runner's shutdown)
	// ends its ctx, and the task then ends with -1 and SIGKILL. For the
	// simulated runners of internal/runnerload only (issue 55: many
	// runners in one process, each with the real connection, journal and
	// outbox): no process is started, secrets are not placed, and the
	// stop proof scans /proc for the task's tag, which nothing carries.
	// Default: nil (tasks are processes).
	SimulateTask func(ctx context.Context, ts prp.TaskStart, stdout io.Writer) int
}

func (o *Options) withDefaults() (Options, error) {
	var out Options
	if o != nil {
		out = *o
	}
	if out.Platform == nil {
		out.Platform = DefaultPlatform
	}
	if out.Version == "" {
		out.Version = Version
	}
	if out.BinarySHA256 == "" {
		sum, err := executableDigest()
		if err != nil {
			return Options{}, err
		}
		out.BinarySHA256 = sum
	}
	if out.HTTPClient == nil {
		out.HTTPClient = &http.Client{Timeout: 30 * time.Second}
	}
	if out.Backoff == nil {
		out.Backoff = DefaultBackoff
	}
	if out.MaxUnackedBytes <= 0 {
		out.MaxUnackedBytes = prpwire.DefaultMaxUnackedBytes
	}
	if out.StopGrace <= 0 {
		out.StopGrace = 5 * time.Second
	}
	if out.BaseEnv == nil {
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, TicketEnv+"=") && !strings.HasPrefix(kv, TagEnv+"=") {
				out.BaseEnv = append(out.BaseEnv, kv)
			}
		}
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	return out, nil
}

// DefaultBackoff is the default reconnect pause: 100 ms doubled per attempt
// up to 10 s, with +-50 % jitter.
func DefaultBackoff(attempt int) time.Duration {
	d := 100 * time.Millisecond << min(attempt, 7)
	d = min(d, 10*time.Second)
	return d/2 + rand.N(d)
}

// DefaultPlatform measures the platform as the probe does: it runs
// qualify.DetectScript with sh and parses the output with
// qualify.ParseDetection (OS, architecture, libc family and version,
// kernel, release). Without a POSIX sh, or on output the parser refuses, it
// reports runtime.GOOS and GOARCH and, where uname works, the kernel
// release. It honours ctx.
func DefaultPlatform(ctx context.Context) (qualification.Platform, error) {
	// The same one-command detection and pure parser the probe uses, so that
	// a hello and a probe of one target report the same platform.
	out, err := exec.CommandContext(ctx, "sh", "-c", qualify.DetectScript).Output()
	if err == nil {
		if det, perr := qualify.ParseDetection(string(out)); perr == nil {
			return det.Platform, nil
		}
	}
	if err := ctx.Err(); err != nil {
		return qualification.Platform{}, err
	}
	// Without a POSIX sh (or with output the parser refuses): what the
	// process itself knows.
	p := qualification.Platform{OS: runtime.GOOS, Arch: runtime.GOARCH}
	var u unix.Utsname
	if err := unix.Uname(&u); err == nil {
		p.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	p = p.Normalize()
	if err := p.Validate(); err != nil {
		// A kernel release the platform grammar refuses is left out rather
		// than failing the hello.
		p.Kernel = ""
		p = p.Normalize()
	}
	return p, nil
}

// exeDigest is the running binary's digest, computed once per process:
// the binary a process runs does not change under it, and a process that
// starts many runners (the fake driver's, in the host's process) would
// otherwise hash its whole executable for each one.
var exeDigest struct {
	mu  sync.Mutex
	sum string
}

func executableDigest() (string, error) {
	exeDigest.mu.Lock()
	defer exeDigest.mu.Unlock()
	if exeDigest.sum != "" {
		return exeDigest.sum, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("runner: binary digest: %w", err)
	}
	f, err := os.Open(exe)
	if err != nil {
		return "", fmt.Errorf("runner: binary digest: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("runner: binary digest of %s: %w", exe, err)
	}
	exeDigest.sum = hex.EncodeToString(h.Sum(nil))
	return exeDigest.sum, nil
}
