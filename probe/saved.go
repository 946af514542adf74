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
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/envhook"
	"github.com/berthdev/berth/internal/errmsg"
	"github.com/berthdev/berth/internal/leasehook"
	"github.com/berthdev/berth/internal/qualify"
	"github.com/berthdev/berth/internal/reason"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/qualification"
)

// Probe probes the saved environment envID for opts.Company.
//
// It authorizes first (ActionProbe: instance admins and local operators
// under DefaultPolicy; agents and board members are denied, PRB-7), then
// allocates a FRESH ephemeral lease through the lease Manager (never a
// reused one, PRB-3), runs the detection script in one Exec, reads the live
// image identity (sandbox drivers), releases the lease with Destroy and
// confirms cleanup. For host drivers (local, ssh) the lease is a host
// session: the result reports the host name and the verified working
// directory (PRB-1, PRB-2). For sandbox drivers it then evaluates the
// qualification (QUAL-1) and stores the record only when Evaluate says so;
// the result carries the diagnostic either way. Every Result, OK or not,
// is stored as the company's last test of the environment
// (qualification.LastTest, read back in Qualification's View).
//
// It returns an error only when the principal is denied (wrapping
// errcode.ErrDenied), the environment does not exist
// (errcode.ErrNotFound), the request is malformed (errcode.ErrInvalid) or the
// instance settings disable environments (instance.ErrEnvironmentsDisabled,
// CFG-9: nothing is measured or acquired). A host driver's target while
// the settings allow managed sandboxes only is a Result failed at the
// resolve stage with "managed_sandbox_only". Every
// failure of the target is a Result with OK false, a stable Code and the
// failed stage (PRB-5). A failed acquisition is a failed probe: nothing
// else is ever tried in its place (PRB-8).
func (p *Prober) Probe(ctx context.Context, pr authz.Principal, envID string, opts Request) (*Result, error) {
	v, err := p.load(ctx, pr, authz.ActionProbe, envID, opts.Company)
	if err != nil {
		return nil, err
	}
	if opts.Company == "" {
		return nil, fmt.Errorf("probe: environment %s: a company is required (the lease and qualification are company-bound): %w", envID, errcode.ErrInvalid)
	}
	// CFG-9: with environments disabled nothing is probed or measured.
	if err := envhook.Admit(p.gate, ctx, nil, nil); err != nil {
		return nil, fmt.Errorf("probe: environment %s (%q): %w", v.ID, v.Name, err)
	}
	r := p.newRun(v.Driver, opts.Progress)
	r.res.Environment, r.res.EnvironmentName = v.ID, v.Name
	r.res.Target = "provider " + v.Driver

	var (
		env *environment.Environment
		drv drivers.Driver
	)
	r.stage(ctx, stageResolve, func(ctx context.Context) (string, string, error) {
		if v.Status == environment.StatusArchived {
			return "", reason.Archived, fmt.Errorf("environment %s (%q) is archived; restore it to probe it", v.ID, v.Name)
		}
		e := &v.Environment // secret references only
		d, err := p.reg.Lookup(e.Driver)
		if err != nil {
			return "", "", err
		}
		// The secret values stay in the catalog; the lease manager resolves
		// them itself for the acquisition.
		sc, err := envhook.Scrubber(p.cat, ctx, pr, envID)
		if err != nil {
			return "", "", err
		}
		r.scrub = sc
		env, drv = e, d
		r.res.Target = targetOf(d, e.Config)
		// CFG-9, CAP-3: a host driver under managed-sandbox-only is
		// refused before its provider is measured.
		if err := envhook.AdmitEnvironment(p.gate, ctx, d, e); err != nil {
			return "", "", err
		}
		// CAP-3: measure the provider first (stored for every reader),
		// then pass the one gate that resolution and leases pass too.
		h, err := p.cat.RefreshHealth(ctx, pr, envID)
		if err != nil {
			return "", "", err
		}
		if h != nil && h.Status == environment.HealthUnavailable {
			return "", h.Code, &errcode.Error{Message: providerMessage(d.Name(), h.Endpoint, h.Code),
				Err: fmt.Errorf("provider %s at %s is unavailable: %s: %w", d.Name(), h.Endpoint, h.Reason, drivers.ErrUnavailable)}
		}
		if _, _, err := envhook.Check(p.gate, ctx, e, 0); err != nil {
			return "", "", err
		}
		note := fmt.Sprintf("driver %s (%s)", d.Name(), d.Capabilities().Kind)
		if h != nil {
			note += "; provider " + h.Endpoint + " available"
		}
		return note, "", nil
	})
	p.probeSaved(ctx, pr, r, env, drv, opts, false)
	invalidated := false
	if r.res.Code == reason.ImageNotFound && drv != nil && drv.Capabilities().Kind == drivers.KindSandbox {
		invalidated = p.invalidate(ctx, r, drv, env, opts.Company)
	}
	if drv != nil && drv.Capabilities().Kind == drivers.KindHost {
		diag := qualification.Diagnostic{Code: qualify.HostTarget,
			Message: fmt.Sprintf("driver %s is a host target: it has no image to qualify, so nothing was recorded", drv.Name())}
		r.res.QualificationDiagnostic = &diag
	} else {
		p.qualify(ctx, r, drv, env, opts.Company)
	}
	if invalidated {
		r.res.QualificationDiagnostic.Message += "; the recorded qualification of this image is now invalidated (QUAL-3)"
	}
	if r.res.Hostname != "" && drv != nil && drv.Capabilities().Kind == drivers.KindHost && r.res.Target == "host "+drv.Name() {
		r.res.Target = "host " + r.res.Hostname
	}
	r.res.Summary = summarize(r, drv)
	res := r.finish(ctx)
	p.recordLastTest(ctx, res, opts.Company)
	return res, nil
}

// recordLastTest stores res as the company's last test of its environment
// (qualification.LastTest), carrying the start of a run of failures over
// from the test before. A failed write is logged, and the result stands.
func (p *Prober) recordLastTest(ctx context.Context, res *Result, company string) {
	if res == nil || res.Environment == "" {
		return
	}
	t := qualification.LastTest{Company: company, Environment: res.Environment, At: res.StartedAt.UTC(),
		OK: res.OK, Code: res.Code, Message: res.Message}
	if res.OK {
		t.Code = ""
		if d := res.QualificationDiagnostic; d != nil {
			t.Code = d.Code
		}
	} else {
		t.FailingSince = t.At
		if prev, err := p.quals.GetLastTest(ctx, company, res.Environment); err == nil && !prev.OK && !prev.FailingSince.IsZero() {
			t.FailingSince = prev.FailingSince
		}
	}
	// The result is already scrubbed and bounded; the write outlives a
	// caller that went away meanwhile.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := p.quals.PutLastTest(ctx, t); err != nil {
		p.o.logger.LogAttrs(ctx, slog.LevelError, "recording the last test failed",
			slog.String("environment", res.Environment), slog.String("company", company), slog.String("error", err.Error()))
	}
}

// probeSaved runs the acquire, detect, image and release stages on a fresh
// ephemeral lease. After a failure the remaining stages are recorded as
// skipped; the release runs whenever something was acquired.
func (p *Prober) probeSaved(ctx context.Context, pr authz.Principal, r *run, env *environment.Environment, drv drivers.Driver, opts Request, draft bool) {
	purpose := "probe"
	if draft {
		purpose = "draft-probe"
	}
	var h *lease.Handle
	ok := r.stage(ctx, stageAcquire, func(ctx context.Context) (string, string, error) {
		req := lease.AcquireRequest{
			Company: opts.Company, Workspace: opts.Workspace,
			Policy:   lease.Ephemeral, // no Run: never coalesced with, or reusing, another lease
			Metadata: map[string]string{"purpose": purpose},
		}
		if draft {
			req = leasehook.Draft(req, env.Driver, env.Config).(lease.AcquireRequest)
		} else {
			req.EnvironmentID = env.ID
		}
		if opts.Runner {
			set, err := p.runnerSet()
			if err != nil {
				return "", "", err
			}
			req.Runner = set
		}
		var err error
		h, err = p.leases.Acquire(ctx, pr, req)
		if err != nil {
			if errors.Is(err, lease.ErrCleanupPending) {
				r.res.Cleanup = &Cleanup{LeaseStatus: lease.StatusPendingCleanup, PendingCleanup: true,
					Evidence: r.scrub.scrub("the failed start could not be cleaned up; a sweep retries it: " + err.Error())}
			}
			return "", "", err
		}
		r.res.LeaseID = h.ID()
		if h.Resumed() {
			// Cannot happen for an ephemeral lease without a run; refuse
			// rather than measure a reused sandbox (PRB-3).
			return "", reason.Internal, fmt.Errorf("lease %s resumed a recorded sandbox; a probe needs a fresh one", h.ID())
		}
		return fmt.Sprintf("fresh lease %s, sandbox %s", h.ID(), h.SandboxID()), "", nil
	})
	if h == nil {
		// Nothing to measure or release: say so rather than leave the
		// stages out.
		if opts.Runner {
			r.skip(stageRunner)
		} else {
			r.skip(stageDetect)
		}
		if drv != nil && drv.Capabilities().Kind == drivers.KindSandbox {
			r.skip(stageIsolation)
			r.skip(stageImage)
		}
		r.skip(stageRelease)
		return
	}
	switch {
	case ok && opts.Runner:
		p.measureByRunner(ctx, pr, r, drv, env.Config, h)
	case ok:
		p.measure(ctx, r, drv, env.Config, h)
	}
	// The release runs even after the probe's context ended, on its own
	// deadline (options.cleanupTimeout).
	r.stage(context.WithoutCancel(ctx), stageRelease, func(ctx context.Context) (string, string, error) {
		l, err := h.Release(ctx, lease.ReleaseOptions{Disposition: lease.Destroy})
		c := &Cleanup{}
		r.res.Cleanup = c
		if l != nil {
			c.LeaseStatus = l.Status
			c.Confirmed = l.Status == lease.StatusReleased && l.Cleanup == "confirmed"
			c.PendingCleanup = l.Status == lease.StatusPendingCleanup
			c.Evidence = l.CleanupEvidence
			if !c.Confirmed && l.FailureReason != "" {
				c.Evidence = l.FailureReason
			}
		}
		if draft && c.Confirmed {
			// The manager removes a draft's record once its cleanup is
			// proven (PRB-4); say so only if the store agrees.
			_, gerr := p.leases.Get(ctx, pr, h.ID())
			c.RecordRemoved = errors.Is(gerr, errcode.ErrNotFound)
		}
		if draft && !c.Confirmed {
			c.Evidence += "; the draft's pending_cleanup lease record (no secret) stays until a sweep proves the cleanup"
		}
		c.Evidence = r.scrub.scrub(c.Evidence)
		if err != nil || !c.Confirmed {
			c.Confirmed = false
			if err == nil {
				err = fmt.Errorf("lease %s ended %s without a confirmed cleanup", h.ID(), c.LeaseStatus)
			}
			if l == nil || errors.Is(err, lease.ErrCleanupPending) {
				c.PendingCleanup = true
			}
			return "", reason.CleanupFailed, err
		}
		return "cleanup confirmed: " + c.Evidence, "", nil
	})
}

// measure runs the detect stage, and the image stage for sandbox drivers.
func (p *Prober) measure(ctx context.Context, r *run, drv drivers.Driver, cfg config.Config, h *lease.Handle) {
	r.stage(ctx, stageDetect, func(ctx context.Context) (string, string, error) {
		res, err := h.Exec(ctx, lease.Command{Argv: qualify.DetectArgv(), OutputLimit: defaultOutputLimit})
		if err != nil {
			return "", "", err
		}
		// Host drivers verified their working directory at acquire; read it
		// (and the host name) from the driver's session, read-only.
		_ = h.Raw(func(sb any) error {
			switch s := sb.(type) {
			case interface{ Cwd() string }: // ssh: the remote cwd the server resolved
				r.res.Cwd = s.Cwd()
			case interface{ Dir() string }: // local
				r.res.Cwd = s.Dir()
			}
			if s, ok := sb.(interface{ Hostname() string }); ok {
				r.res.Hostname = s.Hostname()
			}
			return nil
		})
		det, perr := qualify.ParseDetection(string(res.Stdout))
		if perr != nil {
			if res.ExitCode != 0 {
				perr = fmt.Errorf("%w (the script exited %d: %s)", perr, res.ExitCode, clip(res.Stderr))
			}
			return "", "", perr
		}
		r.res.Platform = det.Platform
		if r.res.Hostname == "" {
			r.res.Hostname = det.Hostname
		}
		if r.res.Cwd == "" {
			r.res.Cwd = det.Cwd
		}
		note := det.Platform.String()
		if det.PrettyName != "" {
			note += " (" + det.PrettyName + ")"
		}
		for _, n := range det.Notes {
			note += "; " + n
		}
		measured := false
		if err := h.Raw(func(sb any) error {
			fm, ok := sb.(interface { // ssh: what the server forwards for the runner
				MeasureForwarding(ctx context.Context) (string, error)
			})
			if !ok {
				return nil
			}
			f, err := fm.MeasureForwarding(ctx)
			if err != nil {
				return err
			}
			r.res.Forwarding, measured = f, true
			return nil
		}); err != nil {
			return "", "", err
		}
		if measured {
			note += "; the server forwards for the runner: " + r.res.Forwarding
		}
		return note, "", nil
	})
	p.measureIsolation(ctx, r, drv, cfg, h)
	p.measureImage(ctx, r, drv, h)
}

// measureImage runs the image stage for sandbox drivers.
func (p *Prober) measureImage(ctx context.Context, r *run, drv drivers.Driver, h *lease.Handle) {
	if drv.Capabilities().Kind != drivers.KindSandbox {
		return
	}
	r.stage(ctx, stageImage, func(ctx context.Context) (string, string, error) {
		id, err := leasehook.ImageIdentity(h, ctx)
		if errors.Is(err, drivers.ErrUnsupported) {
			return fmt.Sprintf("driver %s does not report the live image identity", drv.Name()), "", nil
		}
		if err != nil {
			return "", "", err
		}
		r.res.ImageIdentity = id
		return "live image " + id.String(), "", nil
	})
}

// qualify runs the qualify stage: evaluate the evidence of a saved sandbox
// probe and store the record when every QUAL-1 condition held. After a
// failed stage it evaluates nothing: the stage is skipped and the
// diagnostic names the first failure ("probe_failed").
func (p *Prober) qualify(ctx context.Context, r *run, drv drivers.Driver, env *environment.Environment, company string) {
	if !r.res.OK {
		st, _ := r.failedStage()
		diag := qualification.Diagnostic{Code: qualify.ProbeFailed,
			Message: fmt.Sprintf("the probe failed at stage %s (%s), so nothing was qualified", st.Name, st.Code)}
		if st.Name == stageRelease {
			// Every measurement ran: Evaluate names the condition that
			// failed (cleanup_not_confirmed), and never records.
			if _, d := p.evaluate(r, drv, env, company); d.Code != qualify.Recorded {
				diag = d
			}
		}
		diag.Message = r.scrub.scrub(diag.Message)
		r.res.QualificationDiagnostic = &diag
		r.skip(stageQualify)
		return
	}
	r.stage(ctx, stageQualify, func(ctx context.Context) (string, string, error) {
		rec, diag := p.evaluate(r, drv, env, company)
		if diag.Code == qualify.Recorded {
			if err := p.quals.PutQualification(ctx, rec); err != nil {
				diag = qualification.Diagnostic{Code: qualify.RecordFailed, Message: "every condition held, but storing the record failed; probe again"}
				r.res.QualificationDiagnostic = &diag
				return "", reason.Internal, err
			}
			r.res.PlatformQualificationRecorded = true
		}
		diag.Message = r.scrub.scrub(diag.Message)
		r.res.QualificationDiagnostic = &diag
		return diag.String(), "", nil
	})
}

func clip(b []byte) string {
	const n = 200
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}

// evaluate applies qualify.Evaluate to the evidence r collected.
func (p *Prober) evaluate(r *run, drv drivers.Driver, env *environment.Environment, company string) (qualification.Record, qualification.Diagnostic) {
	subj, imgProblem := subjectOf(drv, env, company)
	ev := qualify.Evidence{
		LiveImage:        r.res.ImageIdentity,
		Platform:         r.res.Platform,
		CleanupConfirmed: r.res.Cleanup != nil && r.res.Cleanup.Confirmed,
		LeaseID:          r.res.LeaseID,
		At:               p.o.clock.Now(),
		Isolation:        r.res.Isolation,
	}
	rec, diag := qualify.Evaluate(subj, ev)
	if diag.Code == qualify.ImageNotPinned && imgProblem != "" {
		diag.Message = imgProblem
	}
	return rec, diag
}

// invalidate records, on the company's qualification record of env, that
// the provider reported the qualified identity gone (QUAL-3), so that reads
// say invalidated with the reason and time. Only a record that applies to
// the environment as configured now is marked (a stale one already reads
// stale); an inactive identity (drivers.ErrImageInactive) is not gone and
// never gets here. It reports whether a record was marked; a failed write
// is logged, and the probe's result stands.
func (p *Prober) invalidate(ctx context.Context, r *run, drv drivers.Driver, env *environment.Environment, company string) bool {
	rec, err := p.quals.GetQualification(ctx, company, env.ID)
	if err != nil {
		return false
	}
	subj, _ := subjectOf(drv, env, company)
	if ok, _ := qualify.Valid(rec, subj); !ok {
		return false
	}
	at := p.o.clock.Now()
	reason := fmt.Sprintf("a probe at %s found image %s gone: the provider reported it not found", at.UTC().Format(time.RFC3339), rec.Image)
	// The platform and time of the original record stay for its history;
	// it never applies again (QUAL-3).
	rec.InvalidatedAt, rec.InvalidReason = at.UTC(), reason
	if err := p.quals.PutQualification(ctx, rec); err != nil {
		p.o.logger.LogAttrs(ctx, slog.LevelError, "recording an invalidated qualification failed",
			slog.String("environment", env.ID), slog.String("company", company), slog.String("error", err.Error()))
		return false
	}
	return true
}

// providerMessage is the sentence for a person about a provider whose
// health check failed with code: the provider by name and endpoint, and
// what to check.
func providerMessage(driver, endpoint string, code string) string {
	name := driver
	if name != "" {
		name = strings.ToUpper(name[:1]) + name[1:]
	}
	at, _, _ := strings.Cut(endpoint, " ") // the endpoint, without the account reference
	switch code {
	case reason.AuthFailed:
		return errmsg.Sentence(fmt.Sprintf("%s at %s refused the credentials: check the API key and its organization", name, at))
	case reason.TLSUnverified:
		return errmsg.Sentence(fmt.Sprintf("The certificate of %s at %s failed verification: check the endpoint and the certificate it trusts", name, at))
	case reason.Timeout:
		return errmsg.Sentence(fmt.Sprintf("%s at %s did not answer in time: try again later", name, at))
	case reason.ProviderUnavailable, reason.Unreachable:
		return errmsg.Sentence(fmt.Sprintf("%s at %s cannot be reached: check that it is running and the endpoint setting", name, at))
	}
	return errmsg.Sentence(fmt.Sprintf("%s at %s cannot be used now: try again later", name, at))
}
