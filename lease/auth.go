package lease

import (
	"context"
	"errors"
	"fmt"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/envhook"
)

// target authorizes p for req and returns the environment to lease; it
// fills req.Company, req.Workspace and req.Project from a scope. Saved environments come
// from the store through the manager's Assignments (never from the caller).
func (m *Manager) target(ctx context.Context, p authz.Principal, req *AcquireRequest) (*environment.Environment, error) {
	named := 0
	for _, set := range []bool{req.EnvironmentID != "", req.Scope != nil, req.draft != nil} {
		if set {
			named++
		}
	}
	if named != 1 {
		return nil, fmt.Errorf("lease: acquire: exactly one of an environment id, a scope and a draft is required: %w", errcode.ErrInvalid)
	}
	if req.draft != nil {
		r := authz.Resource{Kind: authz.ResourceKindEnvironment, Driver: req.draft.driver, Company: req.Company}
		// Through the Assignments, whose gate's instance settings decide
		// too (CFG-9).
		var err error
		if m.asg != nil {
			err = envhook.AdmitDraft(m.asg, ctx, p, req.draft.driver, req.Company, req.draft.config)
		} else {
			err = m.authorize(ctx, p, authz.ActionProbe, r)
		}
		if err != nil {
			return nil, fmt.Errorf("lease: draft acquire: %w", err)
		}
		return &environment.Environment{ID: "draft-" + randomHex(6), Name: "draft", Driver: req.draft.driver,
			Status: environment.StatusActive, Config: req.draft.config}, nil
	}
	if m.asg == nil {
		return nil, fmt.Errorf("lease: acquire: the manager has no Assignments (leasehook.Sources) to read environments and bindings from: %w", errcode.ErrInvalid)
	}
	if req.EnvironmentID != "" && req.Company == "" {
		return nil, fmt.Errorf("lease: acquire environment %s: company is required: %w", req.EnvironmentID, errcode.ErrInvalid)
	}
	required := req.Required
	if req.Policy.reusable() {
		required |= drivers.NewSet(drivers.CapReuse)
	}
	target, company, err := envhook.LeaseTarget(m.asg, ctx, p, req.Scope, req.EnvironmentID, req.Company, required)
	switch {
	case errors.Is(err, environment.ErrArchived):
		return nil, fmt.Errorf("lease: %w: %w", err, drivers.ErrUnavailable)
	case err != nil:
		return nil, fmt.Errorf("lease: %w", err)
	}
	req.Company = company
	if req.Scope != nil && req.Workspace == "" {
		req.Workspace = req.Scope.Workspace
	}
	if req.Scope != nil && req.Project == "" {
		req.Project = req.Scope.Project
	}
	if req.Scope != nil && req.Project != req.Scope.Project {
		return nil, fmt.Errorf("lease: acquire through %s: project %q is not the scope's: %w", req.Scope, req.Project, errcode.ErrInvalid)
	}
	return target.(*environment.Environment), nil
}

// authorize asks the Authorizer of the manager's Assignments (the catalog's),
// else authz.DefaultPolicy, whether p may perform a on r.
func (m *Manager) authorize(ctx context.Context, p authz.Principal, a authz.Action, r authz.Resource) error {
	if m.asg != nil {
		return envhook.Authorize(m.asg, ctx, p, a, r)
	}
	err := authz.DefaultPolicy{}.Authorize(ctx, p, a, r)
	if err != nil && !errors.Is(err, errcode.ErrDenied) {
		err = fmt.Errorf("%w: %w", authz.Denied(p, a, r), err)
	}
	return err
}

// leaseResource describes l for authorization.
func leaseResource(l *Lease) authz.Resource {
	return authz.Resource{Kind: authz.ResourceKindLease, ID: l.ID, Company: l.Company, Driver: l.Provider}
}

// authorizeLease decides a on lease l for p, who named it by id. A lease
// p may not read (authz.ActionRead, or a itself) reads as a missing
// one (notFound); one it may read but not act on is refused with an error
// wrapping errcode.ErrDenied that names only the id.
func (m *Manager) authorizeLease(ctx context.Context, p authz.Principal, a authz.Action, l *Lease) error {
	if m.authorize(ctx, p, a, leaseResource(l)) == nil {
		return nil
	}
	if a != authz.ActionRead && m.authorize(ctx, p, authz.ActionRead, leaseResource(l)) == nil {
		return fmt.Errorf("lease %s: %s may not %s it: %w", l.ID, p, a, errcode.ErrDenied)
	}
	return notFound(l.ID)
}

// notFound is the error for a lease that does not exist and for one the
// principal may not read alike: one sentinel, one text, naming only the id
// the caller gave (issue 22 item 7).
func notFound(id string) error {
	return &errcode.Error{Message: fmt.Sprintf("Could not find lease %s: it does not exist or you may not see it.", id),
		Err: fmt.Errorf("lease %s: %w", id, errcode.ErrNotFound)}
}

// load reads lease id for p, authorizing a (authorizeLease). A missing
// lease and one p may not read are the same notFound.
func (m *Manager) load(ctx context.Context, p authz.Principal, a authz.Action, id string) (*Lease, error) {
	l, err := m.store.GetLease(ctx, id)
	if errors.Is(err, errcode.ErrNotFound) {
		return nil, notFound(id)
	}
	if err != nil {
		return nil, fmt.Errorf("lease %s: %w", id, err)
	}
	if err := m.authorizeLease(ctx, p, a, l); err != nil {
		return nil, err
	}
	return l, nil
}

// Get returns lease id as p may see it: the full record for principals
// allowed authz.ActionReadConfig on it (instance admins and local
// operators under DefaultPolicy), else the redacted record (no config, no
// metadata; Redacted set) for those allowed ActionRead (principals of the
// lease's company), else an error wrapping errcode.ErrNotFound with the text a
// missing lease gives, naming nothing but the id (CFG-2, ASG-3, issue 22
// item 7).
func (m *Manager) Get(ctx context.Context, p authz.Principal, id string) (*Lease, error) {
	l, err := m.load(ctx, p, authz.ActionRead, id)
	if err != nil {
		return nil, err
	}
	return m.view(ctx, p, l), nil
}

// List returns the leases matching f that p may read (ActionRead on each),
// each as Get shows it to p, ordered as Store.ListLeases orders them.
func (m *Manager) List(ctx context.Context, p authz.Principal, f Filter) ([]*Lease, error) {
	ls, err := m.store.ListLeases(ctx, f)
	if err != nil {
		return nil, fmt.Errorf("lease: list: %w", err)
	}
	out := make([]*Lease, 0, len(ls))
	for _, l := range ls {
		if m.authorize(ctx, p, authz.ActionRead, leaseResource(l)) == nil {
			out = append(out, m.view(ctx, p, l))
		}
	}
	return out, nil
}

// view makes l, a lease struct a Store returned or the manager's version
// of one (nobody else holds it), a deep copy as p may see it (see Get):
// the maps of a lease the store returned are the store's (see Store),
// never the caller's.
func (m *Manager) view(ctx context.Context, p authz.Principal, l *Lease) *Lease {
	if m.authorize(ctx, p, authz.ActionReadConfig, leaseResource(l)) == nil {
		return l.own()
	}
	return l.redact()
}
