package environment

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/errcode"
)

// scopeKey returns s's key for kind, and whether the scope has one (the
// instance default always applies).
func scopeKey(s authz.Scope, kind BindingKind) (string, bool) {
	switch kind {
	case BindingWorkspace:
		return s.Workspace, s.Workspace != ""
	case BindingProject:
		return s.Project, s.Project != ""
	case BindingAgent:
		return s.Agent, s.Agent != ""
	}
	return "", true
}

// Resolution is the execution target of a scope (ASG-1): the binding that
// won and the environment it points at, checked usable for the required
// capabilities at resolution time. The lease layer resolves its own
// (lease.Manager.Acquire) and never takes one from a caller; a host checks
// a lease against one with Resolution.CheckLease (ASG-4).
type Resolution struct {
	Scope authz.Scope `json:"scope"`
	// Binding is the binding that won.
	Binding Binding `json:"binding"`
	// Environment is the bound environment's record; its config holds
	// secret references only (the lease manager resolves the values).
	Environment *Environment `json:"environment"`
	// Capabilities is the effective capability set of the environment's
	// driver; it covers Required.
	Capabilities drivers.Set `json:"capabilities"`
	Required     drivers.Set `json:"required"`
}

// Resolve returns the execution target of scope (ASG-1): the bound
// environment of the strongest binding that exists, in the order workspace,
// project, agent default, instance default. The winning binding must be
// usable, else Resolve returns an *Error naming it and never tries a
// weaker binding or the local host (ASG-2): its company must be the
// scope's (ErrDenied otherwise, ASG-3); the environment must exist
// (errcode.ErrNotFound), be active (ErrArchived) and have a registered, available
// driver that is not a test driver outside test mode
// (drivers.ErrUnavailable), a config its driver still accepts, and an
// effective capability set covering required (drivers.ErrUnsupported; the
// error names the missing capabilities, CAP-4). When no binding applies it
// returns an error wrapping ErrNoBinding (and so errcode.ErrNotFound). A store error
// is returned, never skipped. Resolve needs ActionRead on the bindings of
// the scope's company (Resource Kind authz.ResourceKindBinding, Company and Scope
// set); a binding of another company is refused without naming that
// company or its environment. It does no I/O beyond the two stores: it
// never calls a provider (CAP-1). Leasing through a scope is
// lease.Manager.Acquire, which resolves the same way.
func (a *Assignments) Resolve(ctx context.Context, p authz.Principal, scope authz.Scope, required drivers.Set) (*Resolution, error) {
	if scope.Company == "" {
		return nil, fmt.Errorf("environment: resolve: field \"company\": required: %w", errcode.ErrInvalid)
	}
	sc := scope
	if err := a.authorize(ctx, p, authz.ActionRead, authz.Resource{Kind: authz.ResourceKindBinding, Company: scope.Company, Scope: &sc}); err != nil {
		return nil, err
	}
	res, _, err := a.resolve(ctx, scope, required, false)
	return res, err
}

// resolve is Resolve without authorization.
//
// With withBindings, bs are the bindings that point at the resolved
// environment when they could be read with it (a targetReader), else nil.
func (a *Assignments) resolve(ctx context.Context, scope authz.Scope, required drivers.Set, withBindings bool) (res *Resolution, bs []*Binding, err error) {
	if scope.Company == "" {
		return nil, nil, fmt.Errorf("environment: resolve: field \"company\": required: %w", errcode.ErrInvalid)
	}
	for _, kind := range bindingKinds() {
		key, ok := scopeKey(scope, kind)
		if !ok {
			continue
		}
		ref := BindingRef{Kind: kind, Company: scope.Company, Key: key}
		if kind == BindingInstanceDefault {
			ref.Company = ""
		}
		b, err := a.bindings.GetBinding(ctx, ref)
		if errors.Is(err, errcode.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("environment: resolve for %s: reading the %s binding: %w", scope, ref, err)
		}
		res, bs, err := a.check(ctx, scope, b, required, withBindings)
		if err != nil {
			a.log.LogAttrs(ctx, slog.LevelWarn, "environment resolution refused",
				slog.String("scope", scope.String()), slog.String("binding", b.String()),
				slog.String("environment", b.EnvironmentID), slog.String("error", err.Error()))
			return nil, nil, err
		}
		return res, bs, nil
	}
	return nil, nil, fmt.Errorf("environment: resolve for %s: no workspace, project or agent binding and no instance default: %w", scope, ErrNoBinding)
}

// check returns the resolution of scope through b, or the *Error that
// says why b cannot be used, and, with withBindings, the bindings of the
// environment when they could be read with it (targetByID).
func (a *Assignments) check(ctx context.Context, scope authz.Scope, b *Binding, required drivers.Set, withBindings bool) (*Resolution, []*Binding, error) {
	refuse := func(env string, err error, format string, args ...any) error {
		bc := *b
		return &Error{Binding: &bc, Environment: env, Reason: fmt.Sprintf(format, args...), Err: err}
	}
	if b.Company != "" && b.Company != scope.Company {
		// Name neither the other company nor its environment (ASG-3).
		return nil, nil, &Error{Binding: &Binding{BindingRef: b.BindingRef}, Environment: "(not shown)", Err: errcode.ErrDenied,
			Reason: fmt.Sprintf("the binding belongs to another company and cannot be used by company %q (ASG-3)", scope.Company)}
	}
	var env *Environment
	var bs []*Binding
	var err error
	if withBindings {
		env, bs, err = a.targetByID(ctx, b.EnvironmentID)
	} else {
		env, err = a.envs.GetEnvironment(ctx, b.EnvironmentID)
	}
	if errors.Is(err, errcode.ErrNotFound) {
		return nil, nil, refuse(b.EnvironmentID, errcode.ErrNotFound, "the bound environment no longer exists")
	}
	if err != nil {
		return nil, nil, fmt.Errorf("environment: %s: reading environment %s: %w", b, b.EnvironmentID, err)
	}
	// The one gate (CAP-3): archived, driver, test mode, provider health
	// last measured, config, capabilities.
	_, eff, err := a.gate.check(ctx, env, required)
	var ue *Error
	if errors.As(err, &ue) && ue.unusable {
		bc := *b
		return nil, nil, &Error{Binding: &bc, Environment: ue.Environment, Reason: ue.Reason, Missing: ue.Missing, Err: ue.Err}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("environment: %s: %w", b, err)
	}
	return &Resolution{Scope: scope, Binding: *b, Environment: env, Capabilities: eff, Required: required}, bs, nil
}

// CheckLease is the ASG-4 check that the lease layer runs before it uses a
// lease for the resolved target: the lease must be of the resolved
// environment and of the resolution's company. It returns nil when both
// match, else an error wrapping ErrTargetMismatch (and so errcode.ErrConflict) that
// names the binding, the resolved environment and company, and the lease's;
// an empty value on either side is a mismatch, never a guess. It is pure:
// no I/O.
func (res *Resolution) CheckLease(leaseEnvironmentID, leaseCompany string) error {
	if res == nil || res.Environment == nil {
		return fmt.Errorf("environment: lease of environment %q for company %q checked without a resolution (ASG-4): %w",
			leaseEnvironmentID, leaseCompany, ErrTargetMismatch)
	}
	var why []string
	if res.Environment.ID == "" || leaseEnvironmentID != res.Environment.ID {
		why = append(why, fmt.Sprintf("the lease is of environment %q, the resolution is environment %s", leaseEnvironmentID, labelOf(res.Environment)))
	}
	if res.Scope.Company == "" || leaseCompany != res.Scope.Company {
		why = append(why, fmt.Sprintf("the lease is for company %q, the resolution for company %q", leaseCompany, res.Scope.Company))
	}
	if len(why) == 0 {
		return nil
	}
	return fmt.Errorf("environment: %s: %s (ASG-4): %w", res.Binding, strings.Join(why, "; "), ErrTargetMismatch)
}
