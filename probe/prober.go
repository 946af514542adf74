package probe

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/instance"
	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/internal/errmsg"
	"github.com/berthdev/berth/internal/leasehook"
	"github.com/berthdev/berth/internal/probehook"
	"github.com/berthdev/berth/internal/qualify"
	"github.com/berthdev/berth/internal/reason"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/qualification"
)

// The stage deadlines and the detection output cap (see options).
const (
	// defaultCleanupTimeout bounds the release of a probe's lease.
	defaultCleanupTimeout = time.Minute
	// defaultResolveTimeout bounds the resolve stage (store reads, config
	// validation, secret resolution).
	defaultResolveTimeout = 30 * time.Second
	// defaultAcquireTimeout bounds the acquire stage: opening the host
	// session or allocating the sandbox, retries included.
	defaultAcquireTimeout = 5 * time.Minute
	// defaultDetectTimeout bounds the detection script's one Exec.
	defaultDetectTimeout = 2 * time.Minute
	// defaultRunnerTimeout bounds a runner-based probe's runner stage:
	// installing the runner, launching it and its hello.
	defaultRunnerTimeout = 2 * time.Minute
	// defaultImageTimeout bounds reading the live image identity.
	defaultImageTimeout = 30 * time.Second
	// defaultQualifyTimeout bounds evaluating and storing the qualification.
	defaultQualifyTimeout = 30 * time.Second
	// defaultOutputLimit caps the detection script's output.
	defaultOutputLimit = 64 << 10
)

// options configure a Prober (berth.New sets logger and runner through
// internal/probehook; tests the rest). nil means defaults.
//
// Every stage runs on its own deadline (PRB-5): resolve 30 s, acquire 5
// min (retries included), detect 2 min, runner 2 min (install, launch,
// hello), image 30 s, qualify 30 s, and the release 1 min, which runs even
// after the probe's context ended. A stage that runs past its deadline
// fails with "timeout" and an error naming the stage and the
// target; the stages after it are skipped, and the release still runs.
// The caller's context bounds every stage but the release.
type options struct {
	// logger receives one line per probe (target, code, duration); never a
	// secret or a config value. Default: discard.
	logger *slog.Logger
	// runner configures runner-based probes (Request.Runner). Default nil:
	// they fail as unsupported.
	runner *runnerProbe

	// clock stamps results and evidence. Default the wall clock. Stage
	// durations are always measured on the wall clock.
	clock clock.Clock
	// cleanupTimeout bounds the release stage (tests shorten it). Default
	// defaultCleanupTimeout.
	cleanupTimeout time.Duration
	// stageTimeouts bound the other stages (tests shorten them).
	stageTimeouts stageTimeouts
}

// stageTimeouts are the deadlines of the probe stages other than release
// (see options.cleanupTimeout). A zero field takes its default. The
// caller's context still bounds every stage but the release.
type stageTimeouts struct {
	Resolve time.Duration // default defaultResolveTimeout
	Acquire time.Duration // default defaultAcquireTimeout
	Detect  time.Duration // default defaultDetectTimeout
	Image   time.Duration // default defaultImageTimeout
	Runner  time.Duration // default defaultRunnerTimeout
	Qualify time.Duration // default defaultQualifyTimeout
}

// of returns the deadline of stage n.
func (t stageTimeouts) of(n string, cleanup time.Duration) time.Duration {
	pick := func(d, def time.Duration) time.Duration {
		if d > 0 {
			return d
		}
		return def
	}
	switch n {
	case stageResolve:
		return pick(t.Resolve, defaultResolveTimeout)
	case stageAcquire:
		return pick(t.Acquire, defaultAcquireTimeout)
	case stageDetect, stageIsolation:
		return pick(t.Detect, defaultDetectTimeout)
	case stageImage:
		return pick(t.Image, defaultImageTimeout)
	case stageRunner:
		return pick(t.Runner, defaultRunnerTimeout)
	case stageRelease:
		return cleanup
	default:
		return pick(t.Qualify, defaultQualifyTimeout)
	}
}

// Request says for whom and where one probe runs (Prober.Probe).
type Request struct {
	// Company is the tenant the probe's lease and qualification are for
	// (QUAL-4). Required for saved environments.
	Company string
	// Workspace is a working directory hint for host drivers; "" uses the
	// environment's configured directory.
	Workspace string
	// Runner probes through berth's runner instead of the detection
	// script's Exec (PRP-8): the lease is acquired to host a runner, the
	// runner starts under a short-lived probe identity that answers hello
	// and refuses every task, and its hello's platform (measured in the
	// sandbox by the same detection parser) and version are the probe's
	// evidence (stage stageRunner). Needs a runner controller (berth.New
	// gives the System's); without it the probe fails at acquire with
	// "unsupported".
	Runner bool
	// Progress, if not nil, is called when each stage of this probe starts
	// (running true, only the stage's Name set) and when it ends or is
	// skipped (running false, the stage as the Result will hold it), from
	// the probing goroutine, so that a CLI can show progress. It must not
	// block for long.
	Progress func(st Stage, running bool)
}

// Prober probes execution targets (PRB-1..8): saved environments through a
// fresh ephemeral lease of the lease Manager, and unsaved drafts directly
// through their driver. It is safe for concurrent use.
type Prober struct {
	cat    *environment.Catalog
	envs   environment.Store
	gate   any // what envhook.NewGate returns
	reg    *drivers.Registry
	leases *lease.Manager
	quals  qualification.Store
	o      options
}

// sources are what a Prober reads and acts through (internal/probehook
// documents each).
type sources = probehook.Sources

func init() {
	probehook.New = func(src probehook.Sources) any {
		o := &options{logger: src.Logger}
		if src.Controller != nil && src.Runners != nil {
			o.runner = &runnerProbe{controller: src.Controller, runners: src.Runners}
		}
		return newProber(src, o)
	}
}

// newProber returns a Prober over src. It panics if a required field of
// src is nil (a programming error of berth).
func newProber(src sources, opts *options) *Prober {
	if src.Catalog == nil || src.Environments == nil || src.Gate == nil || src.Drivers == nil || src.Leases == nil || src.Qualifications == nil {
		panic("probe: a Prober needs a catalog, its environments, a gate, a driver registry, a lease manager and a qualification store")
	}
	cat, reg, leases, quals := src.Catalog, src.Drivers, src.Leases, src.Qualifications
	var o options
	if opts != nil {
		o = *opts
	}
	if o.clock == nil {
		o.clock = clock.Real{}
	}
	if o.logger == nil {
		o.logger = slog.New(slog.DiscardHandler)
	}
	if o.cleanupTimeout <= 0 {
		o.cleanupTimeout = defaultCleanupTimeout
	}
	return &Prober{cat: cat, envs: src.Environments, gate: src.Gate, reg: reg, leases: leases, quals: quals, o: o}
}

// authorize decides with the catalog's Authorizer (PRB-7); a refusal wraps
// errcode.ErrDenied.
func (p *Prober) authorize(ctx context.Context, pr authz.Principal, a authz.Action, r authz.Resource) error {
	err := p.cat.Authorize(ctx, pr, a, r)
	if err == nil {
		return nil
	}
	p.o.logger.LogAttrs(ctx, slog.LevelWarn, "probe denied",
		slog.String("action", string(a)), slog.String("resource", r.String()),
		slog.String("actor", pr.ID), slog.String("role", string(pr.Role)))
	return err
}

// load authorizes action a on environment id for company and reads it.
// A principal who may not perform a at all is denied before anything is
// read, so that existence does not leak; a missing environment is an error
// wrapping errcode.ErrNotFound. The View names the environment even when
// its config can no longer be resolved.
func (p *Prober) load(ctx context.Context, pr authz.Principal, a authz.Action, id, company string) (*environment.View, error) {
	if err := p.authorize(ctx, pr, a, authz.Resource{Kind: authz.ResourceKindEnvironment, ID: id, Company: company}); err != nil {
		return nil, err
	}
	v, err := p.cat.Get(ctx, pr, id)
	if err != nil {
		return nil, fmt.Errorf("probe: environment %s: %w", id, err)
	}
	r := authz.Resource{Kind: authz.ResourceKindEnvironment, ID: v.ID, Name: v.Name, Driver: v.Driver, Company: company}
	if err := p.authorize(ctx, pr, a, r); err != nil {
		return nil, err
	}
	return v, nil
}

// run is one probe in progress: the Result it builds and its stage runner.
type run struct {
	p     *Prober
	res   *Result
	scrub scrubber
	start time.Time
	// draft is set for ProbeDraft's run.
	draft bool
	// progress is Request.Progress.
	progress func(Stage, bool)
}

func (p *Prober) newRun(driver string, progress func(Stage, bool)) *run {
	return &run{p: p, start: time.Now(), progress: progress, res: &Result{Driver: driver, OK: true, Code: reason.OK, StartedAt: p.o.clock.Now(), Stages: []Stage{}}}
}

// errStageDeadline is the cause of a stage's deadline.
var errStageDeadline = errors.New("stage deadline")

// stage runs fn as stage n on a context bounded by the stage's deadline,
// times it, reports progress and records it. A failure marks the probe
// failed; the first failure sets the Result's code. code, if not "",
// overrides the code derived from the error. A stage whose deadline fired
// fails with "timeout" and an error naming the stage and the
// target, whatever the error fn returned. Once the probe has failed, every
// later stage but the release is recorded as skipped and fn is not called.
func (r *run) stage(ctx context.Context, n string, fn func(ctx context.Context) (note string, code string, err error)) bool {
	if !r.res.OK && n != stageRelease {
		r.skip(n)
		return false
	}
	if r.progress != nil {
		r.progress(Stage{Name: n}, true)
	}
	limit := r.p.o.stageTimeouts.of(n, r.p.o.cleanupTimeout)
	t0 := time.Now() // before the deadline is set, so t0+limit is not after it
	sctx, cancel := context.WithTimeoutCause(ctx, limit, errStageDeadline)
	defer cancel()
	note, code, err := fn(sctx)
	s := Stage{Name: n, Duration: time.Since(t0), OK: err == nil, Note: r.scrub.scrub(note)}
	if err != nil {
		// The stage's own deadline fired (a driver may notice it through
		// a socket deadline a moment before sctx reports done).
		if ctx.Err() == nil && (errors.Is(context.Cause(sctx), errStageDeadline) || !time.Now().Before(t0.Add(limit))) {
			code = reason.Timeout
			err = fmt.Errorf("stage %s on %s ran past its deadline of %s: %w", n, r.res.Target, limit, err)
		}
		if code == "" {
			code = codeOf(err)
		}
		s.Code, s.Error = code, r.scrub.scrub(err.Error())
		s.Message = r.scrub.scrub(r.stageMessage(n, err))
		r.fail(code)
	}
	r.res.Stages = append(r.res.Stages, s)
	if r.progress != nil {
		r.progress(s, false)
	}
	return err == nil
}

// stageMessage is the sentence for a person about stage n's err: the
// error's own message (errcode.MessageOf), prefixed with what was probed
// when it does not name the target.
func (r *run) stageMessage(n string, err error) string {
	m := errcode.MessageOf(err)
	generic := errcode.MessageOf(&errcode.Error{Code: errcode.Code(err), Target: errcode.TargetOf(err)})
	_, addr, _ := strings.Cut(r.res.Target, "@")
	if m != generic || r.res.Target != "" && (strings.Contains(m, r.res.Target) || addr != "" && strings.Contains(m, addr)) {
		// A message written where the cause is known names its target.
		return errmsg.Sentence(m)
	}
	what := r.res.Target
	if r.res.EnvironmentName != "" {
		what = fmt.Sprintf("environment %q (%s)", r.res.EnvironmentName, r.res.Target)
	}
	return errmsg.Sentence(fmt.Sprintf("Probe of %s failed at %s: %s", what, n, m))
}

// skip records stage n as skipped because an earlier stage failed.
func (r *run) skip(n string) {
	first, _ := r.failedStage()
	s := Stage{Name: n, Note: fmt.Sprintf("skipped: stage %s failed (%s)", first.Name, first.Code)}
	r.res.Stages = append(r.res.Stages, s)
	if r.progress != nil {
		r.progress(s, false)
	}
}

func (r *run) fail(code string) {
	if r.res.OK {
		r.res.OK, r.res.Code = false, code
	}
}

// finish stamps the duration and logs the probe.
func (r *run) finish(ctx context.Context) *Result {
	r.res.Duration = time.Since(r.start)
	r.res.Summary = r.scrub.scrub(r.res.Summary)
	r.res.Message = r.scrub.scrub(r.res.Message)
	r.p.o.logger.LogAttrs(ctx, slog.LevelInfo, "probe finished",
		slog.String("environment", r.res.Environment), slog.String("driver", r.res.Driver),
		slog.String("target", r.res.Target), slog.Bool("ok", r.res.OK), slog.String("code", string(r.res.Code)),
		slog.Bool("qualified", r.res.PlatformQualificationRecorded), slog.Duration("duration", r.res.Duration))
	return r.res
}

// failedStage returns the first failed stage (a skipped one has no code).
func (r *run) failedStage() (Stage, bool) {
	for _, s := range r.res.Stages {
		if !s.OK && s.Code != "" {
			return s, true
		}
	}
	return Stage{}, false
}

// codeOf maps an error to a stable code: the drivers' mapping, plus the
// lease and probe errors it does not know.
func codeOf(err error) string {
	switch {
	case errors.Is(err, qualify.ErrDetection):
		return reason.PlatformUnknown
	case errors.Is(err, leasehook.ErrStartupBudget):
		return reason.Timeout
	case errors.Is(err, instance.ErrManagedSandboxOnly):
		return reason.ManagedSandboxOnly
	case errors.Is(err, instance.ErrEnvironmentsDisabled):
		return reason.EnvironmentsDisabled
	}
	if r := errcode.ReasonOf(err); r == reason.IsolationBelowMinimum || r == reason.IsolationMismatch {
		return r
	}
	return reason.Of(err)
}
