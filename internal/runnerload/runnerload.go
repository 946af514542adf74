package runnerload

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"cmp"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/instance"
	"github.com/berthdev/berth/internal/controller"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/store"
	"github.com/berthdev/berth/store/postgres"
	"github.com/berthdev/berth/store/sqlite"
)

// operator is the principal of every harness call.
var operator = authz.Principal{ID: "runnerload", Role: authz.RoleLocalOperator}

// Config is one run of the harness.
type Config struct {
	// SimBinary is the simulated runners' program (SimPackage, built).
	// Required.
	SimBinary string
	// StoreURL is the System's store: "sqlite:///path" or a PostgreSQL
	// URL. Required.
	StoreURL string
	// Sessions is how many leases, each with a simulated runner.
	Sessions int
	// Rate is the output each session's task offers, bytes per second,
	// in writes of Chunk bytes (default 4096), for Duration.
	Rate     int64
	Chunk    int
	Duration time.Duration
	// Storm, if > 0, is the fraction of the sessions whose connections
	// are dropped at once (closed at the ingress) in the middle of the
	// stream: a reconnect storm. Their runners reconnect and resume from
	// the controller's ack.
	Storm float64
	// Idle, if set, runs no stream task: every session, once attached by
	// its hello, is held connected for Duration with nothing to do but
	// the protocol's own upkeep (heartbeats, the connection's claim, token
	// renewals), then a ping to each shows it still takes commands. Rate
	// and Storm are not used.
	Idle bool
	// RunnersPerSim caps the simulated runners of one runnersim process
	// (each holds about five descriptors; a process may open 20,000
	// here); the harness starts as many processes as it needs. Default
	// 2,500.
	RunnersPerSim int
	// Dir holds the runners' state directories and the controller's
	// output (default a temporary directory, removed at the end).
	Dir string
}

// Result is what a run measured.
type Result struct {
	Sessions  int `json:"sessions"`
	Connected int `json:"connected"`
	// OfferedBytes is what the simulated tasks wrote and their runners
	// accepted (a full outbox blocks the writer: back-pressure), Stored
	// what the controller stored of their output (the stored events'
	// bytes), UsageBytes what the store's output usage of the tasks says
	// (the same when the accounting is right).
	OfferedBytes, StoredBytes, UsageBytes int64
	// TargetBytesPerSec is Sessions * Rate; Offered and Stored per second
	// are over the streaming window (Elapsed).
	TargetBytesPerSec, OfferedBytesPerSec, StoredBytesPerSec float64
	Elapsed                                                  time.Duration
	// DispatchP50 and P99: host Run to the simulated task's start in the
	// runner, over one short task per session dispatched while the
	// streams run (spread over the window's middle half).
	DispatchP50, DispatchP99 time.Duration
	// Setup is how long the leases and their runners' attachment took
	// (every session's first task).
	Setup time.Duration
	// HostCPU is this process's CPU over the streaming window, HostRSS
	// its peak resident set then less its resident set before the
	// leases (the sessions' share); SimCPU and SimRSS the simulated
	// runners' process's (its whole life; peak).
	HostCPU, SimCPU time.Duration
	HostRSS, SimRSS int64
	// HostRSSEnd is this process's resident set at the end of an idle
	// window less its resident set before the leases: what the held
	// sessions keep once the setup's garbage went back to the system
	// (the peak, HostRSS, is mostly right after the setup).
	HostRSSEnd int64
	// HostHeap and HostStacks are the Go heap in use and the goroutine
	// stacks at the end of an idle window (after a GC) less before the
	// leases: the sessions' share of HostRSSEnd that the Go runtime
	// accounts (runtime.MemStats HeapInuse, StackInuse).
	HostHeap, HostStacks int64
	// Goroutines is this process's goroutines at the end of the window
	// less those before the leases (the sessions' share).
	Goroutines int
	// Reconnects counts the connections the ingresses accepted over the
	// idle window (an idle session that dropped and came back).
	Reconnects int
	// Refused counts the runner connections the controller's admission
	// control refused over the run (berth.System.RunnerAdmission).
	Refused int64
	// DiskWritten is what this process wrote to disk over the window
	// (/proc/self/io write_bytes), the store's server aside.
	DiskWritten int64
	// Dropped is how many sessions the storm dropped, StormBack the time
	// from the drop until a task dispatched to each of them right after
	// it had run (every one reconnected and took commands again).
	Dropped   int
	StormBack time.Duration
	// Reconnected counts the dropped sessions whose ingress accepted a
	// connection again after the drop.
	Reconnected int
	// Gaps counts the stream tasks whose stored output is not
	// contiguous (a chunk lost, or one stored twice under another seq);
	// with StoredBytes == OfferedBytes, 0 means nothing lost or
	// duplicated.
	Gaps int
	// SimFailed counts runners that ended with an error; SimErrors the
	// first of them.
	SimFailed int
	SimErrors []string
}

// String is the result on one line.
func (r Result) String() string {
	n := float64(max(r.Connected, 1))
	storm := ""
	if r.Dropped > 0 {
		storm = fmt.Sprintf(" dropped=%d reconnected=%d back_in=%s", r.Dropped, r.Reconnected, r.StormBack.Round(time.Millisecond))
	}
	idle := ""
	if r.Goroutines != 0 || r.Reconnects != 0 {
		idle = fmt.Sprintf(" goroutines/session=%.2f reconnects=%d", float64(r.Goroutines)/n, r.Reconnects)
	}
	if r.HostRSSEnd != 0 {
		idle += fmt.Sprintf(" rss/session at the end=%.0fKB (heap %.0fKB, stacks %.0fKB)", float64(r.HostRSSEnd)/n/1024, float64(r.HostHeap)/n/1024, float64(r.HostStacks)/n/1024)
	}
	if r.Refused != 0 {
		idle += fmt.Sprintf(" refused=%d", r.Refused)
	}
	return fmt.Sprintf("setup=%s%s%s gaps=%d sessions=%d connected=%d offered=%.0fB/s stored=%.0fB/s (target %.0fB/s) stored/offered=%.4f usage/stored=%.4f dispatch p50=%s p99=%s host cpu=%.1f%% of a core rss/session=%.0fKB sim cpu=%s rss=%dMB disk/session-min=%.0fKB",
		r.Setup.Round(time.Millisecond), storm, idle, r.Gaps, r.Sessions, r.Connected, r.OfferedBytesPerSec, r.StoredBytesPerSec, r.TargetBytesPerSec, float64(r.StoredBytes)/float64(max(r.OfferedBytes, 1)), float64(r.UsageBytes)/float64(max(r.StoredBytes, 1)),
		r.DispatchP50.Round(time.Microsecond), r.DispatchP99.Round(time.Microsecond), 100*r.HostCPU.Seconds()/max(r.Elapsed.Seconds(), 1e-9),
		float64(r.HostRSS)/n/1024, r.SimCPU.Round(time.Millisecond), r.SimRSS>>20, float64(r.DiskWritten)/n/max(r.Elapsed.Minutes(), 1e-9)/1024)
}

// SimPackage is the simulated runners' process, whose binary is
// Config.SimBinary: the tests and envctl bench build it with
// testenv.SharedBuild.
const SimPackage = "github.com/berthdev/berth/internal/cmd/runnersim"

// Run runs the harness: a System on cfg.StoreURL with the harness's
// driver (the fake's sandboxes, whose runner ingress is a loopback TCP
// listener and whose Launch hands the ticket to the simulated runners'
// process), cfg.Sessions leases each attached to a simulated runner by a
// first task (hello), then on every session a stream task for
// cfg.Duration. It stops by itself: every task is bounded by Duration,
// and the whole run by twice Duration, five minutes and 100 ms a session
// (and ctx).
func Run(ctx context.Context, cfg Config) (res Result, err error) {
	if cfg.SimBinary == "" || cfg.Sessions <= 0 || cfg.Rate <= 0 && !cfg.Idle || cfg.Duration <= 0 {
		return Result{}, errors.New("runnerload: SimBinary, Sessions, Rate (unless Idle) and Duration are required")
	}
	cfg.RunnersPerSim = cmp.Or(cfg.RunnersPerSim, defaultRunnersPerSim)
	if cfg.Chunk <= 0 {
		cfg.Chunk = 4096
	}
	// Bounded in time whatever happens: a task that never ends (a command
	// lost on the way, a runner gone) fails the run instead of holding it.
	// The setup takes longer the more sessions there are (10,000 took
	// ten minutes on two busy cores): 100 ms a session on top.
	ctx, cancelRun := context.WithTimeout(ctx, 2*cfg.Duration+5*time.Minute+time.Duration(cfg.Sessions)*100*time.Millisecond)
	defer cancelRun()
	if cfg.Dir == "" {
		d, err := os.MkdirTemp("", "berth-runnerload-")
		if err != nil {
			return Result{}, err
		}
		defer os.RemoveAll(d)
		cfg.Dir = d
	}
	res.Sessions = cfg.Sessions

	// The simulated runners' processes.
	sim, err := startSims(cfg.SimBinary, cfg.Dir, cfg.Sessions, cfg.RunnersPerSim)
	simClosed := false
	closeSim := func() error {
		if simClosed {
			return nil
		}
		simClosed = true
		return sim.close()
	}
	defer func() {
		if !simClosed {
			simClosed = true
			sim.kill()
		}
	}()
	if err != nil {
		return res, err
	}
	launchFn := sim.launch

	// The System.
	shared, err := newSharedListener()
	if err != nil {
		return res, fmt.Errorf("runnerload: ingress listener: %w", err)
	}
	defer shared.Close()
	drv := &driver{Driver: fake.New(nil), launch: launchFn, ingresses: map[string]*ingress{}, shared: shared}
	sys, st, closeSys, err := openSystem(ctx, cfg, drv)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, closeSys()) }()
	rs := st.Runners.(controller.RunnerStore)
	v, err := sys.Catalog().Create(ctx, operator, environment.CreateRequest{Name: "runnerload", Driver: fake.Name, Config: map[string]any{}})
	if err != nil {
		return res, fmt.Errorf("runnerload: environment: %w", err)
	}
	set, err := sys.RunnerSet()
	if err != nil {
		return res, err
	}

	// Leases and the first task of each (it attaches the runner).
	// The baseline with the heap's free memory given back to the system:
	// garbage of what ran before in this process (envctl bench's earlier
	// rows) would otherwise be counted against the sessions, or its
	// release under them (a share below zero).
	debug.FreeOSMemory()
	rss0, goroutines0 := rss(), runtime.NumGoroutine()
	var ms0 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	setup := time.Now()
	handles := make([]*lease.Handle, cfg.Sessions)
	connected := make([]bool, cfg.Sessions)
	var firstErr error
	var errMu sync.Mutex
	fail := func(err error) {
		errMu.Lock()
		defer errMu.Unlock()
		if firstErr == nil {
			firstErr = err
		}
	}
	parallel(cfg.Sessions, 16, func(i int) {
		h, err := sys.Leases().Acquire(ctx, operator, lease.AcquireRequest{Company: "load", EnvironmentID: v.ID, Runner: set})
		if err != nil {
			fail(fmt.Errorf("runnerload: acquire: %w", err))
			return
		}
		handles[i] = h
		t, err := h.Run(ctx, lease.Command{TaskID: "hello", Argv: []string{"sim", "hello", strconv.FormatInt(time.Now().UnixNano(), 10)}})
		if err != nil {
			fail(fmt.Errorf("runnerload: lease %s: hello: %w", h.ID(), err))
			return
		}
		if ex, err := t.Wait(ctx); err != nil || ex.Code != 0 {
			fail(fmt.Errorf("runnerload: lease %s: hello: %+v, %v", h.ID(), ex, err))
			return
		}
		connected[i] = true
	})
	// The leases are released while their runners are still connected
	// (a release stops the lease's tasks through its runner), then the
	// runners stop (their process's stdin ends).
	released := false
	releaseAll := func() {
		if released {
			return
		}
		released = true
		parallel(cfg.Sessions, 16, func(i int) {
			if h := handles[i]; h != nil {
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
				defer cancel()
				_, _ = h.Release(cctx, lease.ReleaseOptions{Disposition: lease.Destroy})
			}
		})
	}
	defer func() {
		releaseAll()
		err = errors.Join(err, closeSim())
	}()
	res.Setup = time.Since(setup)
	for _, c := range connected {
		if c {
			res.Connected++
		}
	}
	if firstErr != nil {
		return res, firstErr
	}

	// The streaming window.
	cpu0, disk0 := cpuTime(), diskWritten()
	stopRSS := sampleRSS(&res.HostRSS)
	start := time.Now()
	var pings, storm sync.WaitGroup
	accepted0 := make([]int, len(handles))
	for i, h := range handles {
		accepted0[i] = drv.accepted(h.SandboxID())
	}
	if cfg.Idle {
		// Held idle for the window, then a ping to every session: each
		// still takes commands.
		select {
		case <-time.After(cfg.Duration):
		case <-ctx.Done():
			return res, ctx.Err()
		}
		res.Elapsed = time.Since(start)
		res.HostCPU, res.DiskWritten = cpuTime()-cpu0, diskWritten()-disk0
		stopRSS()
		res.HostRSSEnd = max(rss()-rss0, 0)
		if p := os.Getenv("BERTH_RUNNERLOAD_HEAPPROFILE"); p != "" {
			// What holds the idle sessions' memory (go tool pprof).
			if f, err := os.Create(p); err == nil {
				_ = pprof.WriteHeapProfile(f)
				_ = f.Close()
			}
		}
		if p := os.Getenv("BERTH_RUNNERLOAD_GOROUTINEPROFILE"); p != "" {
			// What the idle sessions' goroutines wait in, counted by stack.
			if f, err := os.Create(p); err == nil {
				_ = pprof.Lookup("goroutine").WriteTo(f, 1)
				_ = f.Close()
			}
		}
		runtime.GC()
		res.Goroutines = runtime.NumGoroutine() - goroutines0
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		res.HostHeap, res.HostStacks = int64(ms.HeapInuse)-int64(ms0.HeapInuse), int64(ms.StackInuse)-int64(ms0.StackInuse)
		for i, h := range handles {
			res.Reconnects += drv.accepted(h.SandboxID()) - accepted0[i]
		}
		parallel(cfg.Sessions, 64, func(i int) {
			h := handles[i]
			t, err := h.Run(ctx, lease.Command{TaskID: "ping", Argv: []string{"sim", "hello", strconv.FormatInt(time.Now().UnixNano(), 10)}})
			if err != nil {
				fail(fmt.Errorf("runnerload: lease %s: ping after the idle window: %w", h.ID(), err))
				return
			}
			if ex, err := t.Wait(ctx); err != nil || ex.Code != 0 {
				fail(fmt.Errorf("runnerload: lease %s: ping after the idle window: %+v, %v", h.ID(), ex, err))
			}
		})
	} else {
		for i, h := range handles {
			at := cfg.Duration/4 + time.Duration(int64(cfg.Duration/2)*int64(i)/int64(cfg.Sessions))
			pings.Go(func() {
				select {
				case <-time.After(at):
				case <-ctx.Done():
					return
				}
				t, err := h.Run(ctx, lease.Command{TaskID: "ping", Argv: []string{"sim", "hello", strconv.FormatInt(time.Now().UnixNano(), 10)}})
				if err != nil {
					fail(fmt.Errorf("runnerload: lease %s: ping: %w", h.ID(), err))
					return
				}
				if ex, err := t.Wait(ctx); err != nil || ex.Code != 0 {
					fail(fmt.Errorf("runnerload: lease %s (session %d of %d, its runner connected %d times): ping: %+v, %v", h.ID(), i, cfg.Sessions, drv.accepted(h.SandboxID()), ex, err))
				}
			})
		}
		if n := int(cfg.Storm * float64(cfg.Sessions)); n > 0 {
			storm.Go(func() {
				select {
				case <-time.After(cfg.Duration / 2):
				case <-ctx.Done():
					return
				}
				dropped := handles[:min(n, len(handles))]
				at := time.Now()
				before := make([]int, len(dropped))
				for i, h := range dropped {
					var ok bool
					if before[i], ok = drv.drop(h.SandboxID()); ok {
						res.Dropped++
					}
				}
				defer func() {
					for i, h := range dropped {
						if drv.accepted(h.SandboxID()) > before[i] {
							res.Reconnected++
						}
					}
				}()
				parallel(len(dropped), len(dropped), func(i int) {
					h := dropped[i]
					t, err := h.Run(ctx, lease.Command{TaskID: "back", Argv: []string{"sim", "hello", strconv.FormatInt(time.Now().UnixNano(), 10)}})
					if err != nil {
						fail(fmt.Errorf("runnerload: lease %s: after the drop: %w", h.ID(), err))
						return
					}
					if ex, err := t.Wait(ctx); err != nil || ex.Code != 0 {
						fail(fmt.Errorf("runnerload: lease %s: after the drop: %+v, %v", h.ID(), ex, err))
					}
				})
				res.StormBack = time.Since(at)
			})
		}
		parallel(cfg.Sessions, cfg.Sessions, func(i int) {
			h := handles[i]
			t, err := h.Run(ctx, lease.Command{TaskID: "stream", Argv: []string{"sim", "stream", strconv.FormatInt(time.Now().UnixNano(), 10),
				strconv.FormatInt(cfg.Rate, 10), cfg.Duration.String(), strconv.Itoa(cfg.Chunk)}})
			if err != nil {
				fail(fmt.Errorf("runnerload: lease %s: stream: %w", h.ID(), err))
				return
			}
			if ex, err := t.Wait(ctx); err != nil || ex.Code != 0 {
				fail(fmt.Errorf("runnerload: lease %s: stream: %+v, %v", h.ID(), ex, err))
			}
		})
	}
	a := sys.RunnerAdmission()
	res.Refused = a.RefusedSessions + a.RefusedBytes
	if !cfg.Idle {
		res.Elapsed = time.Since(start)
		res.HostCPU, res.DiskWritten = cpuTime()-cpu0, diskWritten()-disk0
		pings.Wait()
		storm.Wait()
		stopRSS()
		runtime.GC()
		res.Goroutines = runtime.NumGoroutine() - goroutines0
	}
	res.HostRSS = max(res.HostRSS-rss0, 0)
	if firstErr != nil {
		return res, firstErr
	}

	releaseAll()
	if err := closeSim(); err != nil {
		return res, err
	}
	// Read once every connection ended, so that the last batches'
	// usage is written.
	// Stored: the stream tasks' output events in the store (their
	// refs' lengths), and the store's output usage of the tasks.
	for _, h := range handles {
		if cfg.Idle {
			break // no stream to read back
		}
		sessions, err := rs.LeaseSessions(ctx, h.ID())
		if err != nil {
			return res, err
		}
		for _, s := range sessions {
			u, err := rs.OutputUsage(ctx, s.ID, "stream")
			if err != nil {
				return res, err
			}
			res.UsageBytes += u.Bytes
			var end int64
			gap := false
			for after := uint64(0); ; {
				evs, err := rs.EventsAfter(ctx, s.ID, after, 1024)
				if err != nil {
					return res, err
				}
				for _, e := range evs {
					after = e.Seq
					if e.Event.TaskID == "stream" && e.Ref != nil && e.Event.Output != nil {
						res.StoredBytes += e.Ref.Length
						gap = gap || e.Event.Output.Offset != end
						end = e.Event.Output.Offset + e.Ref.Length
					}
				}
				if len(evs) < 1024 {
					break
				}
			}
			if gap {
				res.Gaps++
			}
		}
	}
	var dispatch []time.Duration
	for _, l := range sim.tasks {
		switch l.Task {
		case "stream":
			res.OfferedBytes += l.Offered
		case "ping":
			dispatch = append(dispatch, l.Dispatch)
		}
	}
	slices.Sort(dispatch)
	res.DispatchP50, res.DispatchP99 = quantile(dispatch, 0.50), quantile(dispatch, 0.99)
	res.SimCPU, res.SimRSS, res.SimFailed, res.SimErrors = sim.summary.CPU, sim.summary.MaxRSS, sim.summary.Failed, sim.summary.Errors
	secs := res.Elapsed.Seconds()
	res.TargetBytesPerSec = float64(cfg.Sessions) * float64(cfg.Rate)
	res.OfferedBytesPerSec, res.StoredBytesPerSec = float64(res.OfferedBytes)/secs, float64(res.StoredBytes)/secs
	return res, nil
}

// openSystem composes the System on cfg.StoreURL with the harness's
// driver, in test mode, without lease quotas.
func openSystem(ctx context.Context, cfg Config, drv *driver) (*berth.System, store.Stores, func() error, error) {
	var st store.Stores
	var closeDB func() error
	switch {
	case strings.HasPrefix(cfg.StoreURL, "sqlite:"):
		db, err := sqlite.Open(ctx, cfg.StoreURL)
		if err != nil {
			return nil, st, nil, fmt.Errorf("runnerload: %w", err)
		}
		st, closeDB = db.Stores(), db.Close
	case strings.HasPrefix(cfg.StoreURL, "postgres://"), strings.HasPrefix(cfg.StoreURL, "postgresql://"):
		db, err := postgres.Open(ctx, cfg.StoreURL)
		if err != nil {
			return nil, st, nil, fmt.Errorf("runnerload: %w", err)
		}
		st, closeDB = db.Stores(), db.Close
	default:
		return nil, st, nil, fmt.Errorf("runnerload: store %q: want sqlite:///path or postgres://", cfg.StoreURL)
	}
	out := filepath.Join(cfg.Dir, "output")
	sys, err := berth.New(ctx, &berth.Options{Drivers: []drivers.Driver{drv}, Stores: st,
		TestMode: true, MemorySecrets: true, RunnerBinary: cfg.SimBinary, RunnerDir: out})
	if err != nil {
		return nil, st, nil, errors.Join(fmt.Errorf("runnerload: %w", err), closeDB())
	}
	none := 0
	if _, err := sys.Settings().Update(ctx, operator, instance.AnyRevision, func(c *instance.Settings) error {
		c.QuotaPerCompany, c.QuotaPerCompanyEnvironment = none, none
		return nil
	}); err != nil {
		return nil, st, nil, errors.Join(fmt.Errorf("runnerload: lifting the lease quotas: %w", err), sys.Close(), closeDB())
	}
	return sys, st, func() error { return errors.Join(sys.Close(), closeDB()) }, nil
}

// driver is the fake driver whose sandboxes host a simulated runner: the
// ingress is a TCP listener on loopback, and Launch hands the ticket to
// the simulated runners' process.
type driver struct {
	*fake.Driver
	launch func(launch) error

	shared    *sharedListener
	mu        sync.Mutex
	ingresses map[string]*ingress // by sandbox id
}

// drop closes every connection accepted on the ingress of sandbox id and
// returns how many it had accepted.
func (d *driver) drop(id string) (accepted int, ok bool) {
	d.mu.Lock()
	in := d.ingresses[id]
	d.mu.Unlock()
	if in == nil {
		return 0, false
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	accepted = in.accepted
	for c := range in.conns {
		c.Close()
		delete(in.conns, c)
	}
	return accepted, true
}

// accepted returns how many connections the ingress of sandbox id
// accepted.
func (d *driver) accepted(id string) int {
	d.mu.Lock()
	in := d.ingresses[id]
	d.mu.Unlock()
	if in == nil {
		return 0
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.accepted
}

// RunnerArch implements drivers.ArchReporter.
func (d *driver) RunnerArch(context.Context, config.Config) (string, error) {
	return runtime.GOARCH, nil
}

// Acquire implements drivers.Driver.
func (d *driver) Acquire(ctx context.Context, cfg config.Config, req drivers.AcquireRequest) (drivers.Sandbox, error) {
	sb, err := d.Driver.Acquire(ctx, cfg, req)
	if err != nil {
		return nil, err
	}
	return &sandbox{Sandbox: sb, d: d}, nil
}

type sandbox struct {
	drivers.Sandbox
	d *driver
}

// HostRunner implements drivers.RunnerHost.
func (s *sandbox) HostRunner(ctx context.Context, spec drivers.RunnerSpec) (drivers.RunnerIngress, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	in := &ingress{Listener: s.d.shared.listener(), launch: s.d.launch, conns: map[net.Conn]bool{}}
	s.d.mu.Lock()
	s.d.ingresses[s.ID()] = in
	s.d.mu.Unlock()
	return in, nil
}

type ingress struct {
	net.Listener
	launch func(launch) error

	mu       sync.Mutex
	conns    map[net.Conn]bool
	accepted int
}

// Accept implements net.Listener, keeping the connection for a drop.
func (in *ingress) Accept() (net.Conn, error) {
	c, err := in.Listener.Accept()
	if err != nil {
		return nil, err
	}
	in.mu.Lock()
	in.conns[c] = true
	in.accepted++
	in.mu.Unlock()
	return c, nil
}

func (in *ingress) Endpoint() string { return "http://" + in.Addr().String() }

func (in *ingress) Launch(ctx context.Context, req drivers.RunnerLaunch) error {
	return in.launch(launch{Endpoint: in.Endpoint(), Lease: req.Lease, Ticket: req.Ticket})
}

func (in *ingress) LogTail(context.Context, int) ([]byte, error) { return nil, nil }

// parallel calls fn(0..n-1) on at most width goroutines at once.
func parallel(n, width int, fn func(i int)) {
	sem := make(chan struct{}, max(width, 1))
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			fn(i)
		})
	}
	wg.Wait()
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(int(q*float64(len(sorted))), len(sorted)-1)]
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// diskWritten is /proc/self/io's write_bytes (0 where unreadable).
func diskWritten() int64 { return procField("/proc/self/io", "write_bytes:") }

// rss is /proc/self/status's VmRSS in bytes.
func rss() int64 { return procField("/proc/self/status", "VmRSS:") << 10 }

func procField(path, key string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, key); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n
			}
		}
	}
	return 0
}

// sampleRSS records the peak RSS into peak every 250 ms until stopped.
func sampleRSS(peak *int64) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			*peak = max(*peak, rss())
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() { close(done); <-finished }
}

// Full and Quick are envctl bench's runners-1k row and its --quick
// variant: sessions each offering 40 KB/s (Coder's scale test's terminal
// traffic) for the duration.
var (
	Full  = Config{Sessions: 1000, Rate: 40 << 10, Chunk: 4096, Duration: 5 * time.Minute}
	Quick = Config{Sessions: 50, Rate: 40 << 10, Chunk: 4096, Duration: 10 * time.Second}
	// StormFull and StormQuick are the reconnect-storm row's: 10% of the
	// sessions dropped at once halfway through the stream.
	StormFull  = Config{Sessions: 1000, Rate: 40 << 10, Chunk: 4096, Duration: time.Minute, Storm: 0.1}
	StormQuick = Config{Sessions: 50, Rate: 40 << 10, Chunk: 4096, Duration: 10 * time.Second, Storm: 0.1}
	// StormSmall is the smallest storm that still proves the harness
	// end to end, for the test suite (make test runs it under -race on
	// two shared cores): 5 of 20 sessions dropped at once halfway
	// through a 4 s stream, a ping dispatched to each session while
	// they stream and a task to each dropped one right after the drop.
	// The runners are spread over two simulated runners' processes.
	StormSmall = Config{Sessions: 20, Rate: 40 << 10, Chunk: 4096, Duration: 4 * time.Second, Storm: 0.25, RunnersPerSim: 10}
	// IdleFull and IdleQuick are the runners-10k-idle row's: sessions
	// held connected with nothing to do for the duration (issue 55's goal:
	// 10,000 for 5 minutes, the host's RSS <= 100 KB a session).
	IdleFull  = Config{Sessions: 10_000, Idle: true, Duration: 5 * time.Minute}
	IdleQuick = Config{Sessions: 500, Idle: true, Duration: 20 * time.Second}
)
