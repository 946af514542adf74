package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/lease"
)

var timeZero time.Time

var (
	// errRunNotFound is a run this server does not know (or of another
	// company).
	errRunNotFound = errcode.New(errcode.NotFound, "server: run not found")
	// errShuttingDown refuses new runs during shutdown.
	errShuttingDown = errcode.New(errcode.Unavailable, "server: shutting down")
)

// errTooManyRuns refuses a run over a -max-runs-per-company or
// -max-runs-per-principal cap: the library's quota error (429 with
// Retry-After), so that it reads as a lease quota does.
var errTooManyRuns = fmt.Errorf("server: too many runs in flight: %w", lease.ErrQuota)

// limits are the server's bounds on runs and its maintenance timers.
type limits struct {
	// maxRunsPerCompany and maxRunsPerPrincipal cap the runs in flight
	// (started, not ended) of one company and of one principal over every
	// replica (counted in server_runs; defaults 8 and 4).
	maxRunsPerCompany, maxRunsPerPrincipal int
	// runTimeout is the deadline of a run that names none (default 15
	// min; at most maxRunTimeout).
	runTimeout time.Duration
	// runRetention is how long an ended run stays readable (default 24 h).
	runRetention time.Duration
	// sweepInterval is the maintenance timers' period (jittered); 0 runs
	// no timer (only POST /api/v1/sweep sweeps).
	sweepInterval time.Duration
	// runClaimTTL is how long a replica's claim on a run it holds lasts
	// after a renewal (default 30 s; renewed every third of it): once it
	// lapsed, any replica's maintenance takes the run over.
	runClaimTTL time.Duration
}

// withDefaults fills the zero fields.
func (l limits) withDefaults() limits {
	if l.maxRunsPerCompany <= 0 {
		l.maxRunsPerCompany = 8
	}
	if l.maxRunsPerPrincipal <= 0 {
		l.maxRunsPerPrincipal = 4
	}
	if l.runTimeout <= 0 {
		l.runTimeout = 15 * time.Minute
	}
	l.runTimeout = min(l.runTimeout, maxRunTimeout)
	if l.runRetention <= 0 {
		l.runRetention = 24 * time.Hour
	}
	if l.runClaimTTL <= 0 {
		l.runClaimTTL = 30 * time.Second
	}
	return l
}

// isQuota reports whether err is a quota refusal: a run cap
// (errTooManyRuns) or the library's lease quota, which it wraps (429).
func isQuota(err error) bool { return errors.Is(err, lease.ErrQuota) }

// retryAfterRun is the Retry-After of a run refused by a cap or quota.
const retryAfterRun = "5"

const (
	// maxRunTimeout bounds a run's task.
	maxRunTimeout = time.Hour
	// attachTimeout bounds the runner's install, start and connect.
	attachTimeout = 2 * time.Minute
)

// Run statuses.
const (
	runStarting = "starting"
	runRunning  = "running"
	runExited   = "exited"
	runStopped  = "stopped"
	runFailed   = "failed"
)

// runBody is the body of POST …/runs: a bounded task on an environment
// (by id, instance admins and local operators) or on the target of a
// scope's binding.
type runBody struct {
	EnvironmentID  string   `json:"environmentId,omitempty"`
	Workspace      string   `json:"workspace,omitempty"`
	Project        string   `json:"project,omitempty"`
	Agent          string   `json:"agent,omitempty"`
	Argv           []string `json:"argv"`
	TimeoutSeconds int      `json:"timeoutSeconds,omitempty"`
	// LeaseID runs the task in a held lease of the company (a run's with
	// hold, or any live lease acquired with a runner) instead of
	// acquiring one, and keeps it held: the caller must be allowed to
	// lease it (lease.Manager.Open). It names no environment or scope.
	LeaseID string `json:"leaseId,omitempty"`
	// Hold keeps the lease after the task (what the task left running is
	// stopped with the runner's proof) instead of releasing it: the next
	// run names it by leaseId, or, with a workspace, acquires the same
	// lease again (policy reuse_by_workspace, whose reuse key is the
	// company, the environment, the project and the workspace). A run's
	// task runs in its lease's one live workspace (POST …/workspace
	// prepared it in the held lease), else in the sandbox's working
	// directory.
	Hold bool `json:"hold,omitempty"`
}

// runView is what GET …/runs/{id} shows.
type runView struct {
	ID          string       `json:"id"`
	Company     string       `json:"company"`
	Environment string       `json:"environmentId,omitempty"`
	Status      string       `json:"status"`
	Lease       string       `json:"leaseId,omitempty"`
	Task        string       `json:"taskId,omitempty"`
	Exit        *lease.Exit  `json:"exit,omitempty"`
	Error       *apiError    `json:"error,omitempty"`
	Proofs      []runProof   `json:"proofs,omitempty"`
	Receipt     *lease.Lease `json:"receipt,omitempty"`
	CreatedAt   time.Time    `json:"createdAt"`
	// Deadline is when the run's task is stopped (timeoutSeconds, else
	// -run-timeout; never more than an hour after its start).
	Deadline time.Time  `json:"deadline"`
	EndedAt  *time.Time `json:"endedAt,omitempty"`
	// Held says the run keeps its lease (hold, or leaseId): it is not
	// released at the run's end and the run has no receipt; release it
	// with POST …/leases/{id}/release.
	Held bool `json:"held,omitempty"`
}

// runProof is a stop proof of a run's task: the runner's word
// (drivers.EvidenceRunnerAttested); the lease's receipt is what checked
// the sandbox from outside.
type runProof struct {
	lease.StopProof
	Evidence drivers.EvidenceKind `json:"evidence"`
}

// taskRun is a run this replica holds (runs it, or took it over), or held
// until it ended.
type taskRun struct {
	mu    sync.Mutex
	view  runView
	owner authz.Principal
	task  *lease.Task
	done  chan struct{}
	stop  chan struct{} // closed by a stop request
	// lost is closed when another replica took the run over (this one
	// was cut off from the database past the claim's expiry): this
	// replica lets go of it, stopping and releasing nothing.
	lost     chan struct{}
	lostOnce sync.Once
}

func (r *taskRun) snapshot() runView {
	r.mu.Lock()
	defer r.mu.Unlock()
	return cloneView(r.view)
}

func cloneView(v runView) runView {
	v.Proofs = append([]runProof(nil), v.Proofs...)
	return v
}

// runRecord is a run as read from server_runs (any replica's).
type runRecord struct {
	view        runView
	owner       authz.Principal
	argv        []string
	holder      string
	holderUntil time.Time
}

func (r *runRecord) snapshot() runView { return cloneView(r.view) }

// runs are the runs of the instance, kept in server_runs; those this
// replica holds run here (byID).
type runs struct {
	s *server
	// holder names this replica in the runs' claims.
	holder string
	mu     sync.Mutex
	byID   map[string]*taskRun
	closed bool
	wg     sync.WaitGroup
	base   context.Context
	cancel context.CancelFunc
}

func newRuns(s *server) *runs {
	ctx, cancel := context.WithCancel(context.Background())
	return &runs{s: s, holder: "replica-" + randomToken()[:16], byID: map[string]*taskRun{}, base: ctx, cancel: cancel}
}

// claimTTL is how long a replica's claim on a run lasts after a renewal;
// it renews every third of it.
func (rs *runs) claimTTL() time.Duration { return rs.s.limits.runClaimTTL }

func (s *server) startRun(w http.ResponseWriter, r *http.Request) {
	company := r.PathValue("company")
	var body runBody
	err := decode(w, r, &body, false)
	switch {
	case err != nil:
	case len(body.Argv) == 0:
		err = invalid("argv", "required: the task's argv")
	case body.TimeoutSeconds < 0 || time.Duration(body.TimeoutSeconds)*time.Second > maxRunTimeout:
		err = invalid("timeoutSeconds", "want 0..%d", int(maxRunTimeout/time.Second))
	case body.LeaseID != "" && (body.EnvironmentID != "" || body.Workspace != "" || body.Project != "" || body.Agent != "" || body.Hold):
		err = invalid("leaseId", "a held lease names its environment and workspace and stays held: leave out environmentId, workspace, project, agent and hold")
	}
	var rn *taskRun
	if err == nil {
		rn, err = s.runs.start(r.Context(), principalOf(r), company, body)
	}
	s.audit(r, "run.start", body.EnvironmentID, err, "company", company)
	if err != nil {
		if isQuota(err) {
			w.Header().Set("Retry-After", retryAfterRun)
		}
		s.writeError(w, r, err)
		return
	}
	w.Header().Set("Location", "/api/v1/companies/"+company+"/runs/"+rn.view.ID)
	s.writeJSON(w, r, http.StatusAccepted, rn.snapshot())
}

// start records the run (under the caps, counted over every replica's
// runs in server_runs, with this replica's claim), leases the target
// (authorized by the library for p) and then, in the background, runs the
// task through the runner, waits for it and releases the lease (destroy),
// whose receipt the run keeps.
func (rs *runs) start(ctx context.Context, p authz.Principal, company string, body runBody) (*taskRun, error) {
	id, err := newID("run")
	if err != nil {
		return nil, err
	}
	taskID, err := newID("task")
	if err != nil {
		return nil, err
	}
	req := lease.AcquireRequest{Company: company, Run: id, Workspace: body.Workspace, WithRunner: true, Policy: lease.Ephemeral}
	if body.EnvironmentID != "" {
		req.EnvironmentID = body.EnvironmentID
		req.Project = body.Project
	} else {
		req.Scope = &authz.Scope{Company: company, Workspace: body.Workspace, Project: body.Project, Agent: body.Agent}
	}
	if body.Hold && body.Workspace != "" {
		req.Policy = lease.ReuseByWorkspace
	}
	rs.prune(time.Now())
	lim := rs.s.limits
	timeout := time.Duration(body.TimeoutSeconds) * time.Second
	if timeout <= 0 {
		timeout = lim.runTimeout
	}
	now := time.Now().UTC()
	deadline := now.Add(timeout)
	// The lease ends with the run: past its deadline and the margin for
	// the stop, any replica's sweep destroys it, even with no server left
	// to hold the run. A held lease lives on (its TTL, renewed by each
	// acquisition of its workspace).
	held := body.Hold || body.LeaseID != ""
	if !held {
		req.Expires = deadline.Add(runLeaseMargin)
	}
	rec := runRecord{view: runView{ID: id, Company: company, Status: runStarting, Task: taskID, CreatedAt: now, Deadline: deadline, Held: held},
		owner: p, argv: body.Argv}
	rs.mu.Lock()
	if rs.closed {
		rs.mu.Unlock()
		return nil, errShuttingDown
	}
	rs.wg.Add(1)
	rs.mu.Unlock()
	if err := rs.s.host.insertRun(ctx, &rec, rs.holder, now.Add(rs.claimTTL()), lim); err != nil {
		rs.wg.Done()
		return nil, err
	}
	var h *lease.Handle
	if body.LeaseID != "" {
		h, err = rs.openHeld(ctx, p, company, body.LeaseID)
	} else {
		h, err = rs.s.sys.Leases().Acquire(ctx, p, req)
	}
	if err != nil {
		rs.s.host.deleteRun(context.WithoutCancel(ctx), id)
		rs.wg.Done()
		return nil, err
	}
	rec.view.Lease, rec.view.Environment = h.ID(), h.Lease().Environment
	rn := &taskRun{view: rec.view, owner: p, done: make(chan struct{}), stop: make(chan struct{}), lost: make(chan struct{})}
	rs.save(ctx, rn)
	rs.mu.Lock()
	rs.byID[id] = rn
	rs.mu.Unlock()
	go func() {
		defer rs.wg.Done()
		defer close(rn.done)
		rctx, cancel := context.WithDeadline(rs.base, deadline.Add(runDeadlineMargin))
		defer cancel()
		actx, acancel := context.WithTimeout(rctx, attachTimeout)
		dir, err := rs.s.workspaceDir(actx, p, h.ID())
		var task *lease.Task
		if err == nil {
			task, err = h.Run(actx, lease.Command{TaskID: taskID, Argv: body.Argv, Deadline: deadline, StopGrace: 2 * time.Second, Dir: dir})
		}
		acancel()
		if err != nil {
			rs.fail(rn, err)
			rs.release(rctx, rn, h)
			return
		}
		rs.watch(rctx, rn, h, task, false)
	}()
	return rn, nil
}

// runDeadlineMargin is how long past its deadline the server waits for a
// run's task to end by itself before it stops it; runLeaseMargin is how
// long past the deadline the run's lease expires (the stop and the
// release fit in it; a sweep destroys the lease after).
const (
	runDeadlineMargin = 30 * time.Second
	runLeaseMargin    = 5 * time.Minute
)

// prune forgets the runs that ended before now minus -run-retention (in
// server_runs, and this replica's handles of them).
func (rs *runs) prune(now time.Time) int {
	cut := now.Add(-rs.s.limits.runRetention)
	rs.mu.Lock()
	for id, rn := range rs.byID {
		rn.mu.Lock()
		old := rn.view.EndedAt != nil && rn.view.EndedAt.Before(cut)
		rn.mu.Unlock()
		if old {
			delete(rs.byID, id)
		}
	}
	rs.mu.Unlock()
	n, err := rs.s.host.pruneRuns(context.Background(), cut)
	if err != nil {
		rs.s.log.Warn("runs: pruning ended runs", "error", err.Error())
	}
	return n
}

// save writes rn's view to server_runs under this replica's claim; a
// claim another replica took (this one was cut off longer than the
// claim's expiry) is logged and left to that replica.
func (rs *runs) save(ctx context.Context, rn *taskRun) {
	v := rn.snapshot()
	ok, err := rs.s.host.updateRun(context.WithoutCancel(ctx), v, rs.holder)
	switch {
	case err != nil:
		rs.s.log.Warn("runs: recording a run", "run", v.ID, "error", err.Error())
	case !ok:
		rs.s.log.Warn("runs: another replica took the run over; not recorded here", "run", v.ID, "status", v.Status)
	}
}

func (rs *runs) fail(rn *taskRun, err error) {
	rn.mu.Lock()
	e := errorBody(err)
	rn.view.Error, rn.view.Status = &e, runFailed
	rn.mu.Unlock()
}

// openHeld opens the held lease id of company for p (lease.Manager.Open
// authorizes p on it; a lease of another company is not found).
func (rs *runs) openHeld(ctx context.Context, p authz.Principal, company, id string) (*lease.Handle, error) {
	h, err := rs.s.sys.Leases().Open(ctx, p, id)
	if err != nil {
		return nil, err
	}
	if h.Lease().Company != company {
		return nil, fmt.Errorf("lease %s: %w", id, errcode.ErrNotFound)
	}
	return h, nil
}

// release destroys the run's lease (stopping and checking its tasks
// first), records its receipt and ends the run. A held run's lease is
// kept: its task (if it started) is stopped with the runner's proof, so
// that the lease's later release owes it nothing, and the run ends
// without a receipt.
func (rs *runs) release(ctx context.Context, rn *taskRun, h *lease.Handle) {
	rctx, c := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer c()
	rn.mu.Lock()
	held, task := rn.view.Held, rn.task
	rn.mu.Unlock()
	if held {
		var err error
		if task != nil {
			var p lease.StopProof
			p, err = task.Stop(rctx)
			if p.TaskID != "" {
				rn.mu.Lock()
				rn.view.Proofs = append(rn.view.Proofs, runProof{StopProof: p, Evidence: drivers.EvidenceRunnerAttested})
				rn.mu.Unlock()
			}
		}
		now := time.Now().UTC()
		rn.mu.Lock()
		rn.view.EndedAt = &now
		if err != nil && rn.view.Error == nil {
			e := errorBody(fmt.Errorf("stop what task %s left in held lease %s: %w", task.ID(), h.ID(), err))
			rn.view.Error = &e
		}
		rn.mu.Unlock()
		rs.save(rctx, rn)
		return
	}
	l, err := h.Release(rctx, lease.ReleaseOptions{Disposition: lease.Destroy})
	now := time.Now().UTC()
	rn.mu.Lock()
	rn.view.Receipt, rn.view.EndedAt = l, &now
	if err != nil && rn.view.Error == nil {
		e := errorBody(fmt.Errorf("release lease %s: %w", h.ID(), err))
		rn.view.Error = &e
	}
	rn.mu.Unlock()
	rs.save(rctx, rn)
}

// watch follows task to its end, a stop request, the run's deadline or
// shutdown, stops it with proof when it did not end by itself, and
// releases h. adopted says the task was reattached (it may have ended
// while no server held the run: its exit is in the controller's store).
func (rs *runs) watch(ctx context.Context, rn *taskRun, h *lease.Handle, task *lease.Task, adopted bool) {
	release := true
	defer func() {
		if release {
			rs.release(ctx, rn, h)
		}
	}()
	rn.mu.Lock()
	rn.task, rn.view.Task, rn.view.Status = task, task.ID(), runRunning
	rn.mu.Unlock()
	rs.save(ctx, rn)
	type outcome struct {
		exit lease.Exit
		err  error
	}
	done := make(chan outcome, 1)
	go func() {
		exit, err := task.Wait(context.WithoutCancel(ctx))
		done <- outcome{exit, err}
	}()
	exited := func(o outcome) {
		if o.err != nil {
			rs.fail(rn, o.err)
			return
		}
		rn.mu.Lock()
		rn.view.Exit, rn.view.Status = &o.exit, runExited
		rn.mu.Unlock()
	}
	if adopted {
		// A task that ended while no server held the run: its exit is
		// stored; read it before the deadline's stop is considered.
		select {
		case o := <-done:
			exited(o)
			return
		case <-time.After(3 * time.Second):
		}
	}
	select {
	case o := <-done:
		exited(o)
		return
	case <-rn.lost:
		release = false
		rs.s.log.Warn("runs: another replica took the run over; letting go of it here", "run", rn.view.ID)
		return
	case <-ctx.Done():
	case <-rn.stop:
	}
	// Stopped (a stop request, the deadline or shutdown): stop with
	// proof, then wait for the exit the runner stores.
	sctx, c := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	p, err := task.Stop(sctx)
	c()
	rn.mu.Lock()
	if p.TaskID != "" {
		rn.view.Proofs = append(rn.view.Proofs, runProof{StopProof: p, Evidence: drivers.EvidenceRunnerAttested})
	}
	rn.view.Status = runStopped
	rn.mu.Unlock()
	if err != nil {
		rs.fail(rn, fmt.Errorf("stop task %s: %w", task.ID(), err))
		return
	}
	select {
	case o := <-done:
		if o.err == nil {
			rn.mu.Lock()
			rn.view.Exit = &o.exit
			rn.mu.Unlock()
		}
	case <-time.After(30 * time.Second):
	}
}

// runLost ends a run this replica took over but cannot reattach.
const runLost = "lost"

// adopt takes over run id, whose holder's claim lapsed (the replica that
// ran it died, or this one restarted): it claims it, opens its lease and
// reattaches its task (Manager.Open, Handle.Reattach: the runner's
// ingress is served from here, a runner gone with its server is
// relaunched with a resume ticket), or starts it when its holder died
// before it did (the same task id: nothing runs twice), and follows it as
// start does. A run past its deadline is stopped with proof and its lease
// released with a receipt. A local lease cannot be reattached by another
// process (its sandbox is the process that acquired it; an SSH lease is
// reopened once its holder's claim expired): its run is marked lost, and
// its lease is left to the sweep, which ends its processes by their tag.
func (rs *runs) adopt(ctx context.Context, id string) (bool, error) {
	now := time.Now()
	ok, err := rs.s.host.takeRun(ctx, id, rs.holder, now, now.Add(rs.claimTTL()))
	if err != nil || !ok {
		return false, err
	}
	rec, err := rs.s.host.readRun(ctx, id)
	if err != nil {
		return false, err
	}
	rn := &taskRun{view: rec.view, owner: rec.owner, done: make(chan struct{}), stop: make(chan struct{}), lost: make(chan struct{})}
	rs.mu.Lock()
	if rs.closed {
		rs.mu.Unlock()
		rs.s.host.dropRunClaim(context.WithoutCancel(ctx), id, rs.holder)
		return false, errShuttingDown
	}
	rs.byID[id] = rn
	rs.wg.Add(1)
	rs.mu.Unlock()
	end := func(status string, err error) {
		defer rs.wg.Done()
		defer close(rn.done)
		now := time.Now().UTC()
		e := errorBody(err)
		rn.mu.Lock()
		rn.view.Status, rn.view.Error, rn.view.EndedAt = status, &e, &now
		rn.mu.Unlock()
		rs.save(ctx, rn)
	}
	if rec.view.Lease == "" {
		end(runFailed, errors.New("the server that started the run stopped before its lease was acquired; the library's sweep ends the acquisition"))
		return true, nil
	}
	h, err := rs.s.sys.Leases().Open(ctx, rec.owner, rec.view.Lease)
	if err != nil {
		l, gerr := rs.s.sys.Leases().Get(ctx, servicePrincipal, rec.view.Lease)
		switch {
		case gerr == nil && l.Ended():
			rn.mu.Lock()
			rn.view.Receipt = l
			rn.mu.Unlock()
			end(runLost, fmt.Errorf("the server running the run stopped and its lease %s ended without it (%s): %w", l.ID, l.Status, err))
		default:
			end(runLost, fmt.Errorf("the server running the run stopped and its lease %s cannot be reattached (a local host lease lives in the process that acquired it; the sweep ends its processes once its holder's claim expired): %w", rec.view.Lease, err))
		}
		return true, nil
	}
	go func() {
		defer rs.wg.Done()
		defer close(rn.done)
		rctx, cancel := context.WithDeadline(rs.base, rec.view.Deadline.Add(runDeadlineMargin))
		defer cancel()
		actx, acancel := context.WithTimeout(context.WithoutCancel(rctx), attachTimeout)
		var task *lease.Task
		if rec.view.Status == runStarting {
			var dir string
			if dir, err = rs.s.workspaceDir(actx, rec.owner, h.ID()); err == nil {
				task, err = h.Run(actx, lease.Command{TaskID: rec.view.Task, Argv: rec.argv, Deadline: rec.view.Deadline, StopGrace: 2 * time.Second, Dir: dir})
			}
		} else {
			task, err = h.Reattach(actx, rec.view.Task)
		}
		acancel()
		if err != nil {
			rs.fail(rn, fmt.Errorf("take the run over: %w", err))
			rs.release(rctx, rn, h)
			return
		}
		rs.s.log.Info("runs: took a run over", "run", id, "lease", rec.view.Lease, "task", rec.view.Task, "previous_holder", rec.holder)
		rs.watch(rctx, rn, h, task, true)
	}()
	return true, nil
}

// takeOver adopts every run whose holder's claim lapsed; it returns how
// many it took.
func (rs *runs) takeOver(ctx context.Context) (int, error) {
	ids, err := rs.s.host.lapsedRuns(ctx, time.Now())
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, id := range ids {
		ok, err := rs.adopt(ctx, id)
		if err != nil {
			errs = append(errs, fmt.Errorf("run %s: %w", id, err))
		}
		if ok {
			n++
		}
	}
	return n, errors.Join(errs...)
}

// heartbeat renews this replica's claims on its runs every third of the
// claim's expiry, and passes stop requests other replicas recorded to the
// runs they name, every second, until ctx ends.
func (rs *runs) heartbeat(ctx context.Context) {
	renew := time.Time{}
	for {
		now := time.Now()
		if !now.Before(renew) {
			if err := rs.s.host.renewRuns(ctx, rs.holder, now.Add(rs.claimTTL())); err != nil && ctx.Err() == nil {
				rs.s.log.Warn("runs: renewing the claims", "error", err.Error())
			}
			renew = now.Add(rs.claimTTL() / 3)
		}
		rs.letGo(ctx)
		ids, err := rs.s.host.stopRequested(ctx, rs.holder)
		if err == nil {
			for _, id := range ids {
				rs.requestStop(id)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// letGo lets go of the runs this replica follows that another replica
// took over (their claims lapsed while this one could not renew them).
func (rs *runs) letGo(ctx context.Context) {
	// The runs followed before the read: one recorded after it is not
	// taken for lost.
	var live []*taskRun
	rs.mu.Lock()
	for _, rn := range rs.byID {
		rn.mu.Lock()
		if rn.view.EndedAt == nil {
			live = append(live, rn)
		}
		rn.mu.Unlock()
	}
	rs.mu.Unlock()
	if len(live) == 0 {
		return
	}
	held, err := rs.s.host.heldRuns(ctx, rs.holder)
	if err != nil {
		return
	}
	for _, rn := range live {
		rn.mu.Lock()
		gone := rn.view.EndedAt == nil && !held[rn.view.ID]
		rn.mu.Unlock()
		if gone {
			rn.lostOnce.Do(func() { close(rn.lost) })
		}
	}
}

// requestStop closes the stop channel of run id if this replica holds it.
func (rs *runs) requestStop(id string) bool {
	rs.mu.Lock()
	rn := rs.byID[id]
	rs.mu.Unlock()
	if rn == nil {
		return false
	}
	rn.mu.Lock()
	select {
	case <-rn.stop:
	default:
		close(rn.stop)
	}
	rn.mu.Unlock()
	return true
}

// get returns run id of company that p may read, from server_runs (any
// replica's): its owner's, or any for instance admins and local operators
// (the lease's authorization decides the rest).
func (rs *runs) get(ctx context.Context, p authz.Principal, company, id string) (*runRecord, error) {
	rec, err := rs.s.host.readRun(ctx, id)
	if errors.Is(err, errRunNotFound) || err == nil && rec.view.Company != company {
		return nil, fmt.Errorf("run %s: %w", id, errRunNotFound)
	}
	if err != nil {
		return nil, err
	}
	if err := rs.mayRead(ctx, p, rec); err != nil {
		return nil, fmt.Errorf("run %s: %w", id, errRunNotFound)
	}
	return rec, nil
}

// mayRead asks the library: p must be able to read the run's lease (a
// run without one, its owner only).
func (rs *runs) mayRead(ctx context.Context, p authz.Principal, rec *runRecord) error {
	if rec.view.Lease == "" {
		if samePrincipal(p, rec.owner) {
			return nil
		}
		return errRunNotFound
	}
	_, err := rs.s.sys.Leases().Get(ctx, p, rec.view.Lease)
	return err
}

func (s *server) getRun(w http.ResponseWriter, r *http.Request) {
	rn, err := s.runs.get(r.Context(), principalOf(r), r.PathValue("company"), r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, rn.snapshot())
}

// listRuns is GET …/runs?state=: the company's runs p may read, newest
// first; state is starting, running, exited, stopped, failed or lost, or
// live (not ended) or ended.
func (s *server) listRuns(w http.ResponseWriter, r *http.Request) {
	company, state := r.PathValue("company"), r.URL.Query().Get("state")
	switch state {
	case "", "live", "ended", runStarting, runRunning, runExited, runStopped, runFailed, runLost:
	default:
		s.writeError(w, r, invalid("state", "want live, ended, starting, running, exited, stopped, failed or lost, got %q", state))
		return
	}
	recs, err := s.host.listRuns(r.Context(), company, state)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	items := []runView{}
	for _, rec := range recs {
		if s.runs.mayRead(r.Context(), principalOf(r), rec) == nil {
			items = append(items, rec.snapshot())
		}
	}
	s.writeJSON(w, r, http.StatusOK, struct {
		Items []runView `json:"items"`
	}{items})
}

// newID returns prefix, "_" and 16 random bytes in hex: a run's or a
// task's id.
func newID(prefix string) (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("new id: %w", err)
	}
	return prefix + "_" + hex.EncodeToString(b[:]), nil
}

// outputChunk is one piece of a run's output.
type outputChunk struct {
	Seq       uint64 `json:"seq"`
	Stream    string `json:"stream"`
	Offset    int64  `json:"offset"`
	Text      string `json:"text"`
	Truncated int64  `json:"truncated,omitempty"`
}

func chunksOf(cs []lease.OutputChunk) []outputChunk {
	out := []outputChunk{}
	for _, c := range cs {
		out = append(out, outputChunk{Seq: c.Seq, Stream: string(c.Stream), Offset: c.Offset, Text: string(c.Data), Truncated: c.Truncated})
	}
	return out
}

// outputReader reads a run's stored output after a chunk's seq.
type outputReader func(ctx context.Context, after uint64) ([]outputChunk, error)

// outputOf returns the reader of run rec's output for p, or nil while the
// run has no task: this replica's task when it holds the run, else the
// task found again through the lease manager (Manager.Task: the
// runner's session of the run's lease; the output bytes are read from
// the runners' output directory, which replicas share).
func (rs *runs) outputOf(ctx context.Context, p authz.Principal, rec *runRecord) (outputReader, error) {
	rs.mu.Lock()
	rn := rs.byID[rec.view.ID]
	rs.mu.Unlock()
	if rn != nil {
		rn.mu.Lock()
		t := rn.task
		rn.mu.Unlock()
		if t != nil {
			return func(ctx context.Context, after uint64) ([]outputChunk, error) {
				cs, err := t.Output(ctx, after)
				return chunksOf(cs), err
			}, nil
		}
	}
	if rec.view.Status == runStarting || rec.view.Lease == "" || rec.view.Task == "" {
		return nil, nil
	}
	t, err := rs.s.sys.Leases().Task(ctx, p, rec.view.Lease, rec.view.Task)
	if errors.Is(err, errcode.ErrNotFound) {
		return nil, nil // its runner is not connected yet
	}
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, after uint64) ([]outputChunk, error) {
		cs, err := t.Output(ctx, after)
		return chunksOf(cs), err
	}, nil
}

// runOutput serves the output after event seq ?from=N (or Last-Event-ID):
// as server-sent events ("output" events, then "end" with the run) that
// follow the task until it ends, or as one JSON page. Any replica serves
// it, whichever holds the run.
func (s *server) runOutput(w http.ResponseWriter, r *http.Request) {
	p := principalOf(r)
	company, id := r.PathValue("company"), r.PathValue("id")
	rec, err := s.runs.get(r.Context(), p, company, id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	from := uint64(0)
	if f := r.URL.Query().Get("from"); f != "" {
		if from, err = strconv.ParseUint(f, 10, 64); err != nil {
			s.writeError(w, r, invalid("from", "want an event seq, got %q", f))
			return
		}
	}
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		if n, err := strconv.ParseUint(id, 10, 64); err == nil {
			from = n
		}
	}
	// current reads the run again, and its output reader once it has one.
	var out outputReader
	current := func(ctx context.Context) (*runRecord, error) {
		rec, err := s.runs.get(ctx, p, company, id)
		if err != nil {
			return nil, err
		}
		if out == nil {
			if out, err = s.runs.outputOf(ctx, p, rec); err != nil {
				return nil, err
			}
		}
		return rec, nil
	}
	if !wantsEvents(r) {
		// One page: what is stored after from, waiting briefly for a
		// running task's next chunk; Ended once the task's output is all
		// read.
		items, ended := []outputChunk{}, false
		if _, err := current(r.Context()); err != nil {
			s.writeError(w, r, err)
			return
		}
		if out != nil {
			ctx, cancel := context.WithTimeout(r.Context(), time.Second)
			cs, err := out(ctx, from)
			cancel()
			switch {
			case errors.Is(err, io.EOF):
				ended = true
			case err != nil && ctx.Err() == nil:
				s.writeError(w, r, err)
				return
			}
			items = cs
		} else {
			ended = rec.view.EndedAt != nil
		}
		s.writeJSON(w, r, http.StatusOK, struct {
			Items []outputChunk `json:"items"`
			Ended bool          `json:"ended"`
		}{items, ended})
		return
	}
	ev, release, err := s.openEvents(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	defer release()
	end := func() bool {
		rec, err := s.runs.get(r.Context(), p, company, id)
		if err != nil || rec.view.EndedAt == nil {
			return false
		}
		ev.send("end", "", rec.snapshot())
		return true
	}
	for {
		if out == nil {
			rec, err := current(r.Context())
			if err != nil {
				return
			}
			if out == nil {
				if rec.view.EndedAt != nil {
					ev.send("end", "", rec.snapshot())
					return
				}
				select {
				case <-r.Context().Done():
					return
				case <-s.closing:
					return
				case <-time.After(200 * time.Millisecond):
				}
				continue
			}
		}
		// Output waits for the next chunk: bounded, so that the end of
		// the run is seen even when no chunk or end of output comes.
		octx, cancel := context.WithTimeout(r.Context(), time.Second)
		cs, err := out(octx, from)
		cancel()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil && r.Context().Err() != nil {
			return
		}
		if err != nil && errors.Is(err, context.DeadlineExceeded) {
			select {
			case <-s.closing:
				return
			default:
			}
			if end() {
				return
			}
			continue
		}
		if err != nil {
			ev.send("error", "", struct {
				Error apiError `json:"error"`
			}{errorBody(err)})
			return
		}
		for _, c := range cs {
			if ev.send("output", strconv.FormatUint(c.Seq, 10), c) != nil {
				return
			}
		}
		from = cs[len(cs)-1].Seq
	}
	// The output ended: the run ends once its lease is released.
	for !end() {
		select {
		case <-r.Context().Done():
			return
		case <-s.closing:
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (s *server) stopRun(w http.ResponseWriter, r *http.Request) {
	p := principalOf(r)
	company, id := r.PathValue("company"), r.PathValue("id")
	rec, err := s.runs.get(r.Context(), p, company, id)
	if err == nil {
		// Stopping acts on the run's lease: the library decides.
		err = s.sys.Catalog().Authorize(r.Context(), p, authz.ActionLease,
			authz.Resource{Kind: authz.ResourceKindLease, ID: rec.view.Lease, Company: rec.view.Company})
	}
	s.audit(r, "run.stop", "", err, "run", id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	// The replica holding the run stops it: this one directly, another
	// through the request recorded on the run (its heartbeat reads it).
	if rec.view.EndedAt == nil && !s.runs.requestStop(id) {
		err = s.host.requestRunStop(r.Context(), id)
	}
	for err == nil {
		if rec, err = s.runs.get(r.Context(), p, company, id); err != nil || rec.view.EndedAt != nil {
			break
		}
		select {
		case <-r.Context().Done():
			err = r.Context().Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, rec.snapshot())
}

// stopAll refuses new runs, stops every run this replica holds with proof
// (each releases its ephemeral lease) and waits for them, within ctx.
func (rs *runs) stopAll(ctx context.Context) error {
	rs.mu.Lock()
	rs.closed = true
	rs.mu.Unlock()
	rs.cancel()
	done := make(chan struct{})
	go func() { rs.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return errors.New("server: runs still stopping at the shutdown deadline")
	}
}
