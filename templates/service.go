package templates

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/images"
	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/internal/envhook"
	"github.com/berthdev/berth/internal/leasehook"
	"github.com/berthdev/berth/internal/secretcfg"
	"github.com/berthdev/berth/internal/templatehook"
	"github.com/berthdev/berth/lease"
)

// sources are what a Service reads and acts through
// (internal/templatehook documents each); every field is required.
type sources struct {
	// Templates is the template and history store.
	Templates records
	// Environments holds the environment records whose ActiveTemplate the
	// service changes by compare-and-swap on the revision.
	Environments environment.Store
	// Drivers resolves environment drivers.
	Drivers *drivers.Registry
	// Leases hands out the handle of a live lease to capture
	// (lease.Manager.Open).
	Leases *lease.Manager
	// LeaseRecords is the lease store, read to find live leases that use a
	// template before deleting it (IMG-8), and for the stored record of a
	// setup session's lease (its labels, which a redacted view lacks).
	LeaseRecords lease.Store
	// Secrets resolves the secret references of an environment's config
	// for a provider deletion (as the lease manager's); nil: a deletion
	// that needs a credential fails and stays wanted.
	Secrets func(ctx context.Context, ref config.SecretRef) (string, error)
	// authorizer decides every action (the System's); default
	// authz.DefaultPolicy.
	authorizer authz.Authorizer
	// logger receives failures of best-effort steps (the System's);
	// default discard.
	logger *slog.Logger
}

// Options configure the Service of berth.Options.Templates; nil means the
// defaults. It decides with the System's authorizer
// (berth.Options.Authorizer) and logs to its logger.
type Options struct {
	// SessionTTL is how long a setup session lives without activity
	// (steps, terminal input); default 30 minutes.
	SessionTTL time.Duration
	// SessionMaxTTL caps a session's life however active it is; default 4
	// hours.
	SessionMaxTTL time.Duration

	// clock is the time source; default the wall clock.
	clock clock.Clock
	// newID returns a new template id; default "tpl_" and 16 hex digits.
	newID func() string
	// newSessionID returns a new setup session id; default "ses_" and 16
	// hex digits.
	newSessionID func() string
}

// Service captures, promotes, rolls back, revokes and deletes templates
// for a principal. Every method authorizes first: operators (instance
// admins, local operators under DefaultPolicy) act (authz.ActionSetup),
// board members read without provider internals, agents nothing. It is
// safe for concurrent use, also from several processes over one SQL store.
type Service struct {
	src   sources
	o     Options
	terms *terminals
}

func init() {
	templatehook.New = func(src templatehook.Sources, opts any) (any, envhook.UsageReporter[environment.Usage]) {
		s := sources{Environments: src.Environments, Drivers: src.Drivers, Leases: src.Leases, LeaseRecords: src.LeaseRecords, Secrets: src.Secrets,
			authorizer: src.Authorizer, logger: src.Logger}
		s.Templates = unseal(src.Templates)
		o, _ := opts.(*Options)
		return newService(s, o)
	}
	templatehook.SweepSessions = func(svc any, ctx context.Context, p authz.Principal) (any, error) {
		return svc.(*Service).sweepSessions(ctx, p)
	}
	templatehook.SetTerminalRing = func(h http.Handler, n int) { h.(*termHandler).ring = n }
	templatehook.Seal = func(s any) any { return sealedStore{s.(records)} }
	templatehook.Unseal = func(s any) any { return unseal(s) }
	templatehook.NewMemoryStore = func() any { return Store(sealedStore{newMemoryStore()}) }
}

// newService returns a Service over src, and the hook the catalog needs
// from it: the envhook.UsageReporter that lists the active setup
// sessions of an environment for its blast radius (CFG-7), which berth.New
// wires into the catalog. It acts for no principal, so it is no method of
// the Service.
func newService(src sources, opts *Options) (*Service, envhook.UsageReporter[environment.Usage]) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if src.authorizer == nil {
		src.authorizer = authz.DefaultPolicy{}
	}
	if o.clock == nil {
		o.clock = clock.Real{}
	}
	if o.newID == nil {
		o.newID = func() string {
			b := make([]byte, 8)
			_, _ = rand.Read(b)
			return "tpl_" + hex.EncodeToString(b)
		}
	}
	if src.logger == nil {
		src.logger = slog.New(slog.DiscardHandler)
	}
	if o.SessionTTL <= 0 {
		o.SessionTTL = 30 * time.Minute
	}
	if o.SessionMaxTTL <= 0 {
		o.SessionMaxTTL = 4 * time.Hour
	}
	if o.SessionMaxTTL < o.SessionTTL {
		o.SessionMaxTTL = o.SessionTTL
	}
	if o.newSessionID == nil {
		o.newSessionID = func() string {
			b := make([]byte, 8)
			_, _ = rand.Read(b)
			return "ses_" + hex.EncodeToString(b)
		}
	}
	s := &Service{src: src, o: o, terms: newTerminals()}
	return s, usageReporter{s}
}

// RevokeOptions modify Service.Revoke.
type RevokeOptions struct {
	// Delete asks for the template's deletion at the provider: at once when
	// no live lease uses it, else recorded (Template.DeleteWanted) for
	// Sweep. Default false: the template is revoked and kept at the
	// provider.
	Delete bool
	// Reason is recorded as the revoke reason. Default "": none.
	Reason string
}

func resource(envID, id, driver string) authz.Resource {
	return authz.Resource{Kind: authz.ResourceKindTemplate, ID: id, Name: envID, Driver: driver}
}

// authorize decides a for p on r; a refusal of a principal that may not
// even read is reported as not found, naming only what the caller gave.
func (s *Service) authorize(ctx context.Context, p authz.Principal, a authz.Action, r authz.Resource, named string) error {
	err := s.src.authorizer.Authorize(ctx, p, a, r)
	if err == nil {
		return nil
	}
	if a != authz.ActionRead && s.src.authorizer.Authorize(ctx, p, authz.ActionRead, r) == nil {
		if !errors.Is(err, errcode.ErrDenied) {
			err = fmt.Errorf("%w: %w", authz.Denied(p, a, r), err)
		}
		return err
	}
	return fmt.Errorf("custom: %s: %w", named, errcode.ErrNotFound)
}

// view returns t as p may read it: the full template for principals
// allowed authz.ActionReadConfig, else without provider internals.
func (s *Service) view(ctx context.Context, p authz.Principal, t *Template) *Template {
	c := t.clone()
	if s.src.authorizer.Authorize(ctx, p, authz.ActionReadConfig, resource(t.Environment, t.ID, t.Driver)) == nil {
		return c
	}
	c.Identity, c.SourceFingerprint, c.Lease, c.ContentHash, c.DeleteNote = "", "", "", "", ""
	if c.DeleteReceipt != nil {
		c.DeleteReceipt = &drivers.Receipt{State: c.DeleteReceipt.State, Confirmed: c.DeleteReceipt.Confirmed, ConfirmedAt: c.DeleteReceipt.ConfirmedAt}
	}
	c.Redacted = true
	return c
}

// load reads template id and authorizes a on it.
func (s *Service) load(ctx context.Context, p authz.Principal, a authz.Action, id string) (*Template, error) {
	t, err := s.src.Templates.GetTemplate(ctx, id)
	if errors.Is(err, errcode.ErrNotFound) {
		return nil, fmt.Errorf("custom: template %s: %w", id, errcode.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("custom: template %s: %w", id, err)
	}
	if err := s.authorize(ctx, p, a, resource(t.Environment, t.ID, t.Driver), "template "+id); err != nil {
		return nil, err
	}
	return t, nil
}

// Get returns template id as p may read it (errcode.ErrNotFound for a missing
// template and for one p may not read alike).
func (s *Service) Get(ctx context.Context, p authz.Principal, id string) (*Template, error) {
	t, err := s.load(ctx, p, authz.ActionRead, id)
	if err != nil {
		return nil, err
	}
	return s.view(ctx, p, t), nil
}

// List returns the templates of environment envID by creation time, as p
// may read them.
func (s *Service) List(ctx context.Context, p authz.Principal, envID string) ([]*Template, error) {
	if err := s.authorize(ctx, p, authz.ActionRead, resource(envID, "", ""), "templates of environment "+envID); err != nil {
		return nil, err
	}
	list, err := s.src.Templates.ListTemplates(ctx, filter{Environment: envID})
	if err != nil {
		return nil, fmt.Errorf("custom: templates of environment %s: %w", envID, err)
	}
	for i, t := range list {
		list[i] = s.view(ctx, p, t)
	}
	return list, nil
}

// History returns the append-only pointer history of environment envID
// by Seq.
func (s *Service) History(ctx context.Context, p authz.Principal, envID string) ([]*Event, error) {
	if err := s.authorize(ctx, p, authz.ActionRead, resource(envID, "", ""), "history of environment "+envID); err != nil {
		return nil, err
	}
	ev, err := s.src.Templates.ListEvents(ctx, envID)
	if err != nil {
		return nil, fmt.Errorf("custom: history of environment %s: %w", envID, err)
	}
	return ev, nil
}

// environment reads environment id and its driver.
func (s *Service) environment(ctx context.Context, id string) (*environment.Environment, drivers.Driver, error) {
	env, err := s.src.Environments.GetEnvironment(ctx, id)
	if err != nil {
		return nil, nil, fmt.Errorf("custom: environment %s: %w", id, err)
	}
	d, err := s.src.Drivers.Lookup(env.Driver)
	if err != nil {
		return nil, nil, fmt.Errorf("custom: environment %s: %w", id, err)
	}
	return env, d, nil
}

// labelTemplate is the label of a lease started from a template, valued
// the template's id (lease.Lease.Labels).
const labelTemplate = "berth.template-id"

// Capture captures the live sandbox of lease leaseID (a lease of an
// environment, acquired by any process: lease.Manager.Open) into a new
// template in StateCaptured, named name. A driver without template_capture
// (ssh, local) is refused before anything happens, naming the driver and
// the capability, with an error wrapping drivers.ErrUnsupported (IMG-7).
// The template records the source fingerprint of the config the lease was
// made from (a lease started from a template: that template's). A capture
// the provider fails is recorded as StateFailed with the reason, and the
// error is returned. p needs authz.ActionSetup on the environment's
// templates and authz.ActionLease on the lease.
func (s *Service) Capture(ctx context.Context, p authz.Principal, leaseID, name string) (*Template, error) {
	return s.capture(ctx, p, leaseID, name, nil, nil)
}

// capture is Capture; h, if not nil, is the lease's handle; mark, if not
// nil, fills the template's setup fields before it is stored.
func (s *Service) capture(ctx context.Context, p authz.Principal, leaseID, name string, h *lease.Handle, mark func(*Template)) (*Template, error) {
	l, err := s.src.LeaseRecords.GetLease(ctx, leaseID)
	if errors.Is(err, errcode.ErrNotFound) {
		return nil, fmt.Errorf("custom: capture: lease %s: %w", leaseID, errcode.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("custom: capture: lease %s: %w", leaseID, err)
	}
	if err := s.authorize(ctx, p, authz.ActionSetup, resource(l.Environment, "", l.Provider), "capture: lease "+leaseID); err != nil {
		return nil, err
	}
	env, d, err := s.environment(ctx, l.Environment)
	if err != nil {
		return nil, err
	}
	if !drivers.Effective(d, 0).Has(drivers.CapTemplateCapture) {
		return nil, lacks(env.Name, d.Name(), drivers.CapTemplateCapture, "capture a custom image",
			fmt.Errorf("custom: capture: environment %s: driver %q lacks capability %s: %w", env.ID, d.Name(), drivers.CapTemplateCapture, drivers.ErrUnsupported))
	}
	source := envhook.SourceFingerprint(&environment.Environment{Config: l.Config}, d)
	if from := l.Labels[labelTemplate]; from != "" {
		prev, err := s.src.Templates.GetTemplate(ctx, from)
		if err != nil {
			return nil, fmt.Errorf("custom: capture: lease %s started from template %s: %w", leaseID, from, err)
		}
		source = prev.SourceFingerprint
	}
	if h == nil {
		if h, err = s.src.Leases.Open(ctx, p, leaseID); err != nil {
			return nil, fmt.Errorf("custom: capture: %w", err)
		}
	}
	now := s.o.clock.Now().UTC()
	t := &Template{
		ID: s.o.newID(), Environment: env.ID, Name: name, Driver: d.Name(),
		SourceFingerprint: source, Lease: leaseID,
		CreatedAt: now, CreatedBy: p.ID, UpdatedAt: now, Version: 1,
	}
	if mark != nil {
		mark(t)
	}
	id, cerr := leasehook.Capture(h, ctx, drivers.CaptureRequest{Name: name})
	if cerr == nil && id.IsZero() {
		cerr = fmt.Errorf("the driver returned no identity")
	}
	if cerr != nil {
		// A provider's error may echo a credential: never stored or
		// returned as it is.
		vals := s.secretValues(ctx, env, d)
		cerr = &redactedError{msg: redact(cerr.Error(), vals), cause: cerr}
		t.State, t.FailureReason = StateFailed, cerr.Error()
	} else {
		t.State, t.Identity = StateCaptured, id.String()
	}
	if err := s.src.Templates.InsertTemplate(context.WithoutCancel(ctx), t); err != nil {
		return nil, fmt.Errorf("custom: capture of lease %s: recording template %s (identity %q): %w", leaseID, t.ID, t.Identity, err)
	}
	if cerr != nil {
		return s.view(ctx, p, t), fmt.Errorf("custom: capture of lease %s (environment %s) failed, recorded as template %s: %w", leaseID, env.ID, t.ID, cerr)
	}
	return s.view(ctx, p, t), nil
}

// Promote makes template id the environment's active template: leases then
// start from it while it applies (IMG-8). Only a captured or superseded
// template whose source fingerprint equals the environment's current one
// is promoted (else errSourceMismatch, IMG-6). The pointer changes by
// compare-and-swap on the environment's revision, bumping it: of two
// promotes at once one wins and the other gets an error wrapping
// errcode.ErrConflict (and errcode.ErrConflict), changing nothing (CFG-6).
// The previous template becomes superseded, and the change is appended to
// the history. p needs authz.ActionSetup.
func (s *Service) Promote(ctx context.Context, p authz.Principal, id string) (*Template, error) {
	return s.promote(ctx, p, id, actionPromote)
}

// Rollback promotes superseded template id again, as a new promote
// recorded as actionRollback: nothing is undone in place. A template that
// is not superseded is an error wrapping errcode.ErrConflict.
func (s *Service) Rollback(ctx context.Context, p authz.Principal, id string) (*Template, error) {
	return s.promote(ctx, p, id, actionRollback)
}

func (s *Service) promote(ctx context.Context, p authz.Principal, id string, action string) (*Template, error) {
	t, err := s.load(ctx, p, authz.ActionSetup, id)
	if err != nil {
		return nil, err
	}
	switch {
	case action == actionRollback && t.State != StateSuperseded:
		return nil, refusal(fmt.Sprintf("Cannot roll back to template %s: it is %s, and only a superseded template can be rolled back to.", t.label(), t.State),
			fmt.Errorf("custom: rollback to template %s: it is %s, not superseded: %w", id, t.State, errcode.ErrConflict))
	case t.State != StateCaptured && t.State != StateSuperseded:
		return nil, refusal(fmt.Sprintf("Cannot promote template %s: it is %s; only a captured or superseded template can be promoted.", t.label(), t.State),
			fmt.Errorf("custom: promote template %s: it is %s: %w", id, t.State, errcode.ErrConflict))
	}
	env, d, err := s.environment(ctx, t.Environment)
	if err != nil {
		return nil, err
	}
	if cur := envhook.SourceFingerprint(env, d); cur != t.SourceFingerprint {
		return nil, refusal(fmt.Sprintf("Cannot %s template %s: the image, target or account of environment %q changed since the capture; capture a new template.", action, t.label(), env.Name),
			fmt.Errorf("custom: %s template %s: environment %s's image, target or account changed since the capture: %w", action, id, env.ID, errSourceMismatch))
	}
	from := ""
	if env.ActiveTemplate != nil {
		from = env.ActiveTemplate.ID
	}
	ptr := &environment.ActiveTemplate{ID: t.ID, Identity: t.Identity, SourceFingerprint: t.SourceFingerprint}
	rev, err := s.swap(ctx, p, env, ptr)
	if err != nil {
		return nil, fmt.Errorf("custom: %s template %s: %w", action, id, err)
	}
	s.record(ctx, &Event{Environment: env.ID, Action: action, From: from, To: t.ID, Actor: p.ID, Revision: rev})
	s.reconcile(ctx, env.ID)
	if t, err = s.src.Templates.GetTemplate(ctx, t.ID); err != nil {
		return nil, fmt.Errorf("custom: template %s: %w", id, err)
	}
	return s.view(ctx, p, t), nil
}

// reconcile makes the states active and superseded of environment envID's
// templates follow its pointer, the one truth: the template it names is
// active, an active one it does not name is superseded; revoked, deleted
// and failed templates stay. It runs after every pointer change; as it
// reads the pointer after the change, concurrent changes converge on the
// last pointer. Failures are logged: the next change repairs them.
func (s *Service) reconcile(ctx context.Context, envID string) {
	env, err := s.src.Environments.GetEnvironment(ctx, envID)
	if err != nil {
		s.src.logger.Warn("custom: reading the pointer to reconcile template states", "environment", envID, "err", err)
		return
	}
	active := ""
	if env.ActiveTemplate != nil {
		active = env.ActiveTemplate.ID
	}
	list, err := s.src.Templates.ListTemplates(ctx, filter{Environment: envID})
	if err != nil {
		s.src.logger.Warn("custom: listing templates to reconcile their states", "environment", envID, "err", err)
		return
	}
	for _, t := range list {
		var want State
		switch {
		case t.ID == active && (t.State == StateCaptured || t.State == StateSuperseded):
			want = StateActive
		case t.ID != active && t.State == StateActive:
			want = StateSuperseded
		default:
			continue
		}
		if _, err := s.transition(ctx, t, func(t *Template) {
			if t.State == StateCaptured || t.State == StateSuperseded || t.State == StateActive {
				t.State = want
			}
		}); err != nil {
			s.src.logger.Warn("custom: template state", "template", t.ID, "state", want, "err", err)
		}
	}
}

// swap sets env's pointer to ptr (nil clears it) by compare-and-swap on
// env's revision and returns the new revision.
func (s *Service) swap(ctx context.Context, p authz.Principal, env *environment.Environment, ptr *environment.ActiveTemplate) (int64, error) {
	next := *env
	next.ActiveTemplate = ptr
	next.Revision = env.Revision + 1
	next.UpdatedAt = s.o.clock.Now().UTC()
	next.UpdatedBy = p.ID
	if err := s.src.Environments.UpdateEnvironment(ctx, &next, env.Revision); err != nil {
		if errors.Is(err, errcode.ErrConflict) {
			return 0, fmt.Errorf("environment %s changed since it was read (revision %d): %w: %w", env.ID, env.Revision, errcode.ErrConflict, err)
		}
		return 0, fmt.Errorf("environment %s: %w", env.ID, err)
	}
	return next.Revision, nil
}

// transition applies f to the stored template t, retrying on a
// concurrent version change.
func (s *Service) transition(ctx context.Context, t *Template, f func(*Template)) (*Template, error) {
	for range 8 {
		next := t.clone()
		f(next)
		next.Version = t.Version + 1
		next.UpdatedAt = s.o.clock.Now().UTC()
		err := s.src.Templates.UpdateTemplate(context.WithoutCancel(ctx), next)
		if err == nil {
			return next, nil
		}
		if !errors.Is(err, errcode.ErrConflict) {
			return nil, fmt.Errorf("custom: template %s: %w", t.ID, err)
		}
		if t, err = s.src.Templates.GetTemplate(ctx, t.ID); err != nil {
			return nil, fmt.Errorf("custom: template %s: %w", t.ID, err)
		}
	}
	return nil, fmt.Errorf("custom: template %s: too many concurrent changes: %w", t.ID, errcode.ErrConflict)
}

func (s *Service) record(ctx context.Context, e *Event) {
	e.At = s.o.clock.Now().UTC()
	if err := s.src.Templates.AppendEvent(context.WithoutCancel(ctx), e); err != nil {
		s.src.logger.Error("custom: recording a pointer change", "environment", e.Environment, "to", e.To, "err", err)
	}
}

// Revoke disables template id: it is never promoted again. If it is the
// active template the pointer is cleared (by compare-and-swap, as
// Promote): new leases use the configured image, there is no fall back to
// the previous template; running leases go on. With opts.Delete the
// template is deleted at the provider (drivers.TemplateDeleter) at once
// when no live lease uses it, with the receipt stored and the state
// deleted; otherwise the wish is recorded (DeleteWanted, DeleteNote says
// why) and Sweep retries it. A driver that cannot delete templates is
// refused with opts.Delete before anything changes (drivers.ErrUnsupported,
// IMG-7). Revoking a revoked template without Delete is an error wrapping
// errcode.ErrConflict. p needs authz.ActionSetup.
func (s *Service) Revoke(ctx context.Context, p authz.Principal, id string, opts RevokeOptions) (*Template, error) {
	t, err := s.load(ctx, p, authz.ActionSetup, id)
	if err != nil {
		return nil, err
	}
	switch {
	case t.State == StateDeleted:
		return nil, refusal(fmt.Sprintf("Cannot revoke template %s: it is deleted.", t.label()),
			fmt.Errorf("custom: revoke template %s: it is deleted: %w", id, errcode.ErrConflict))
	case t.State == StateRevoked && !opts.Delete:
		return nil, refusal(fmt.Sprintf("Template %s is already revoked.", t.label()),
			fmt.Errorf("custom: revoke template %s: already revoked: %w", id, errcode.ErrConflict))
	}
	env, d, err := s.environment(ctx, t.Environment)
	if err != nil {
		return nil, err
	}
	if opts.Delete && t.Identity != "" && !drivers.Effective(d, 0).Has(drivers.CapTemplateDelete) {
		return nil, fmt.Errorf("custom: revoke template %s with deletion: driver %q lacks capability %s: %w",
			id, d.Name(), drivers.CapTemplateDelete, drivers.ErrUnsupported)
	}
	if env.ActiveTemplate != nil && env.ActiveTemplate.ID == t.ID {
		rev, err := s.swap(ctx, p, env, nil)
		if err != nil {
			return nil, fmt.Errorf("custom: revoke template %s: %w", id, err)
		}
		s.record(ctx, &Event{Environment: env.ID, Action: actionRevoke, From: t.ID, Actor: p.ID, Revision: rev, Reason: opts.Reason})
	}
	if t.State != StateRevoked {
		now := s.o.clock.Now().UTC()
		t, err = s.transition(ctx, t, func(t *Template) {
			t.State, t.RevokedAt, t.RevokedBy, t.RevokeReason = StateRevoked, now, p.ID, opts.Reason
			t.DeleteWanted = opts.Delete && t.Identity != ""
		})
	} else {
		t, err = s.transition(ctx, t, func(t *Template) { t.DeleteWanted = t.Identity != "" })
	}
	if err != nil {
		return nil, err
	}
	if t.DeleteWanted {
		t = s.tryDelete(ctx, t)
	}
	return s.view(ctx, p, t), nil
}

// Sweep retries every wanted deletion (Revoke with Delete) whose template
// no live lease uses any more, storing the receipts; it returns how many
// templates it deleted. p needs authz.ActionSweep.
func (s *Service) Sweep(ctx context.Context, p authz.Principal) (int, error) {
	if err := s.src.authorizer.Authorize(ctx, p, authz.ActionSweep, resource("", "", "")); err != nil {
		return 0, fmt.Errorf("custom: sweep: %w", err)
	}
	list, err := s.src.Templates.ListTemplates(ctx, filter{DeleteWanted: true})
	if err != nil {
		return 0, fmt.Errorf("custom: sweep: %w", err)
	}
	n := 0
	for _, t := range list {
		if err := ctx.Err(); err != nil {
			return n, fmt.Errorf("custom: sweep: %w", err)
		}
		if s.tryDelete(ctx, t).State == StateDeleted {
			n++
		}
	}
	return n, nil
}

// tryDelete deletes t at the provider unless a live lease uses it (IMG-8),
// and stores the outcome: the receipt and StateDeleted, or the reason it
// waits in DeleteNote. It returns the template as stored.
func (s *Service) tryDelete(ctx context.Context, t *Template) *Template {
	note, rc, deleted := s.deleteAtProvider(ctx, t)
	next, err := s.transition(ctx, t, func(t *Template) {
		t.DeleteNote = note
		if deleted {
			t.State, t.DeleteWanted, t.DeleteReceipt = StateDeleted, false, &rc
		}
	})
	if err != nil {
		s.src.logger.Warn("custom: recording a template deletion", "template", t.ID, "err", err)
		return t
	}
	return next
}

func (s *Service) deleteAtProvider(ctx context.Context, t *Template) (note string, rc drivers.Receipt, deleted bool) {
	users, err := s.users(ctx, t)
	if err != nil {
		return "checking the leases that use it: " + err.Error(), rc, false
	}
	if len(users) > 0 {
		return fmt.Sprintf("waiting: live lease %s uses it; the sweep deletes it once no live lease does", users[0]), rc, false
	}
	env, d, err := s.environment(ctx, t.Environment)
	if err != nil {
		return err.Error(), rc, false
	}
	del, err := drivers.DriverAs[drivers.TemplateDeleter](d)
	if err != nil {
		return err.Error(), rc, false
	}
	id, err := images.ParseIdentity(t.Identity)
	if err != nil {
		return err.Error(), rc, false
	}
	cfg, err := secretcfg.ResolveSecrets(ctx, d.Schema(), env.Config, s.lookup)
	if err != nil {
		return "resolving the environment's secrets: " + err.Error(), rc, false
	}
	rc, err = del.DeleteTemplate(ctx, cfg, id)
	switch {
	case errors.Is(err, drivers.ErrInUse):
		return "waiting: the provider still uses it: " + err.Error(), rc, false
	case err != nil:
		return "provider deletion failed: " + err.Error(), rc, false
	case !rc.Confirmed:
		return "the provider's deletion was not confirmed: " + rc.Evidence, rc, false
	}
	return "", rc, true
}

func (s *Service) lookup(ctx context.Context, ref config.SecretRef) (string, error) {
	if s.src.Secrets == nil {
		return "", fmt.Errorf("custom: no secret resolver configured for %s: %w", ref, config.ErrCredentialsMissing)
	}
	return s.src.Secrets(ctx, ref)
}

// users returns the live leases of t's environment that use t: labelled
// with it, or recorded with its identity as their image.
func (s *Service) users(ctx context.Context, t *Template) ([]string, error) {
	list, err := s.src.LeaseRecords.ListLeases(ctx, lease.Filter{Environment: t.Environment, Live: true})
	if err != nil {
		return nil, err
	}
	d, _ := s.src.Drivers.Lookup(t.Driver)
	var out []string
	for _, l := range list {
		if l.Labels[labelTemplate] == t.ID {
			out = append(out, l.ID)
			continue
		}
		if d == nil {
			continue
		}
		if ref, err := d.Schema().Image(l.Config); err == nil {
			if id, ok := ref.Identity(); ok && id.String() == t.Identity {
				out = append(out, l.ID)
			}
		}
	}
	return out, nil
}

// refusal is err with message, a sentence for a person.
func refusal(message string, err error) error {
	return &errcode.Error{Message: message, Err: err}
}

// label names t for a person: its name, else its id.
func (t *Template) label() string {
	if t.Name != "" {
		return strconv.Quote(t.Name)
	}
	return t.ID
}
