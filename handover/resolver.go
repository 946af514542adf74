package handover

import (
	"context"
	"fmt"
	"slices"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/controller"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/lease"
)

// secretResolver is the Service's hook for the runner controller, returned
// by New (see there): an unexported type, so that only the composer who
// built the Service can resolve secret values, which no principal asks
// for.
type secretResolver struct{ s *Service }

var _ controller.SecretResolver = secretResolver{}

// Check implements controller.SecretResolver (Service.check).
func (r secretResolver) Check(ctx context.Context, p authz.Principal, t controller.SecretTarget, uses []prp.SecretUse) error {
	return r.s.check(ctx, p, t, uses)
}

// Resolve implements controller.SecretResolver (Service.resolve).
func (r secretResolver) Resolve(ctx context.Context, t controller.SecretTarget, uses []prp.SecretUse) ([]string, error) {
	return r.s.resolve(ctx, t, uses)
}

// Check asks, for p, the question lease.Handle.Run asks of a task's
// secret uses before it starts the task: every use must be deliverable to
// the runner of lease leaseID of company. The lease must be an active
// lease of company (else the reason is lease_mismatch). A secret env key
// must be in the secret env map of the lease's config; a managed account
// needs p to be allowed authz.ActionUseAccount for company and a project
// auth check that matches exactly the lease's fingerprint and provider
// and the use's projects (AUTH-2; the error wraps ErrMismatch, and its
// reason, read with errcode.ReasonOf, names the part that did not).
// Nothing is read from the secret store.
func (s *Service) Check(ctx context.Context, p authz.Principal, company, leaseID string, uses []lease.SecretUse) error {
	return s.check(ctx, p, controller.SecretTarget{Lease: leaseID, Company: company}, controller.SecretUses(uses))
}

// check is the dispatch-time check of a task's secret uses (Check, and
// the resolver New returns as controller.SecretResolver.Check) for the
// runner session t.
func (s *Service) check(ctx context.Context, p authz.Principal, t controller.SecretTarget, uses []prp.SecretUse) error {
	for _, u := range uses {
		if u.Source == prp.SecretFromManagedAccount {
			if err := s.authorize(ctx, p, authz.ActionUseAccount, t.Company, u.Ref); err != nil {
				return err
			}
		}
	}
	_, err := s.refs(ctx, t, uses)
	if err != nil {
		s.log.Warn("secret hand-over refused at dispatch", "session", t.Session, "lease", t.Lease, "company", t.Company,
			"code", controller.CodeOfSecrets(err), "actor", p.ID)
	}
	return err
}

// resolve is the resolver's Resolve at delivery (see New): it checks the
// uses again (a project auth check cleared or replaced since the dispatch
// refuses the account now) and reads the values from the host's secret
// store, in the order of uses. Errors name references, never values. It
// answers for no principal: the dispatch was authorized.
func (s *Service) resolve(ctx context.Context, t controller.SecretTarget, uses []prp.SecretUse) ([]string, error) {
	refs, err := s.refs(ctx, t, uses)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(refs))
	for i, ref := range refs {
		v, err := s.src.Secrets.Get(ctx, ref)
		if err != nil {
			return nil, fmt.Errorf("handover: secret %s of lease %s: %w", uses[i].Ref, t.Lease, err)
		}
		out[i] = v
	}
	return out, nil
}

// refs checks the uses against t's lease and returns the secret
// reference of each.
func (s *Service) refs(ctx context.Context, t controller.SecretTarget, uses []prp.SecretUse) ([]config.SecretRef, error) {
	l, err := s.src.Leases.GetLease(ctx, t.Lease)
	switch {
	case err != nil:
		return nil, &codedError{reasonLeaseMismatch, fmt.Errorf("handover: lease %s of session %s: %w", t.Lease, t.Session, err)}
	case l.Company != t.Company:
		return nil, &codedError{reasonLeaseMismatch, fmt.Errorf("handover: lease %s is not of the session's company", t.Lease)}
	case l.Status != lease.StatusActive:
		return nil, &codedError{reasonLeaseMismatch, fmt.Errorf("handover: lease %s is %s, not active", t.Lease, l.Status)}
	}
	drv, err := s.src.Drivers.Lookup(l.Provider)
	if err != nil {
		return nil, fmt.Errorf("handover: lease %s: %w", t.Lease, err)
	}
	var envMaps []string
	for _, f := range drv.Schema().Fields {
		if f.Kind == config.KindSecretMap {
			envMaps = append(envMaps, f.Name)
		}
	}
	out := make([]config.SecretRef, len(uses))
	for i, u := range uses {
		switch u.Source {
		case prp.SecretFromEnvironment:
			found := false
			for _, f := range envMaps {
				if ref, ok := l.Config.SecretMapRefs(f)[u.Ref]; ok {
					out[i], found = ref, true
					break
				}
			}
			if !found {
				return nil, &codedError{reasonSecretUnknown, fmt.Errorf("handover: secret env %s: the environment of lease %s has no such secret: %w", u.Ref, t.Lease, errSecretUnknown)}
			}
		case prp.SecretFromManagedAccount:
			ref, err := ParseAccountRef(u.Ref)
			if err != nil {
				return nil, err
			}
			if err := s.match(ctx, l, drv.Schema(), t.Company, u); err != nil {
				return nil, err
			}
			out[i] = ref
		default:
			return nil, fmt.Errorf("handover: secret %s: source %q is unknown: %w", u.Ref, u.Source, errcode.ErrInvalid)
		}
	}
	return out, nil
}

// match checks the project auth check of u's account for lease l, whose
// driver has schema.
func (s *Service) match(ctx context.Context, l *lease.Lease, schema *config.Schema, company string, u prp.SecretUse) error {
	rec, err := s.src.Checks.GetAuthCheck(ctx, company, u.Ref)
	if err != nil {
		if !isNotFound(err) {
			return fmt.Errorf("handover: managed account %s: %w", u.Ref, err)
		}
		return &mismatchError{code: reasonCheckMissing, company: company, accountRef: u.Ref, detail: "no project auth check is recorded"}
	}
	prov := Provider{Driver: l.Provider, Account: s.o.providerAccount(schema, l.Config, l.Environment)}
	return rec.match(l.Fingerprint, prov, slices.Clone(u.Projects))
}
