package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/prp"
	"github.com/berthdev/berth/prp/controller"
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
	// (started, not ended) of one company and of one principal in this
	// server process (defaults 8 and 4).
	maxRunsPerCompany, maxRunsPerPrincipal int
	// runTimeout is the deadline of a run that names none (default 15
	// min; at most maxRunTimeout).
	runTimeout time.Duration
	// runRetention is how long an ended run stays readable (default 24 h).
	runRetention time.Duration
	// sweepInterval is the maintenance timers' period (jittered); 0 runs
	// no timer (only POST /api/v1/sweep sweeps).
	sweepInterval time.Duration
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
}

// runView is what GET …/runs/{id} shows.
type runView struct {
	ID          string             `json:"id"`
	Company     string             `json:"company"`
	Environment string             `json:"environmentId,omitempty"`
	Status      string             `json:"status"`
	Lease       string             `json:"leaseId,omitempty"`
	Task        string             `json:"taskId,omitempty"`
	Exit        *prp.Exit          `json:"exit,omitempty"`
	Error       *apiError          `json:"error,omitempty"`
	Proofs      []controller.Proof `json:"proofs,omitempty"`
	Receipt     *lease.Lease       `json:"receipt,omitempty"`
	CreatedAt   time.Time          `json:"createdAt"`
	// Deadline is when the run's task is stopped (timeoutSeconds, else
	// -run-timeout; never more than an hour after its start).
	Deadline time.Time  `json:"deadline"`
	EndedAt  *time.Time `json:"endedAt,omitempty"`
}

// run is one run the server started.
type taskRun struct {
	mu     sync.Mutex
	view   runView
	owner  authz.Principal
	task   *controller.Task
	cancel context.CancelFunc
	done   chan struct{}
	stop   chan struct{} // closed by a stop request
	// free gives the run's place under the caps back (once).
	free func()
}

func (r *taskRun) snapshot() runView {
	r.mu.Lock()
	defer r.mu.Unlock()
	v := r.view
	v.Proofs = append([]controller.Proof(nil), v.Proofs...)
	return v
}

// runs are the runs of this server process.
type runs struct {
	s    *server
	mu   sync.Mutex
	byID map[string]*taskRun
	// inFlight counts the runs not ended, per company and per principal
	// ("c:COMPANY", "p:PRINCIPAL"), taken before the lease is acquired.
	inFlight map[string]int
	closed   bool
	wg       sync.WaitGroup
	base     context.Context
	cancel   context.CancelFunc
}

func newRuns(s *server) *runs {
	ctx, cancel := context.WithCancel(context.Background())
	return &runs{s: s, byID: map[string]*taskRun{}, inFlight: map[string]int{}, base: ctx, cancel: cancel}
}

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

// start leases the target (authorized by the library for p) and then, in
// the background, attaches the runner, starts the task, waits for it and
// releases the lease (destroy), whose receipt the run keeps.
func (rs *runs) start(ctx context.Context, p authz.Principal, company string, body runBody) (*taskRun, error) {
	set, err := rs.s.sys.RunnerSet()
	if err != nil {
		return nil, err
	}
	id, err := prp.NewID("run")
	if err != nil {
		return nil, err
	}
	req := lease.AcquireRequest{Company: company, Run: id, Workspace: body.Workspace, Runner: set, Policy: lease.Ephemeral}
	if body.EnvironmentID != "" {
		req.EnvironmentID = body.EnvironmentID
	} else {
		req.Scope = &authz.Scope{Company: company, Workspace: body.Workspace, Project: body.Project, Agent: body.Agent}
	}
	rs.prune(time.Now())
	lim := rs.s.limits
	ck, pk := "c:"+company, "p:"+p.String()
	rs.mu.Lock()
	if rs.closed {
		rs.mu.Unlock()
		return nil, errShuttingDown
	}
	switch {
	case rs.inFlight[ck] >= lim.maxRunsPerCompany:
		rs.mu.Unlock()
		return nil, &errcode.Error{Message: fmt.Sprintf("Company %s has %d runs in flight, its limit: retry once one has ended.", company, rs.inFlight[ck]),
			Err: fmt.Errorf("%w: company %q has %d runs in flight (-max-runs-per-company %d); retry once one ended", errTooManyRuns, company, rs.inFlight[ck], lim.maxRunsPerCompany)}
	case rs.inFlight[pk] >= lim.maxRunsPerPrincipal:
		rs.mu.Unlock()
		return nil, &errcode.Error{Message: fmt.Sprintf("You have %d runs in flight, your limit: retry once one has ended.", rs.inFlight[pk]),
			Err: fmt.Errorf("%w: %s has %d runs in flight (-max-runs-per-principal %d); retry once one ended", errTooManyRuns, p, rs.inFlight[pk], lim.maxRunsPerPrincipal)}
	}
	rs.inFlight[ck]++
	rs.inFlight[pk]++
	rs.wg.Add(1)
	rs.mu.Unlock()
	var freeOnce sync.Once
	free := func() {
		freeOnce.Do(func() {
			rs.mu.Lock()
			for _, k := range []string{ck, pk} {
				if rs.inFlight[k]--; rs.inFlight[k] <= 0 {
					delete(rs.inFlight, k)
				}
			}
			rs.mu.Unlock()
		})
	}
	h, err := rs.s.sys.Leases().Acquire(ctx, p, req)
	if err != nil {
		free()
		rs.wg.Done()
		return nil, err
	}
	timeout := time.Duration(body.TimeoutSeconds) * time.Second
	if timeout <= 0 {
		timeout = lim.runTimeout
	}
	now := time.Now().UTC()
	deadline := now.Add(timeout)
	// The server holds the run to its deadline even if the runner does
	// not: past it (and a margin for the stop) the task is stopped.
	rctx, cancel := context.WithDeadline(rs.base, deadline.Add(runDeadlineMargin))
	rn := &taskRun{
		view:  runView{ID: id, Company: company, Environment: h.Lease().Environment, Status: runStarting, Lease: h.ID(), CreatedAt: now, Deadline: deadline},
		owner: p, cancel: cancel, done: make(chan struct{}), stop: make(chan struct{}), free: free,
	}
	rs.mu.Lock()
	rs.byID[id] = rn
	rs.mu.Unlock()
	go func() {
		defer rs.wg.Done()
		defer free()
		defer close(rn.done)
		defer cancel()
		rs.execute(rctx, rn, h, body.Argv, deadline)
	}()
	return rn, nil
}

// runDeadlineMargin is how long past its deadline the server waits for a
// run's task to end by itself before it stops it.
const runDeadlineMargin = 30 * time.Second

// prune forgets the runs that ended before now minus -run-retention.
func (rs *runs) prune(now time.Time) int {
	cut := now.Add(-rs.s.limits.runRetention)
	rs.mu.Lock()
	defer rs.mu.Unlock()
	n := 0
	for id, rn := range rs.byID {
		rn.mu.Lock()
		old := rn.view.EndedAt != nil && rn.view.EndedAt.Before(cut)
		rn.mu.Unlock()
		if old {
			delete(rs.byID, id)
			n++
		}
	}
	return n
}

// execute runs the task of rn on h and releases h.
func (rs *runs) execute(ctx context.Context, rn *taskRun, h *lease.Handle, argv []string, deadline time.Time) {
	fail := func(err error) {
		rn.mu.Lock()
		e := errorBody(err)
		rn.view.Error, rn.view.Status = &e, runFailed
		rn.mu.Unlock()
	}
	defer func() {
		rctx, c := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer c()
		l, err := h.Release(rctx, lease.ReleaseOptions{Disposition: lease.Destroy})
		now := time.Now().UTC()
		rn.free() // the run's place under the caps is free before it reads as ended
		rn.mu.Lock()
		rn.view.Receipt, rn.view.EndedAt = l, &now
		if err != nil && rn.view.Error == nil {
			e := errorBody(fmt.Errorf("release lease %s: %w", h.ID(), err))
			rn.view.Error = &e
		}
		rn.mu.Unlock()
	}()
	actx, acancel := context.WithTimeout(ctx, attachTimeout)
	att, err := rs.s.sys.Runners().Attach(actx, rn.owner, h, controller.AttachRequest{Run: rn.view.ID})
	acancel()
	if err != nil {
		fail(err)
		return
	}
	spec := controller.TaskSpec{TaskStart: prp.TaskStart{Argv: argv}, StopGrace: 2 * time.Second}
	spec.Deadline = deadline
	if spec.TaskID, err = prp.NewID("task"); err != nil {
		fail(err)
		return
	}
	task, err := att.Start(ctx, rn.owner, spec)
	if err != nil {
		fail(err)
		return
	}
	rn.mu.Lock()
	rn.task, rn.view.Task, rn.view.Status = task, task.ID(), runRunning
	rn.mu.Unlock()
	type outcome struct {
		exit prp.Exit
		err  error
	}
	done := make(chan outcome, 1)
	go func() {
		exit, err := task.Wait(context.WithoutCancel(ctx))
		done <- outcome{exit, err}
	}()
	select {
	case o := <-done:
		if o.err != nil {
			fail(o.err)
			return
		}
		rn.mu.Lock()
		rn.view.Exit, rn.view.Status = &o.exit, runExited
		rn.mu.Unlock()
		return
	case <-ctx.Done():
	case <-rn.stop:
	}
	// Stopped (a stop request or shutdown): stop with proof, then wait
	// for the exit the runner stores.
	sctx, c := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	p, err := task.Stop(sctx)
	c()
	rn.mu.Lock()
	if p.TaskID != "" {
		rn.view.Proofs = append(rn.view.Proofs, p)
	}
	rn.view.Status = runStopped
	rn.mu.Unlock()
	if err != nil {
		fail(fmt.Errorf("stop task %s: %w", task.ID(), err))
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

// get returns run id of company that p may read: its owner's, or any for
// instance admins and local operators (the lease's authorization decides
// the rest).
func (rs *runs) get(ctx context.Context, p authz.Principal, company, id string) (*taskRun, error) {
	rs.mu.Lock()
	rn := rs.byID[id]
	rs.mu.Unlock()
	if rn == nil || rn.view.Company != company {
		return nil, fmt.Errorf("run %s: %w", id, errRunNotFound)
	}
	// The library decides: p must be able to read the run's lease.
	if _, err := rs.s.sys.Leases().Get(ctx, p, rn.view.Lease); err != nil {
		return nil, fmt.Errorf("run %s: %w", id, errRunNotFound)
	}
	return rn, nil
}

func (s *server) getRun(w http.ResponseWriter, r *http.Request) {
	rn, err := s.runs.get(r.Context(), principalOf(r), r.PathValue("company"), r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, rn.snapshot())
}

// outputChunk is one piece of a run's output.
type outputChunk struct {
	Seq       uint64 `json:"seq"`
	Stream    string `json:"stream"`
	Offset    int64  `json:"offset"`
	Text      string `json:"text"`
	Truncated int64  `json:"truncated,omitempty"`
}

func chunksOf(cs []controller.OutputChunk) []outputChunk {
	out := []outputChunk{}
	for _, c := range cs {
		out = append(out, outputChunk{Seq: c.Seq, Stream: string(c.Stream), Offset: c.Offset, Text: string(c.Data), Truncated: c.Truncated})
	}
	return out
}

// runOutput serves the output after event seq ?from=N (or Last-Event-ID):
// as server-sent events ("output" events, then "end" with the run) that
// follow the task until it ends, or as one JSON page.
func (s *server) runOutput(w http.ResponseWriter, r *http.Request) {
	rn, err := s.runs.get(r.Context(), principalOf(r), r.PathValue("company"), r.PathValue("id"))
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
	taskOf := func() *controller.Task {
		rn.mu.Lock()
		defer rn.mu.Unlock()
		return rn.task
	}
	if !wantsEvents(r) {
		// One page: what is stored after from, waiting briefly for a
		// running task's next chunk; Ended once the task's output is all
		// read.
		out, ended := []outputChunk{}, false
		if t := taskOf(); t != nil {
			ctx, cancel := context.WithTimeout(r.Context(), time.Second)
			cs, err := t.Output(ctx, from)
			cancel()
			switch {
			case errors.Is(err, io.EOF):
				ended = true
			case err != nil && ctx.Err() == nil:
				s.writeError(w, r, err)
				return
			}
			out = chunksOf(cs)
		} else {
			select {
			case <-rn.done:
				ended = true
			default:
			}
		}
		s.writeJSON(w, r, http.StatusOK, struct {
			Items []outputChunk `json:"items"`
			Ended bool          `json:"ended"`
		}{out, ended})
		return
	}
	ev, release, err := s.openEvents(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	defer release()
	for {
		t := taskOf()
		if t == nil {
			select {
			case <-r.Context().Done():
				return
			case <-s.closing:
				return
			case <-rn.done:
				if taskOf() == nil {
					ev.send("end", "", rn.snapshot())
					return
				}
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		// Output waits for the next chunk: bounded, so that the end of
		// the run is seen even when no chunk or end of output comes.
		octx, cancel := context.WithTimeout(r.Context(), time.Second)
		cs, err := t.Output(octx, from)
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
			case <-rn.done:
				ev.send("end", "", rn.snapshot())
				return
			default:
				continue
			}
		}
		if err != nil {
			ev.send("error", "", struct {
				Error apiError `json:"error"`
			}{errorBody(err)})
			return
		}
		for _, c := range chunksOf(cs) {
			if ev.send("output", strconv.FormatUint(c.Seq, 10), c) != nil {
				return
			}
		}
		from = cs[len(cs)-1].Seq
	}
	select {
	case <-rn.done:
		ev.send("end", "", rn.snapshot())
	case <-r.Context().Done():
	}
}

func (s *server) stopRun(w http.ResponseWriter, r *http.Request) {
	rn, err := s.runs.get(r.Context(), principalOf(r), r.PathValue("company"), r.PathValue("id"))
	if err == nil {
		// Stopping acts on the run's lease: the library decides.
		err = s.sys.Catalog().Authorize(r.Context(), principalOf(r), authz.ActionLease,
			authz.Resource{Kind: authz.ResourceKindLease, ID: rn.view.Lease, Company: rn.view.Company})
	}
	s.audit(r, "run.stop", "", err, "run", r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	rn.mu.Lock()
	select {
	case <-rn.stop:
	default:
		close(rn.stop)
	}
	rn.mu.Unlock()
	select {
	case <-rn.done:
	case <-r.Context().Done():
		s.writeError(w, r, r.Context().Err())
		return
	}
	s.writeJSON(w, r, http.StatusOK, rn.snapshot())
}

// stopAll refuses new runs, stops every run in flight with proof (each
// releases its ephemeral lease) and waits for them, within ctx.
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
