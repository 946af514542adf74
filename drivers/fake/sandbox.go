package fake

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/driverkit"
	"github.com/berthdev/berth/images"
)

// sandbox is a handle to one fake sandbox. Several handles may point at the
// same provider sandbox (Acquire, then Resume); releasing one ends only that
// handle, and the provider state is shared. Safe for concurrent use.
type sandbox struct {
	d        *Driver
	id       string
	released atomic.Bool
	relMu    sync.Mutex // serializes Release

	ingressMu sync.Mutex
	ingress   *ingress // the open runner ingress, if any (runner.go)
}

var (
	_ drivers.Sandbox       = (*sandbox)(nil)
	_ drivers.StreamExecer  = (*sandbox)(nil)
	_ drivers.ImageReporter = (*sandbox)(nil)
	_ drivers.Terminal      = (*sandbox)(nil)
	_ drivers.Capturer      = (*sandbox)(nil)
	_ drivers.RunnerHost    = (*sandbox)(nil)
)

// ID returns the provider lease id ("fake-1", "fake-2", ...).
func (s *sandbox) ID() string { return s.id }

// live is what a command needs to know about its running sandbox.
type live struct {
	alive context.Context
	host  string
}

// begin counts a call of op and checks that the handle is not released and
// the sandbox runs.
func (s *sandbox) begin(op Op) (live, error) {
	if s.released.Load() {
		return live{}, fmt.Errorf("fake: %s %s: %w", op, s.id, drivers.ErrReleased)
	}
	d := s.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.callLocked(op, s.id); err != nil {
		return live{}, err
	}
	b, ok := d.boxes[s.id]
	if !ok || b.state == drivers.StateDestroyed {
		return live{}, fmt.Errorf("fake: %s %s: sandbox %w", op, s.id, drivers.ErrNotFound)
	}
	if st := b.stateAt(d.clk.Now()); st != drivers.StateRunning {
		return live{}, fmt.Errorf("fake: %s %s: sandbox is %s, not running", op, s.id, st)
	}
	return live{alive: b.alive, host: b.hostname}, nil
}

// lockedWriter serializes writes of concurrent goroutines to one writer.
type lockedWriter struct {
	mu *sync.Mutex
	w  interface{ Write([]byte) (int, error) }
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// Exec runs cmd with the fake's built-in commands, its sh subset and the
// driver's handlers (see the package documentation). An unknown command
// exits 127 with "not found" on stderr. On cancellation it returns an error
// wrapping ctx.Err(); when the sandbox is stopped, destroyed or lost during
// the command, the command ends as killed (ExitCode -1, Signal "KILL").
// After Release it returns drivers.ErrReleased; a lost or destroyed sandbox
// gives drivers.ErrNotFound.
func (s *sandbox) Exec(ctx context.Context, cmd drivers.Command) (*drivers.Result, error) {
	if len(cmd.Argv) == 0 {
		return nil, fmt.Errorf("fake: exec in %s: empty argv", s.id)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("fake: exec %q in %s: %w", cmd.Argv[0], s.id, err)
	}
	lv, err := s.begin(OpExec)
	if err != nil {
		return nil, err
	}
	start := s.d.clk.Now()
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(lv.alive, cancel)
	defer stop()
	var mu sync.Mutex
	stdout := driverkit.NewOutputBuffer(cmd.Limit())
	stderr := driverkit.NewOutputBuffer(cmd.Limit())
	sh := s.d.newShell(s.id, lv.host, cmd.Env, cmd.Dir, cmd.Stdin)
	code, err := sh.runArgv(rctx, cmd.Argv, lockedWriter{&mu, stdout}, lockedWriter{&mu, stderr})
	if ctx.Err() != nil {
		return nil, fmt.Errorf("fake: exec %q in %s: %w", cmd.Argv[0], s.id, ctx.Err())
	}
	res := &drivers.Result{Duration: s.d.clk.Now().Sub(start)}
	mu.Lock()
	res.Stdout, res.Stderr = stdout.Bytes(), stderr.Bytes()
	res.Truncated = stdout.Truncated() || stderr.Truncated()
	mu.Unlock()
	switch {
	case lv.alive.Err() != nil:
		res.ExitCode, res.Signal = -1, "KILL"
	case err != nil:
		return nil, fmt.Errorf("fake: exec %q in %s: %w", cmd.Argv[0], s.id, err)
	default:
		res.ExitCode = code
	}
	return res, nil
}

// Release ends the handle. Keep leaves the sandbox running and returns a
// receipt of the running state read back (Keep needs no proof). Stop
// and Destroy change the provider state and return a confirmed receipt for
// this sandbox (StateStopped or StateDestroyed), unless a fault refuses the
// stop (the error is returned, the state and the handle are unchanged, and
// Release may be retried) or a lie (FakeStop) returns a receipt that proves
// nothing. A lost sandbox gives a confirmed "not found" StateDestroyed
// receipt for Stop and Destroy and drivers.ErrNotFound for Keep. A second
// Release returns drivers.ErrReleased.
func (s *sandbox) Release(ctx context.Context, disp drivers.Disposition) (drivers.Receipt, error) {
	s.relMu.Lock()
	defer s.relMu.Unlock()
	if s.released.Load() {
		return drivers.Receipt{}, fmt.Errorf("fake: release %s: %w", s.id, drivers.ErrReleased)
	}
	if err := ctx.Err(); err != nil {
		return drivers.Receipt{}, fmt.Errorf("fake: release %s: %w", s.id, err)
	}
	switch disp {
	case drivers.Keep:
		st, ok := s.d.State(s.id)
		if !ok || st == drivers.StateDestroyed {
			return drivers.Receipt{}, fmt.Errorf("fake: keep %s: sandbox %w", s.id, drivers.ErrNotFound)
		}
		s.released.Store(true)
		return drivers.Receipt{ProviderLeaseID: s.id, State: st, Confirmed: true, ConfirmedAt: s.d.clk.Now(), Evidence: "kept; state read back: " + string(st)}, nil
	case drivers.Stop, drivers.Destroy:
		r, err := s.d.terminate(s.id, disp)
		if err != nil {
			return drivers.Receipt{}, err
		}
		s.released.Store(true)
		return r, nil
	}
	return drivers.Receipt{}, fmt.Errorf("fake: release %s: unknown %s", s.id, disp)
}

// ImageIdentity returns the identity of the image the sandbox was created
// from: a digest identity in its normalized repository, or a snapshot
// identity of this provider. ReportWrongImage makes it lie.
func (s *sandbox) ImageIdentity(ctx context.Context) (images.Identity, error) {
	if err := ctx.Err(); err != nil {
		return images.Identity{}, fmt.Errorf("fake: image identity of %s: %w", s.id, err)
	}
	if _, err := s.begin(OpImageIdentity); err != nil {
		return images.Identity{}, err
	}
	d := s.d
	d.mu.Lock()
	defer d.mu.Unlock()
	b, ok := d.boxes[s.id]
	if !ok {
		return images.Identity{}, fmt.Errorf("fake: image identity of %s: sandbox %w", s.id, drivers.ErrNotFound)
	}
	if !d.wrongImage[s.id] {
		return b.image, nil
	}
	if b.image.Kind() == images.KindSnapshot {
		return images.SnapshotIdentity(d.provider, "wrong-"+b.image.SnapshotID())
	}
	return mustIdentity(b.image.Repository(), fakeDigest("wrong:"+b.image.Digest())), nil
}

// Capture saves the running sandbox as a new provider snapshot named
// req.Name (default "capture-<id>") and returns its snapshot identity. The
// snapshot can be acquired with image "snapshot:<id>" and deleted with
// DeleteTemplate.
func (s *sandbox) Capture(ctx context.Context, req drivers.CaptureRequest) (images.Identity, error) {
	if err := ctx.Err(); err != nil {
		return images.Identity{}, fmt.Errorf("fake: capture %s: %w", s.id, err)
	}
	if _, err := s.begin(OpCapture); err != nil {
		return images.Identity{}, err
	}
	n := req.Name
	if n == "" {
		n = "capture-" + s.id
	}
	s.d.mu.Lock()
	id := s.d.addSnapshotLocked(n)
	s.d.mu.Unlock()
	return images.SnapshotIdentity(s.d.provider, id)
}
