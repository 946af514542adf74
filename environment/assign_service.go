package environment

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"time"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/clock"
)

// Assignments manages assignment bindings and resolves execution targets
// (ASG-1..5). It reads environments from the catalog's Store and drivers
// from the Registry, and keeps bindings in a BindingStore; a host gets it
// from berth.New (System.Assignments). The catalog shows the bindings of
// an environment in the delete's blast radius, clears them after the
// delete and protects the instance default (CFG-7, ASG-5), through
// unexported methods that answer for no principal. It is safe for
// concurrent use.
type Assignments struct {
	bindings BindingStore
	envs     Store
	reg      *drivers.Registry
	gate     *gate
	authz    authz.Authorizer
	log      *slog.Logger
	clock    clock.Clock
	// targets is envs when it is also bindings (one pointer) and a
	// targetReader, else nil.
	targets targetReader
}

// newAssignments returns the assignment service over bindings, the
// environments of envs and the drivers of reg (envhook.NewAssignments). It
// panics if one of them is nil (a programming error of berth). It reads
// the fields of opts it shares with the catalog (TestMode, Authorizer,
// Logger, Health, Settings) and ignores the catalog's own: berth.New
// gives both the same, so that they agree on test mode and read one
// health store and one instance settings Reader.
func newAssignments(bindings BindingStore, envs Store, reg *drivers.Registry, opts *options) *Assignments {
	if bindings == nil || envs == nil || reg == nil {
		panic("environment: the assignments need a binding store, an environment store and a driver registry")
	}
	cm := opts.common(reg)
	a := &Assignments{
		bindings: bindings, envs: envs, reg: reg,
		gate: cm.gate, authz: cm.authz, log: cm.log, clock: cm.clock,
	}
	// One value serves both only if it is one pointer (pointers compare
	// without panicking, whatever they point at).
	if tr, ok := envs.(targetReader); ok && reflect.TypeOf(envs).Kind() == reflect.Pointer && any(envs) == any(bindings) {
		a.targets = tr
	}
	return a
}

// Set binds req.EnvironmentID at req's kind and key for req.Company (ASG-1);
// it reads only those four fields of req (Company is required except for
// the instance default, which must have none). The company is part of the
// binding's identity: two companies bind the same key independently. baseRevision is the
// revision of the binding the change is based on: 0 creates a new
// binding (errcode.ErrConflict if one exists), n > 0 replaces revision n
// (errcode.ErrConflict if stale), AnyRevision creates or replaces whatever is
// stored. It needs ActionBind on the environment for req.Company (instance
// admins and local
// operators under DefaultPolicy; agents are denied). The environment must
// exist (errcode.ErrNotFound; reported as denied to principals who may not bind), be
// active (ErrArchived), and have a registered, available driver that is not
// a test driver outside test mode (drivers.ErrUnavailable).
// If the environment is deleted or archived while Set runs, Set removes the
// binding it wrote and fails, so no binding outlives its environment
// (ASG-5). It returns the stored binding.
func (a *Assignments) Set(ctx context.Context, p authz.Principal, req Binding, baseRevision int64) (*Binding, error) {
	b := Binding{BindingRef: req.BindingRef, EnvironmentID: req.EnvironmentID}
	if err := b.Validate(); err != nil {
		return nil, err
	}
	env, err := a.envs.GetEnvironment(ctx, req.EnvironmentID)
	if err != nil {
		res := authz.Resource{Kind: authz.ResourceKindEnvironment, ID: req.EnvironmentID, Company: req.Company}
		if aerr := a.authorize(ctx, p, authz.ActionBind, res); aerr != nil {
			return nil, aerr
		}
		return nil, fmt.Errorf("environment: cannot bind %s: %w", b, err)
	}
	res := resourceOf(env)
	res.Company = req.Company
	if err := a.authorize(ctx, p, authz.ActionBind, res); err != nil {
		return nil, err
	}
	stored, err := a.set(ctx, p, b, env, baseRevision)
	if err != nil {
		a.log.LogAttrs(ctx, slog.LevelWarn, "environment binding failed",
			slog.String("binding", b.String()), slog.String("environment", env.ID),
			slog.String("actor", p.ID), slog.String("role", string(p.Role)), slog.String("error", err.Error()))
		return nil, err
	}
	a.log.LogAttrs(ctx, slog.LevelInfo, "environment bound",
		slog.String("binding", stored.String()), slog.String("environment", env.ID),
		slog.String("environmentName", env.Name), slog.Int64("revision", stored.Revision),
		slog.String("actor", p.ID), slog.String("role", string(p.Role)))
	return stored, nil
}

// maxSetAttempts bounds how often Set with AnyRevision retries after losing
// a race with another writer.
const maxSetAttempts = 5

func (a *Assignments) set(ctx context.Context, p authz.Principal, b Binding, env *Environment, base int64) (*Binding, error) {
	if why := a.unusable(env); why != nil {
		return nil, fmt.Errorf("environment: cannot bind %s to environment %s: %w", b, labelOf(env), why)
	}
	if base < AnyRevision {
		return nil, fmt.Errorf("environment: %s: field \"baseRevision\": %d is not a revision: %w", b, base, errcode.ErrInvalid)
	}
	now := a.clock.Now().UTC()
	var err error
	for range maxSetAttempts {
		var put Binding
		put, err = a.prepare(ctx, p, b, base, now)
		if err != nil {
			return nil, err
		}
		err = a.bindings.PutBinding(ctx, &put, put.Revision-1)
		if err == nil {
			return a.confirm(ctx, &put)
		}
		if base != AnyRevision || !(errors.Is(err, errcode.ErrConflict) || errors.Is(err, errcode.ErrNotFound)) {
			break
		}
	}
	return nil, fmt.Errorf("environment: binding %s: %w", b, err)
}

// prepare returns the binding to store for base: a new one at revision 1,
// or the next revision of the stored one, which keeps its company and
// creation stamp.
func (a *Assignments) prepare(ctx context.Context, p authz.Principal, b Binding, base int64, now time.Time) (Binding, error) {
	put := b
	put.UpdatedAt, put.UpdatedBy = now, p.ID
	if base == 0 {
		put.Revision, put.CreatedAt, put.CreatedBy = 1, now, p.ID
		return put, nil
	}
	cur, err := a.bindings.GetBinding(ctx, b.BindingRef)
	switch {
	case errors.Is(err, errcode.ErrNotFound) && base == AnyRevision:
		put.Revision, put.CreatedAt, put.CreatedBy = 1, now, p.ID
		return put, nil
	case err != nil:
		return put, fmt.Errorf("environment: binding %s: %w", b, err)
	}
	if base != AnyRevision && cur.Revision != base {
		return put, fmt.Errorf("environment: %s: stale revision %d, stored revision is %d: %w", cur, base, cur.Revision, errcode.ErrConflict)
	}
	put.Revision, put.CreatedAt, put.CreatedBy = cur.Revision+1, cur.CreatedAt, cur.CreatedBy
	return put, nil
}

// confirm re-reads the environment after a binding was stored: if it was
// deleted or archived meanwhile, the binding is removed again. Together with
// Catalog.Delete clearing bindings after removing the record, no binding
// outlives its environment.
func (a *Assignments) confirm(ctx context.Context, b *Binding) (*Binding, error) {
	env, err := a.envs.GetEnvironment(ctx, b.EnvironmentID)
	var why error
	switch {
	case errors.Is(err, errcode.ErrNotFound):
		why = fmt.Errorf("environment %s was deleted meanwhile: %w", b.EnvironmentID, errcode.ErrNotFound)
	case err != nil:
		why = err
	case env.Status != StatusActive:
		why = fmt.Errorf("environment %s was archived meanwhile: %w", labelOf(env), ErrArchived)
	}
	if why == nil {
		return b, nil
	}
	if derr := a.bindings.DeleteBinding(context.WithoutCancel(ctx), b.BindingRef, b.Revision); derr != nil && !errors.Is(derr, errcode.ErrNotFound) {
		why = errors.Join(why, fmt.Errorf("removing the binding again failed: %w", derr))
	}
	return nil, fmt.Errorf("environment: binding %s: %w", b, why)
}

// unusable returns why env cannot be a working target, ignoring
// capabilities: archived, driver not registered, test driver outside test
// mode, provider unavailable. It does no I/O.
func (a *Assignments) unusable(env *Environment) error {
	if env.Status != StatusActive {
		return fmt.Errorf("it is %s: %w", env.Status, ErrArchived)
	}
	return a.gate.driverStatus(env.Driver)
}

// Clear removes the binding ref at baseRevision (AnyRevision: whatever is
// stored). It needs ActionBind for ref.Company, asked before anything is
// read. A missing binding is errcode.ErrNotFound; a stale revision is errcode.ErrConflict.
func (a *Assignments) Clear(ctx context.Context, p authz.Principal, ref BindingRef, baseRevision int64) error {
	if err := a.authorize(ctx, p, authz.ActionBind, bindingResource(ref)); err != nil {
		return err
	}
	b, err := a.bindings.GetBinding(ctx, ref)
	if err != nil {
		return fmt.Errorf("environment: clearing the %s: %w", Binding{BindingRef: ref}, err)
	}
	if baseRevision == AnyRevision {
		baseRevision = b.Revision
	}
	if err := a.bindings.DeleteBinding(ctx, ref, baseRevision); err != nil {
		return fmt.Errorf("environment: clearing %s: %w", b, err)
	}
	a.log.LogAttrs(ctx, slog.LevelInfo, "environment binding cleared",
		slog.String("binding", b.String()), slog.String("environment", b.EnvironmentID),
		slog.String("actor", p.ID), slog.String("role", string(p.Role)))
	return nil
}

// Show returns the binding ref. It needs ActionRead for ref.Company, asked
// before anything is read. A missing binding and one the principal may not
// read are one answer, an error wrapping errcode.ErrNotFound that names only ref
// (authz's rule: a record the principal may not read is reported as
// missing), so a refusal tells nothing of another company's bindings.
func (a *Assignments) Show(ctx context.Context, p authz.Principal, ref BindingRef) (*Binding, error) {
	if a.authz.Authorize(ctx, p, authz.ActionRead, bindingResource(ref)) != nil {
		return nil, missingBinding(ref)
	}
	b, err := a.bindings.GetBinding(ctx, ref)
	switch {
	case errors.Is(err, errcode.ErrNotFound):
		return nil, missingBinding(ref)
	case err != nil:
		return nil, fmt.Errorf("environment: reading the %s: %w", Binding{BindingRef: ref}, err)
	}
	return b, nil
}

// missingBinding is Show's answer for a binding that is missing or that
// the principal may not read.
func missingBinding(ref BindingRef) error {
	return fmt.Errorf("environment: no %s: %w", Binding{BindingRef: ref}, errcode.ErrNotFound)
}

// List returns the bindings matching f that p may read (ActionRead for each
// binding's company), sorted by kind, then key, then company.
func (a *Assignments) List(ctx context.Context, p authz.Principal, f BindingFilter) ([]*Binding, error) {
	if err := a.authorize(ctx, p, authz.ActionRead, authz.Resource{Kind: authz.ResourceKindBinding, Company: f.Company}); err != nil {
		return nil, err
	}
	bs, err := a.bindings.ListBindings(ctx, f)
	if err != nil {
		return nil, fmt.Errorf("environment: list bindings: %w", err)
	}
	out := bs[:0]
	for _, b := range bs {
		if a.authz.Authorize(ctx, p, authz.ActionRead, bindingResource(b.BindingRef)) == nil {
			out = append(out, b)
		}
	}
	return out, nil
}

// environmentUsage is the catalog's hook (newCatalog): the bindings that
// point at envID, as references of kind "binding" (CFG-7). It reads the
// binding store only and answers for no principal: the catalog authorized
// the blast radius or the delete.
func (a *Assignments) environmentUsage(ctx context.Context, envID string) (Usage, error) {
	bs, err := a.bindings.ListBindings(ctx, BindingFilter{EnvironmentID: envID})
	if err != nil {
		return Usage{}, fmt.Errorf("environment: bindings of %s: %w", envID, err)
	}
	var u Usage
	for _, b := range bs {
		u.Assignments = append(u.Assignments, Reference{
			Kind: "binding", ID: b.BindingRef.id(), Company: b.Company,
			Detail: fmt.Sprintf("%s, revision %d", b, b.Revision),
		})
	}
	return u, nil
}

// id is the Reference.ID of the binding in a blast radius and its
// authorization resource id: "workspace:ws_1", "project:p_1", "agent:a_1"
// or "instance_default".
func (ref BindingRef) id() string {
	if ref.Kind == BindingInstanceDefault {
		return string(ref.Kind)
	}
	return string(ref.Kind) + ":" + ref.Key
}

// clearEnvironment is the catalog's hook (newCatalog): it removes every
// binding of envID once the environment is deleted (ASG-5). It is
// idempotent.
func (a *Assignments) clearEnvironment(ctx context.Context, envID string) error {
	n, err := a.bindings.DeleteEnvironmentBindings(ctx, envID)
	if err != nil {
		return fmt.Errorf("environment: clearing the bindings of %s: %w", envID, err)
	}
	a.log.LogAttrs(ctx, slog.LevelInfo, "environment bindings cleared",
		slog.String("environment", envID), slog.Int("count", n))
	return nil
}

// protected is the catalog's hook (newCatalog): it reports that env is the
// instance default and must not be deleted (CFG-7): it returns a reason
// when the instance default binding points at env, "" otherwise. When the
// binding store cannot be read (ctx ended included) it returns a reason
// too (a delete is never allowed on a guess). It reads with ctx.
func (a *Assignments) protected(ctx context.Context, env *Environment) string {
	b, err := a.bindings.GetBinding(ctx, BindingRef{Kind: BindingInstanceDefault})
	switch {
	case errors.Is(err, errcode.ErrNotFound):
		return ""
	case err != nil:
		return fmt.Sprintf("cannot tell whether it is the instance default: %v", err)
	case b.EnvironmentID == env.ID:
		return "it is the instance default; bind another environment as the instance default or clear it first"
	}
	return ""
}

func bindingResource(ref BindingRef) authz.Resource {
	return authz.Resource{Kind: authz.ResourceKindBinding, ID: ref.id(), Company: ref.Company}
}

// authorize asks the Authorizer and makes sure a refusal wraps ErrDenied.
func (a *Assignments) authorize(ctx context.Context, p authz.Principal, act authz.Action, r authz.Resource) error {
	err := a.authz.Authorize(ctx, p, act, r)
	if err == nil {
		return nil
	}
	if !errors.Is(err, errcode.ErrDenied) {
		err = fmt.Errorf("%w: %w", authz.Denied(p, act, r), err)
	}
	if act.IsMutation() {
		a.log.LogAttrs(ctx, slog.LevelWarn, "environment action denied",
			slog.String("action", string(act)), slog.String("resource", r.String()),
			slog.String("actor", p.ID), slog.String("role", string(p.Role)))
	}
	return err
}
