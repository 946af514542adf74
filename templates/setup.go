package templates

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/envhook"
	"github.com/berthdev/berth/internal/secretcfg"
	"github.com/berthdev/berth/internal/setupscript"
	"github.com/berthdev/berth/lease"
)

// metaSetupSession is the lease metadata key naming the setup session a
// setup lease belongs to; the lease's Run is the session id too, so a
// sweep finds the sandbox of a session that crashed before recording it.
const metaSetupSession = "berth.setup-session"

// SetupRequest starts a setup session (Service.Setup). The zero
// SetupRequest is refused before anything is allocated: it names no
// environment, and a setup needs a Script or Interactive. A session that
// starts a sandbox ends it: a failed step, a capture and Cancel destroy it
// with proof, and a session left alone expires after its TTL, when a
// Sweep destroys its sandbox.
type SetupRequest struct {
	// Environment is the environment's id. Required.
	Environment string
	// Name names the template captured. Default "": the driver's default
	// name.
	Name string
	// Script, if not nil, holds the JSON script (see the package doc). It is read
	// only after the driver's capabilities were checked.
	Script io.Reader
	// Interactive leaves the session waiting_for_user after the steps,
	// for Service.OpenTerminal and then CaptureSession or Cancel. Default
	// false: the session captures once the steps succeed.
	Interactive bool
	// Promote promotes the template a non-interactive session captured
	// (or reused). Default false: the template is captured, not promoted.
	Promote bool
	// Rebuild builds even when a finished template has the script's
	// content hash. Default false: that template answers, and no sandbox
	// is allocated.
	Rebuild bool
	// Progress, if not nil, is called with each progress event once it is
	// stored (the same events Service.Events returns).
	Progress func(*SessionEvent)
	// TTL is this session's TTL (0: Options.SessionTTL), capped by
	// Options.SessionMaxTTL. While Setup or CaptureSession works (a long
	// step, a capture) the process pushes it back every third of it, so
	// only a session whose process is gone, or one idle for the operator,
	// outlives it.
	TTL time.Duration
}

func sessionResource(envID, id string) authz.Resource {
	return authz.Resource{Kind: authz.ResourceKindTemplate, ID: id, Name: envID}
}

// Setup starts a setup session of environment req.Environment (IMG-4): a
// setup sandbox is leased from the environment's current image (its
// active template while it applies) under authz.InstanceCompany, the
// script's steps run in it, and then the session waits for the operator
// (req.Interactive) or captures the sandbox into a template (promoted with
// req.Promote) and destroys the sandbox with proof.
//
// Refused before anything is read or allocated: a driver without
// template_capture (IMG-7), and with req.Interactive a driver without
// terminal, each naming the driver and the capability, with an error
// wrapping drivers.ErrUnsupported. A scripted, non-interactive setup is
// content-addressed (the script's hash over the base image identity, the
// platform and the steps): a finished template with the same hash answers
// it, recorded as a session with Reused set, and no sandbox is allocated.
// One session per environment is active at a time, enforced by the store:
// a second is refused with an error wrapping ErrSessionActive. A failed
// step fails the session, naming the step and its exit code, and destroys
// the sandbox; the returned session is the stored one in each case. p
// needs authz.ActionSetup.
func (s *Service) Setup(ctx context.Context, p authz.Principal, req SetupRequest) (*Session, error) {
	if err := s.authorize(ctx, p, authz.ActionSetup, resource(req.Environment, "", ""), "setup of environment "+req.Environment); err != nil {
		return nil, err
	}
	env, d, err := s.environment(ctx, req.Environment)
	if err != nil {
		return nil, err
	}
	caps := drivers.Effective(d, 0)
	required := drivers.NewSet(drivers.CapTemplateCapture)
	if !caps.Has(drivers.CapTemplateCapture) {
		return nil, lacks(env.Name, d.Name(), drivers.CapTemplateCapture, "capture a custom image",
			fmt.Errorf("custom: setup of environment %s: driver %q lacks capability %s: %w", env.ID, d.Name(), drivers.CapTemplateCapture, drivers.ErrUnsupported))
	}
	if req.Interactive {
		if !caps.Has(drivers.CapTerminal) {
			return nil, lacks(env.Name, d.Name(), drivers.CapTerminal, "open a terminal for an interactive setup",
				fmt.Errorf("custom: interactive setup of environment %s: driver %q lacks capability %s: %w", env.ID, d.Name(), drivers.CapTerminal, drivers.ErrUnsupported))
		}
		required |= drivers.NewSet(drivers.CapTerminal)
	}
	var script *setupScript
	if req.Script != nil {
		if script, err = parseScript(req.Script); err != nil {
			return nil, err
		}
	} else if !req.Interactive {
		return nil, fmt.Errorf("custom: setup of environment %s: neither a script nor an interactive session: %w", env.ID, errcode.ErrInvalid)
	}
	base := s.base(env, d)
	now := s.o.clock.Now().UTC()
	ttl := s.o.SessionTTL
	if req.TTL > 0 {
		ttl = min(req.TTL, s.o.SessionMaxTTL)
	}
	ses := &Session{
		ID: s.o.newSessionID(), Environment: env.ID, Name: req.Name, Driver: d.Name(), State: SessionStarting,
		Interactive: req.Interactive, TTL: ttl, CreatedAt: now, CreatedBy: p.ID, UpdatedAt: now,
		ExpiresAt: now.Add(ttl), Deadline: now.Add(s.o.SessionMaxTTL), Version: 1,
	}
	if script != nil {
		ses.Steps = len(script.Steps)
		if !req.Interactive {
			ses.ContentHash, ses.Base = script.hash(base), base
		}
	}
	if ses.ContentHash != "" && !req.Rebuild {
		if t := s.reusable(ctx, env, script, ses.ContentHash); t != nil {
			return s.reuse(ctx, p, ses, t, req)
		}
	}
	if err := s.src.Templates.InsertSession(ctx, ses); err != nil {
		if errors.Is(err, ErrSessionActive) {
			return nil, fmt.Errorf("custom: setup of environment %s: %w", env.ID, err)
		}
		return nil, fmt.Errorf("custom: setup of environment %s: recording session %s: %w", env.ID, ses.ID, err)
	}
	s.event(ctx, ses, 0, "session started; leasing the setup sandbox", req.Progress)
	defer s.heartbeat(ses)()
	h, err := s.src.Leases.Acquire(ctx, p, lease.AcquireRequest{
		EnvironmentID: env.ID, Company: authz.InstanceCompany, Run: ses.ID, Policy: lease.Ephemeral,
		Required: required, Metadata: map[string]string{metaSetupSession: ses.ID},
	})
	if err != nil {
		return s.fail(ctx, p, ses, nil, fmt.Sprintf("leasing the setup sandbox: %v", err), req.Progress, err)
	}
	// The stored record, never h.Lease(): for a principal who may not read
	// configs that is the redacted view, without the labels (issue 49).
	rec, err := s.src.LeaseRecords.GetLease(ctx, h.ID())
	if err != nil {
		return s.fail(ctx, p, ses, h, fmt.Sprintf("reading the setup lease %s: %v", h.ID(), err), req.Progress, err)
	}
	if ses, err = s.updateSession(ctx, ses, func(x *Session) {
		x.Lease, x.BaseTemplate = h.ID(), rec.Labels[labelTemplate]
	}); err != nil {
		s.destroy(ctx, p, h.ID())
		return nil, err
	}
	s.event(ctx, ses, 0, fmt.Sprintf("setup sandbox leased: lease %s", h.ID()), req.Progress)
	vals := s.secretValues(ctx, env, d)
	red := func(msg string) string { return redact(msg, vals) }
	if script != nil {
		for i, st := range script.Steps {
			if err := ctx.Err(); err != nil {
				return s.fail(ctx, p, ses, h, fmt.Sprintf("step %d: %v", i+1, err), req.Progress, err)
			}
			s.event(ctx, ses, i+1, fmt.Sprintf("step %d/%d: %s", i+1, len(script.Steps), red(st.describe())), req.Progress)
			if msg := s.runStep(ctx, h, st, vals); msg != "" {
				reason := fmt.Sprintf("step %d: %s", i+1, red(msg))
				return s.fail(ctx, p, ses, h, reason, req.Progress, fmt.Errorf("%s: %w", reason, errStepFailed))
			}
			ses = s.touch(ctx, ses)
		}
	}
	if req.Interactive {
		if ses, err = s.moveSession(ctx, ses, SessionWaiting, nil, SessionStarting); err != nil {
			return s.fail(ctx, p, ses, h, err.Error(), req.Progress, err)
		}
		s.event(ctx, ses, 0, "waiting for the operator: open the terminal, then capture or cancel", req.Progress)
		return ses, nil
	}
	return s.captureSession(ctx, p, ses, h, req.Promote, req.Progress)
}

// errStepFailed (reason "step_failed"): a scripted step exited non-zero or
// could not run.
var errStepFailed error = &errcode.Error{Code: errcode.Invalid, Reason: "step_failed", Err: errors.New("custom: setup step failed")}

func (st setupStep) describe() string {
	if st.Write != nil {
		mode, _ := st.Write.mode()
		return fmt.Sprintf("write %s (mode %s, %d bytes)", st.Write.Path, mode, len(st.Write.Content))
	}
	return fmt.Sprintf("run %q", st.Run)
}

// runStep runs st in h's sandbox; it returns "" on success, else why not
// (the tail of its stderr, redacted of vals).
func (s *Service) runStep(ctx context.Context, h *lease.Handle, st setupStep, vals []string) string {
	cmd := lease.Command{Argv: st.Run, OutputLimit: 64 << 10}
	if st.Write != nil {
		mode, _ := st.Write.mode()
		cmd = lease.Command{Argv: []string{"sh", "-c", setupscript.WriteFile, "sh", st.Write.Path, mode}, Stdin: strings.NewReader(st.Write.Content)}
	}
	res, err := h.Exec(ctx, cmd)
	if err != nil {
		return err.Error()
	}
	if res.ExitCode != 0 {
		return fmt.Sprintf("exited %d: %s", res.ExitCode, redactedTail(res, vals, 512))
	}
	return ""
}

// redactedTail returns the last n bytes of res's stderr, which the sandbox
// wrote, redacted of the secret values vals first: a value that the cut
// (or the output limit, when res is truncated) splits leaves no part of it
// behind.
func redactedTail(res *drivers.Result, vals []string, n int) string {
	msg := redact(string(bytes.TrimSpace(res.Stderr)), vals)
	if res.Truncated {
		msg = dropSecretPrefix(msg, vals)
	}
	if len(msg) > n {
		msg = msg[len(msg)-n:]
	}
	return msg
}

// dropSecretPrefix removes from the end of msg (output cut at a limit) the
// longest start of a secret value it ends with.
func dropSecretPrefix(msg string, vals []string) string {
	cut := 0
	for _, v := range vals {
		for k := len(v) - 1; k > cut; k-- {
			if strings.HasSuffix(msg, v[:k]) {
				cut = k
				break
			}
		}
	}
	if cut == 0 {
		return msg
	}
	return msg[:len(msg)-cut] + "[redacted]"
}

// redact replaces the secret values vals (longest first) in msg.
func redact(msg string, vals []string) string {
	for _, v := range vals {
		if v != "" {
			msg = strings.ReplaceAll(msg, v, "[redacted]")
		}
	}
	return msg
}

// base is the identity setup starts from: the active template's while it
// applies (leases start from it), else the configured source, with the
// platform (the driver).
func (s *Service) base(env *environment.Environment, d drivers.Driver) string {
	src := envhook.SourceFingerprint(env, d)
	if at := env.ActiveTemplate; at != nil && at.SourceFingerprint == src {
		return "template:" + at.Identity + "|driver=" + d.Name()
	}
	return "source:" + src + "|driver=" + d.Name()
}

// reusable returns a finished template of env whose content hash is hash
// and that may still be promoted (captured, active or superseded), or the
// active template when a session built it by running script on the base
// before it (leases start from it, so the setup would rebuild the same
// thing on top of itself); nil if none.
func (s *Service) reusable(ctx context.Context, env *environment.Environment, script *setupScript, hash string) *Template {
	list, err := s.src.Templates.ListTemplates(ctx, filter{Environment: env.ID})
	if err != nil {
		s.src.logger.Warn("custom: listing templates for reuse", "environment", env.ID, "err", err)
		return nil
	}
	for i := len(list) - 1; i >= 0; i-- {
		t := list[i]
		if t.ContentHash == hash && (t.State == StateCaptured || t.State == StateActive || t.State == StateSuperseded) {
			return t
		}
	}
	if env.ActiveTemplate == nil {
		return nil
	}
	for _, t := range list {
		if t.ID != env.ActiveTemplate.ID || t.State != StateActive || t.ContentHash == "" || t.SetupSession == "" {
			continue
		}
		if prev, err := s.src.Templates.GetSession(ctx, t.SetupSession); err == nil && prev.Base != "" && script.hash(prev.Base) == t.ContentHash {
			return t
		}
	}
	return nil
}

// reuse records a session answered by template t: nothing is leased.
func (s *Service) reuse(ctx context.Context, p authz.Principal, ses *Session, t *Template, req SetupRequest) (*Session, error) {
	ses.State, ses.Reused, ses.Template = SessionCaptured, true, t.ID
	if t.State == StateActive {
		ses.State = SessionPromoted
	}
	if err := s.src.Templates.InsertSession(ctx, ses); err != nil {
		return nil, fmt.Errorf("custom: setup of environment %s: recording session %s: %w", ses.Environment, ses.ID, err)
	}
	s.event(ctx, ses, 0, fmt.Sprintf("template %s has the same content hash: reused, nothing built", t.ID), req.Progress)
	if req.Promote && ses.State == SessionCaptured {
		if _, err := s.Promote(ctx, p, t.ID); err != nil {
			s.event(ctx, ses, 0, "promote of the reused template failed: "+err.Error(), req.Progress)
			return ses, err
		}
		var err error
		if ses, err = s.moveSession(ctx, ses, SessionPromoted, nil, SessionCaptured); err != nil {
			return ses, err
		}
		s.event(ctx, ses, 0, fmt.Sprintf("template %s promoted", t.ID), req.Progress)
	}
	return ses, nil
}

// redactor returns a function that replaces the environment's secret
// values in a message.
func (s *Service) redactor(ctx context.Context, env *environment.Environment, d drivers.Driver) func(string) string {
	vals := s.secretValues(ctx, env, d)
	return func(msg string) string { return redact(msg, vals) }
}

// secretValues resolves the environment's secret values (nil when they
// cannot be resolved: nothing to compare with).
func (s *Service) secretValues(ctx context.Context, env *environment.Environment, d drivers.Driver) []string {
	if s.src.Secrets == nil {
		return nil
	}
	cfg, err := secretcfg.ResolveSecrets(ctx, d.Schema(), env.Config, s.lookup)
	if err != nil {
		s.src.logger.Warn("custom: resolving the environment's secrets for the setup checks", "environment", env.ID, "err", err)
		return nil
	}
	vals := secretcfg.SecretValues(d.Schema(), cfg)
	slices.SortFunc(vals, func(a, b string) int { return len(b) - len(a) }) // longest first
	return vals
}

// captureSession cleans the setup sandbox, checks its environment for
// secret values, captures it, destroys it, and promotes with promote.
func (s *Service) captureSession(ctx context.Context, p authz.Principal, ses *Session, h *lease.Handle, promote bool, progress func(*SessionEvent)) (*Session, error) {
	var err error
	if ses, err = s.moveSession(ctx, ses, SessionCapturing, nil, SessionStarting, SessionWaiting); err != nil {
		if errors.Is(err, errcode.ErrConflict) && ses.State.Active() {
			// Another capture works on it: its sandbox is not this
			// call's to destroy.
			return ses, err
		}
		return s.fail(ctx, p, ses, h, err.Error(), progress, err)
	}
	env, d, err := s.environment(ctx, ses.Environment)
	if err != nil {
		return s.fail(ctx, p, ses, h, err.Error(), progress, err)
	}
	vals := s.secretValues(ctx, env, d)
	s.event(ctx, ses, 0, "removing berth's own files from the sandbox", progress)
	res, err := h.Exec(ctx, lease.Command{Argv: []string{"sh", "-c", setupscript.Clean}, OutputLimit: 64 << 10})
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("exited %d: %s", res.ExitCode, redactedTail(res, vals, 512))
	}
	if err != nil {
		return s.fail(ctx, p, ses, h, "removing berth's files before the capture: "+err.Error(), progress, err)
	}
	if len(vals) > 0 {
		res, err := h.Exec(ctx, lease.Command{Argv: []string{"sh", "-c", setupscript.Environ}, OutputLimit: 1 << 20})
		if err != nil {
			return s.fail(ctx, p, ses, h, "reading the image environment: "+err.Error(), progress, err)
		}
		if res.ExitCode != 0 {
			// Process 1's environment is not readable here (a provider
			// whose commands do not run as its owner): said in the
			// progress, the capture goes on.
			s.event(ctx, ses, 0, fmt.Sprintf("the image environment (/proc/1/environ) is not readable (exit %d): its secret check was skipped", res.ExitCode), progress)
			res.Stdout = nil
		}
		for _, v := range vals {
			if v != "" && bytes.Contains(res.Stdout, []byte(v)) {
				err := fmt.Errorf("custom: setup session %s: a secret env value of environment %s is in the sandbox's process environment, which the image would carry: %w", ses.ID, env.ID, errcode.ErrInvalid)
				return s.fail(ctx, p, ses, h, "a secret env value is in the image environment; not captured", progress, err)
			}
		}
	}
	s.event(ctx, ses, 0, "capturing the sandbox", progress)
	t, err := s.capture(ctx, p, ses.Lease, ses.Name, h, func(t *Template) { t.ContentHash, t.SetupSession = ses.ContentHash, ses.ID })
	if err != nil {
		return s.fail(ctx, p, ses, h, "capture: "+err.Error(), progress, err)
	}
	cleanup := s.destroy(ctx, p, ses.Lease)
	if ses, err = s.moveSession(ctx, ses, SessionCaptured, func(x *Session) {
		x.Template, x.LeaseCleanup = t.ID, cleanup
	}, SessionCapturing); err != nil {
		// A cancel or a sweep ended the session while it captured: what
		// the capture made is not left to be promoted.
		s.discardCapture(ctx, p, ses, t, d)
		return ses, err
	}
	s.event(ctx, ses, 0, fmt.Sprintf("captured template %s; setup sandbox destroyed (cleanup %s)", t.ID, cleanup), progress)
	if !promote {
		return ses, nil
	}
	if _, err := s.Promote(ctx, p, t.ID); err != nil {
		s.event(ctx, ses, 0, "promote failed: "+err.Error(), progress)
		return ses, err
	}
	if ses, err = s.moveSession(ctx, ses, SessionPromoted, nil, SessionCaptured); err != nil {
		return ses, err
	}
	s.event(ctx, ses, 0, fmt.Sprintf("template %s promoted", t.ID), progress)
	return ses, nil
}

// discardCapture revokes template t, which the capture of session ses
// made after the session had ended (cancelled, timed out): it is never
// promoted, and it is deleted at the provider where the driver can (or by
// a later Sweep).
func (s *Service) discardCapture(ctx context.Context, p authz.Principal, ses *Session, t *Template, d drivers.Driver) {
	ctx = context.WithoutCancel(ctx)
	opts := RevokeOptions{Reason: fmt.Sprintf("its setup session %s became %s during the capture", ses.ID, ses.State),
		Delete: drivers.Effective(d, 0).Has(drivers.CapTemplateDelete)}
	if _, err := s.Revoke(ctx, p, t.ID, opts); err != nil {
		s.src.logger.Warn("custom: revoking the template of a setup session that ended during its capture", "session", ses.ID, "template", t.ID, "err", err)
		return
	}
	s.event(ctx, ses, 0, fmt.Sprintf("template %s revoked: %s", t.ID, opts.Reason), nil)
}

// fail records ses as failed with reason, destroys its sandbox (h or the
// recorded lease), and returns the session with cause wrapped.
func (s *Service) fail(ctx context.Context, p authz.Principal, ses *Session, h *lease.Handle, reason string, progress func(*SessionEvent), cause error) (*Session, error) {
	ctx = context.WithoutCancel(ctx)
	red := func(msg string) string { return msg }
	if env, d, err := s.environment(ctx, ses.Environment); err == nil {
		red = s.redactor(ctx, env, d)
		reason = red(reason) // never a secret in the stored reason
	}
	cleanup := ""
	if h != nil {
		cleanup = s.destroy(ctx, p, h.ID())
	}
	next, err := s.updateSession(ctx, ses, func(x *Session) {
		if x.State.Active() {
			x.State, x.FailureReason, x.LeaseCleanup = SessionFailed, reason, cleanup
		}
	})
	if err == nil {
		ses = next
		s.event(ctx, ses, 0, "failed: "+reason, progress)
	}
	// Nor in the error: the cause's text (a provider's error may echo a
	// credential) is redacted too; errors.Is still sees the cause.
	return ses, &redactedError{msg: red(fmt.Sprintf("custom: setup session %s of environment %s failed: %s: %v", ses.ID, ses.Environment, reason, cause)), cause: cause}
}

// redactedError is an error whose text was redacted of secret values; it
// unwraps to its cause.
type redactedError struct {
	msg   string
	cause error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.cause }

// destroy releases setup lease id with Destroy and returns its cleanup
// status ("confirmed" once proven; a pending one is retried by the lease
// sweep).
func (s *Service) destroy(ctx context.Context, p authz.Principal, id string) string {
	l, err := s.src.Leases.Release(context.WithoutCancel(ctx), p, id, lease.ReleaseOptions{Disposition: lease.Destroy})
	if err != nil {
		s.src.logger.Warn("custom: destroying a setup sandbox", "lease", id, "err", err)
		if l == nil {
			return "error: " + err.Error()
		}
	}
	return string(l.Cleanup)
}

// moveSession moves ses to state to, applying mutate too, if its stored
// state is one of from; otherwise (a sweep or a cancel ended it
// meanwhile) nothing changes and the error wraps errcode.ErrConflict.
func (s *Service) moveSession(ctx context.Context, ses *Session, to SessionState, mutate func(*Session), from ...SessionState) (*Session, error) {
	moved := false
	next, err := s.updateSession(ctx, ses, func(x *Session) {
		// The last call is the one stored: a session another process moved
		// to `to` already (two captures at once) is not moved by this one.
		moved = slices.Contains(from, x.State)
		if moved {
			x.State = to
			if mutate != nil {
				mutate(x)
			}
		}
	})
	if err != nil {
		return next, err
	}
	if !moved {
		return next, fmt.Errorf("custom: setup session %s: it became %s meanwhile, not moved to %s: %w", ses.ID, next.State, to, errcode.ErrConflict)
	}
	return next, nil
}

// updateSession applies f to the stored session, retrying on a concurrent
// version change; f sees the latest stored session.
func (s *Service) updateSession(ctx context.Context, ses *Session, f func(*Session)) (*Session, error) {
	for range 8 {
		next := ses.clone()
		f(next)
		next.Version = ses.Version + 1
		next.UpdatedAt = s.o.clock.Now().UTC()
		err := s.src.Templates.UpdateSession(context.WithoutCancel(ctx), next)
		if err == nil {
			return next, nil
		}
		if !errors.Is(err, errcode.ErrConflict) {
			return ses, fmt.Errorf("custom: setup session %s: %w", ses.ID, err)
		}
		cur, gerr := s.src.Templates.GetSession(context.WithoutCancel(ctx), ses.ID)
		if gerr != nil {
			return ses, fmt.Errorf("custom: setup session %s: %w", ses.ID, gerr)
		}
		ses = cur
	}
	return ses, fmt.Errorf("custom: setup session %s: too many concurrent changes: %w", ses.ID, errcode.ErrConflict)
}

// event stores a progress event (a failure to store is logged).
func (s *Service) event(ctx context.Context, ses *Session, step int, msg string, progress func(*SessionEvent)) {
	e := &SessionEvent{Session: ses.ID, At: s.o.clock.Now().UTC(), State: ses.State, Step: step, Message: msg}
	if err := s.src.Templates.AppendSessionEvent(context.WithoutCancel(ctx), e); err != nil {
		s.src.logger.Warn("custom: recording a setup progress event", "session", ses.ID, "err", err)
		return
	}
	if progress != nil {
		progress(e)
	}
}

// heartbeat pushes ses's TTL back every third of it until the returned
// stop is called: the process works on the session.
func (s *Service) heartbeat(ses *Session) (stop func()) {
	done := make(chan struct{})
	every := max(s.ttl(ses)/3, time.Millisecond)
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				cur, err := s.src.Templates.GetSession(context.Background(), ses.ID)
				if err != nil || !cur.State.Active() {
					continue
				}
				s.touch(context.Background(), cur)
			}
		}
	}()
	return func() { close(done) }
}

func (s *Service) ttl(ses *Session) time.Duration {
	if ses.TTL > 0 {
		return ses.TTL
	}
	return s.o.SessionTTL
}

// touch pushes an active session's TTL back, up to its deadline.
func (s *Service) touch(ctx context.Context, ses *Session) *Session {
	exp := s.o.clock.Now().UTC().Add(s.ttl(ses))
	if exp.After(ses.Deadline) {
		exp = ses.Deadline
	}
	if !exp.After(ses.ExpiresAt) || !ses.State.Active() {
		return ses
	}
	next, err := s.updateSession(ctx, ses, func(x *Session) {
		if x.State.Active() && exp.After(x.ExpiresAt) {
			x.ExpiresAt = exp
		}
	})
	if err != nil {
		s.src.logger.Warn("custom: extending a setup session's TTL", "session", ses.ID, "err", err)
		return ses
	}
	return next
}

// expired says why ses is past its time at now ("idle past its TTL",
// "past its cap"), or "" while it is within both.
func expired(ses *Session, now time.Time) string {
	switch {
	case !now.Before(ses.Deadline):
		return "past its cap"
	case !now.Before(ses.ExpiresAt):
		return "idle past its TTL"
	}
	return ""
}

// checkTime refuses to use a session past its TTL or its cap (what names
// the use: "terminal token", "terminal", "capture"), whether or not a sweep
// ran: an active one is ended as timed_out there and then (its sandbox
// destroyed with proof, as Sweep would), and the error wraps errcode.ErrConflict.
// A session within its time is nil.
func (s *Service) checkTime(ctx context.Context, p authz.Principal, ses *Session, what string) error {
	why := expired(ses, s.o.clock.Now())
	if why == "" {
		return nil
	}
	if ses.State.Active() {
		if _, err := s.end(context.WithoutCancel(ctx), p, ses, SessionTimedOut, why); err != nil {
			s.src.logger.Warn("custom: ending a setup session past its time", "session", ses.ID, "err", err)
		}
	}
	return fmt.Errorf("custom: %s of setup session %s: the session is %s (it timed out): %w", what, ses.ID, why, errcode.ErrConflict)
}

// loadSession reads session id and authorizes a on it.
func (s *Service) loadSession(ctx context.Context, p authz.Principal, a authz.Action, id string) (*Session, error) {
	ses, err := s.src.Templates.GetSession(ctx, id)
	if errors.Is(err, errcode.ErrNotFound) {
		return nil, fmt.Errorf("custom: setup session %s: %w", id, errcode.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("custom: setup session %s: %w", id, err)
	}
	if err := s.authorize(ctx, p, a, sessionResource(ses.Environment, ses.ID), "setup session "+id); err != nil {
		if errors.Is(err, errcode.ErrNotFound) {
			return nil, fmt.Errorf("custom: setup session %s: %w", id, errcode.ErrNotFound)
		}
		return nil, err
	}
	return ses, nil
}

// Session returns setup session id (board members read sessions, without
// provider internals; agents get errcode.ErrNotFound, as for a missing
// one).
func (s *Service) Session(ctx context.Context, p authz.Principal, id string) (*Session, error) {
	ses, err := s.loadSession(ctx, p, authz.ActionRead, id)
	if err != nil {
		return nil, err
	}
	return s.sessionView(ctx, p, ses), nil
}

// sessionView returns ses as p may read it: without the base identity and
// content hash (provider internals) for principals not allowed
// authz.ActionReadConfig.
func (s *Service) sessionView(ctx context.Context, p authz.Principal, ses *Session) *Session {
	c := ses.clone()
	if s.src.authorizer.Authorize(ctx, p, authz.ActionReadConfig, sessionResource(ses.Environment, ses.ID)) != nil {
		c.Base, c.ContentHash = "", ""
	}
	return c
}

// Sessions returns the setup sessions of environment envID by creation
// time.
func (s *Service) Sessions(ctx context.Context, p authz.Principal, envID string) ([]*Session, error) {
	if err := s.authorize(ctx, p, authz.ActionRead, sessionResource(envID, ""), "setup sessions of environment "+envID); err != nil {
		return nil, err
	}
	list, err := s.src.Templates.ListSessions(ctx, filter{Environment: envID})
	if err != nil {
		return nil, fmt.Errorf("custom: setup sessions of environment %s: %w", envID, err)
	}
	for i, ses := range list {
		list[i] = s.sessionView(ctx, p, ses)
	}
	return list, nil
}

// Events returns the progress events of session id after cursor after
// (0: all), by Seq; the last event's Seq is the next cursor. They are
// stored, so any process reads them and none is missed.
func (s *Service) Events(ctx context.Context, p authz.Principal, id string, after int64) ([]*SessionEvent, error) {
	if _, err := s.loadSession(ctx, p, authz.ActionRead, id); err != nil {
		return nil, err
	}
	ev, err := s.src.Templates.ListSessionEvents(ctx, id, after)
	if err != nil {
		return nil, fmt.Errorf("custom: events of setup session %s: %w", id, err)
	}
	return ev, nil
}

// CaptureSession captures the sandbox of a session waiting for the
// operator, from any process: berth's own files are removed, the image
// environment is checked for secret values, the template is made (its
// SetupSession the session) and the sandbox is destroyed with proof; with
// promote the template is promoted. What setup steps and the terminal
// wrote (shell history included) is captured as it is. A session in
// another state, or past its TTL or cap (which ends it as timed_out, see
// Sweep), is an error wrapping errcode.ErrConflict. p needs authz.ActionSetup.
func (s *Service) CaptureSession(ctx context.Context, p authz.Principal, id string, promote bool) (*Session, error) {
	ses, err := s.loadSession(ctx, p, authz.ActionSetup, id)
	if err != nil {
		return nil, err
	}
	if err := s.checkTime(ctx, p, ses, "capture"); err != nil {
		return ses, err
	}
	if ses.State != SessionWaiting {
		return ses, fmt.Errorf("custom: capture of setup session %s: it is %s, not %s: %w", id, ses.State, SessionWaiting, errcode.ErrConflict)
	}
	s.terms.closeSession(id)
	defer s.heartbeat(ses)()
	h, err := s.src.Leases.Open(ctx, p, ses.Lease)
	if err != nil {
		return s.fail(ctx, p, ses, nil, "opening the setup lease: "+err.Error(), nil, err)
	}
	return s.captureSession(ctx, p, ses, h, promote, nil)
}

// Cancel ends an active session as cancelled and destroys its sandbox with
// proof. A capture that was running meanwhile leaves no template to promote:
// the one it still made is revoked (and deleted where the driver can). A
// session that ended is an error wrapping errcode.ErrConflict. p needs
// authz.ActionSetup.
func (s *Service) Cancel(ctx context.Context, p authz.Principal, id string) (*Session, error) {
	ses, err := s.loadSession(ctx, p, authz.ActionSetup, id)
	if err != nil {
		return nil, err
	}
	if !ses.State.Active() {
		return ses, fmt.Errorf("custom: cancel of setup session %s: it is %s: %w", id, ses.State, errcode.ErrConflict)
	}
	return s.end(ctx, p, ses, SessionCancelled, "cancelled by "+p.ID)
}

// end moves active session ses to state and destroys every live lease of
// it.
func (s *Service) end(ctx context.Context, p authz.Principal, ses *Session, state SessionState, reason string) (*Session, error) {
	s.terms.closeSession(ses.ID)
	next, err := s.updateSession(ctx, ses, func(x *Session) {
		if x.State.Active() {
			x.State = state
			if state != SessionCancelled {
				x.FailureReason = reason
			}
		}
	})
	if err != nil {
		return ses, err
	}
	if next.State != state {
		return next, fmt.Errorf("custom: setup session %s: it became %s meanwhile: %w", ses.ID, next.State, errcode.ErrConflict)
	}
	cleanup, err := s.destroySessionLeases(ctx, p, next)
	if err != nil {
		s.src.logger.Warn("custom: destroying a setup session's sandboxes", "session", ses.ID, "err", err)
	}
	if cleanup != "" {
		if n, err := s.updateSession(ctx, next, func(x *Session) { x.LeaseCleanup = cleanup }); err == nil {
			next = n
		}
	}
	s.event(ctx, next, 0, fmt.Sprintf("%s (%s); setup sandbox cleanup %q", state, reason, cleanup), nil)
	return next, nil
}

// destroySessionLeases destroys the live setup leases of ses (found by
// their Run, the session id, so also one leased before the session
// recorded it) and returns the last cleanup status.
func (s *Service) destroySessionLeases(ctx context.Context, p authz.Principal, ses *Session) (string, error) {
	list, err := s.src.LeaseRecords.ListLeases(ctx, lease.Filter{Company: authz.InstanceCompany, Environment: ses.Environment, Run: ses.ID, Live: true})
	if err != nil {
		return "", err
	}
	cleanup := ses.LeaseCleanup
	for _, l := range list {
		if l.Status == lease.StatusStarting {
			continue // the lease sweep resolves an interrupted start
		}
		cleanup = s.destroy(ctx, p, l.ID)
	}
	return cleanup, nil
}

// SessionSweepReport counts what the setup sessions' part of a sweep did
// (berth.SweepReport.Sessions).
type SessionSweepReport struct {
	// TimedOut counts active sessions past their TTL or cap, ended.
	TimedOut int `json:"timedOut"`
	// SandboxesDestroyed counts setup leases of ended sessions released
	// with Destroy (confirmed or left pending for the lease sweep).
	SandboxesDestroyed int `json:"sandboxesDestroyed"`
	// TokensPruned counts terminal token records removed: expired, they
	// can never be redeemed.
	TokensPruned int `json:"tokensPruned"`
}

// sweepSessions (System.Sweep, through internal/templatehook) ends the
// active sessions past their TTL (or cap) as
// timed_out, also those whose process was killed, destroys the live setup
// leases of every session that is not active any more (or not recorded at
// all: a crash between the lease and the session's write), and makes the
// template states follow the environments' pointers again (a promote
// killed between the two writes), and removes the expired terminal token
// records. Several replicas may sweep at once: session changes are
// version-checked and lease releases idempotent. p needs
// authz.ActionSweep.
func (s *Service) sweepSessions(ctx context.Context, p authz.Principal) (SessionSweepReport, error) {
	var rep SessionSweepReport
	if err := s.src.authorizer.Authorize(ctx, p, authz.ActionSweep, resource("", "", "")); err != nil {
		return rep, fmt.Errorf("custom: sweep of setup sessions: %w", err)
	}
	now := s.o.clock.Now()
	active, err := s.src.Templates.ListSessions(ctx, filter{Active: true})
	if err != nil {
		return rep, fmt.Errorf("custom: sweep of setup sessions: %w", err)
	}
	for _, ses := range active {
		why := expired(ses, now)
		if why == "" {
			continue
		}
		if _, err := s.end(ctx, p, ses, SessionTimedOut, why); err == nil {
			rep.TimedOut++
		}
	}
	leases, err := s.src.LeaseRecords.ListLeases(ctx, lease.Filter{Company: authz.InstanceCompany, Live: true})
	if err != nil {
		return rep, fmt.Errorf("custom: sweep of setup sessions: %w", err)
	}
	// A promote killed between the pointer's swap and the template states'
	// update leaves a template named by the pointer but not marked
	// active: the states follow the pointer again.
	if tpls, err := s.src.Templates.ListTemplates(ctx, filter{}); err == nil {
		seen := map[string]bool{}
		for _, t := range tpls {
			if !seen[t.Environment] {
				seen[t.Environment] = true
				s.reconcile(ctx, t.Environment)
			}
		}
	}
	for _, l := range leases {
		sid := l.Metadata[metaSetupSession]
		if sid == "" || l.Status == lease.StatusStarting {
			continue
		}
		ses, err := s.src.Templates.GetSession(ctx, sid)
		if err == nil && ses.State.Active() {
			continue
		}
		if err != nil && !errors.Is(err, errcode.ErrNotFound) {
			continue
		}
		s.destroy(ctx, p, l.ID)
		rep.SandboxesDestroyed++
	}
	n, err := s.src.Templates.PruneTerminalTokens(ctx, now)
	rep.TokensPruned = n
	if err != nil {
		return rep, fmt.Errorf("custom: sweep of setup sessions: %w", err)
	}
	return rep, nil
}

// usageReporter is the Service's hook for the catalog, which berth.New
// gets with the Service (internal/templatehook): an unexported type, as it
// answers for no principal.
type usageReporter struct{ s *Service }

var _ envhook.UsageReporter[environment.Usage] = usageReporter{}

// EnvironmentUsage implements envhook.UsageReporter: the active setup
// sessions of envID, for the blast radius (CFG-7). Their sandboxes are
// live leases of the environment and show among its active leases too.
func (r usageReporter) EnvironmentUsage(ctx context.Context, envID string) (environment.Usage, error) {
	list, err := r.s.src.Templates.ListSessions(ctx, filter{Environment: envID, Active: true})
	if err != nil {
		return environment.Usage{}, fmt.Errorf("custom: setup sessions of environment %s: %w", envID, err)
	}
	var u environment.Usage
	for _, ses := range list {
		u.SetupSessions = append(u.SetupSessions, environment.Reference{Kind: "setup_session", ID: ses.ID,
			Company: authz.InstanceCompany, Detail: fmt.Sprintf("%s since %s, lease %s", ses.State, ses.CreatedAt.Format(time.RFC3339), ses.Lease)})
	}
	return u, nil
}
