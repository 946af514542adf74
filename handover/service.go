package handover

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/internal/controller"
	"github.com/berthdev/berth/internal/handoverhook"
	"github.com/berthdev/berth/internal/leasehook"
	"github.com/berthdev/berth/lease"
)

// Checker is the project auth check the host implements (berth cannot
// know the agent harness: the seed's check_project_auth). CheckProjectAuth
// is asked whether the managed account check.AccountRef may be used by
// check.Company's check.Projects on sandboxes of check.Provider made from
// a config of check.Fingerprint (the prepared environment
// check.Environment), for p, the principal who prepares it: check is the
// pending record PrepareManagedAccount just stored (every field set but
// the answer's). It holds references, never the account's value; the host
// resolves the account itself if its check needs it. CheckProjectAuth
// returns the answer: StatusSucceeded or StatusFailed with a message (why
// it failed, or a note on success; at most 1024 bytes are kept), or
// StatusPending when the host answers later (RecordResult); or an error
// when the check could not run (the record then says failed). Any other
// status is recorded as failed. It honours ctx and never puts a secret in
// its message or error.
type Checker interface {
	CheckProjectAuth(ctx context.Context, p authz.Principal, check AuthCheck) (status Status, message string, err error)
}

// sources are what a Service reads and writes (internal/handoverhook
// documents each). Every field is required.
type sources struct {
	// Checks stores the project auth check records.
	Checks Store
	// Environments and Drivers give the prepared environment's
	// fingerprint and provider.
	Environments environment.Store
	Drivers      *drivers.Registry
	// Leases give a session's lease (its fingerprint, provider, company
	// and the secret env map of its config) at dispatch.
	Leases lease.Store
	// Secrets is the host's secret store the values are read from at
	// delivery.
	Secrets environment.SecretStore
}

// options configure a Service (internal/handoverhook documents each);
// nil means every default.
type options struct {
	// Authorizer decides ActionAuthCheck and ActionUseAccount. Default:
	// authz.DefaultPolicy.
	Authorizer authz.Authorizer
	// Checker is the host's project auth check. Default: none, and a
	// preparation stays pending until RecordResult stores the host's
	// answer.
	Checker Checker
	// Logger receives one line per preparation, answer, clear and refused
	// hand-over; never a secret. Default: discard.
	Logger *slog.Logger

	// providerAccount names the provider account of a config of a driver
	// with the given schema (see Provider). Default: defaultProviderAccount.
	providerAccount func(schema *config.Schema, cfg config.Config, environmentID string) string
	// clock stamps preparations and answers (tests set it). Default: the
	// wall clock.
	clock clock.Clock
}

// Service prepares managed accounts (AUTH-2) and resolves the secrets of
// runner tasks: it implements controller.SecretResolver. Safe for
// concurrent use.
type Service struct {
	src  sources
	o    options
	log  *slog.Logger
	auth authz.Authorizer
}

func init() {
	handoverhook.New = func(src handoverhook.Sources) (any, controller.SecretResolver, error) {
		s := sources{Environments: src.Environments, Drivers: src.Drivers, Leases: src.Leases, Secrets: src.Secrets}
		s.Checks, _ = src.Checks.(Store)
		o := &options{Authorizer: src.Authorizer, Logger: src.Logger}
		o.Checker, _ = src.Checker.(Checker)
		svc, res, err := newService(s, o)
		if err != nil {
			return nil, nil, err
		}
		return svc, res, nil
	}
}

// newService returns a Service over src, and the hook the runner
// controller needs from it: the controller.SecretResolver to give
// controller.New. The resolver's Check is Service.Check's (authorized
// with the dispatching principal); its Resolve returns plaintext secret
// values at delivery, for no principal (the dispatch was authorized), so it
// is handed to berth.New (internal/handoverhook) and is no method of the
// Service, which anyone holding it could call.
func newService(src sources, opts *options) (*Service, controller.SecretResolver, error) {
	switch {
	case src.Checks == nil:
		return nil, nil, errors.New("handover: sources: field Checks is required")
	case src.Environments == nil:
		return nil, nil, errors.New("handover: sources: field Environments is required")
	case src.Drivers == nil:
		return nil, nil, errors.New("handover: sources: field Drivers is required")
	case src.Leases == nil:
		return nil, nil, errors.New("handover: sources: field Leases is required")
	case src.Secrets == nil:
		return nil, nil, errors.New("handover: sources: field Secrets is required")
	}
	var o options
	if opts != nil {
		o = *opts
	}
	if o.Authorizer == nil {
		o.Authorizer = authz.DefaultPolicy{}
	}
	if o.providerAccount == nil {
		o.providerAccount = defaultProviderAccount
	}
	if o.clock == nil {
		o.clock = clock.Real{}
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	svc := &Service{src: src, o: o, log: log, auth: o.Authorizer}
	return svc, secretResolver{svc}, nil
}

// defaultProviderAccount returns the provider account of cfg: the
// reference held by the schema's AccountField (Daytona's API key,
// "secret:ID@vN"), or environmentID for drivers without provider accounts.
func defaultProviderAccount(schema *config.Schema, cfg config.Config, environmentID string) string {
	if schema != nil && schema.AccountField != "" {
		if ref, ok := cfg.SecretRef(schema.AccountField); ok {
			return ref.String()
		}
	}
	return environmentID
}

func (s *Service) now() time.Time { return s.o.clock.Now().UTC().Truncate(time.Microsecond) }

func (s *Service) authorize(ctx context.Context, p authz.Principal, a authz.Action, company, ref string) error {
	r := authz.Resource{Kind: authz.ResourceKindManagedAccount, ID: ref, Company: company}
	if err := s.auth.Authorize(ctx, p, a, r); err != nil {
		if !errors.Is(err, errcode.ErrDenied) {
			err = fmt.Errorf("%w: %w", authz.Denied(p, a, r), err)
		}
		return fmt.Errorf("handover: %w", err)
	}
	return nil
}

// authorizeRecord authorizes p (authz.ActionAuthCheck) on the record
// of (company, accountRef) that it names: a principal who may not read it
// (authz.ActionRead on the managed account of company) gets
// checkNotFound, as for a missing record; one who may read it but not act
// on it is denied (issue 22 item 7).
func (s *Service) authorizeRecord(ctx context.Context, p authz.Principal, company, accountRef string) error {
	err := s.authorize(ctx, p, authz.ActionAuthCheck, company, accountRef)
	if err == nil {
		return nil
	}
	r := authz.Resource{Kind: authz.ResourceKindManagedAccount, ID: accountRef, Company: company}
	if s.auth.Authorize(ctx, p, authz.ActionRead, r) != nil {
		return checkNotFound(company, accountRef)
	}
	return err
}

// checkNotFound is the error for a missing record of (company, accountRef)
// and for one the caller may not read alike: one sentinel, one text,
// naming only what the caller gave.
func checkNotFound(company, accountRef string) error {
	return fmt.Errorf("handover: project auth check of %s for company %q: %w", accountRef, company, errcode.ErrNotFound)
}

// hideMissing turns a store's not found into checkNotFound.
func hideMissing(err error, company, accountRef string) error {
	if isNotFound(err) {
		return checkNotFound(company, accountRef)
	}
	return err
}

// subject returns the fingerprint and provider of environment id.
func (s *Service) subject(ctx context.Context, id string) (*environment.Environment, string, Provider, error) {
	env, err := s.src.Environments.GetEnvironment(ctx, id)
	if err != nil {
		return nil, "", Provider{}, fmt.Errorf("handover: environment %s: %w", id, err)
	}
	drv, err := s.src.Drivers.Lookup(env.Driver)
	if err != nil {
		return nil, "", Provider{}, fmt.Errorf("handover: environment %s (%s): %w", env.ID, env.Name, err)
	}
	fp, err := leasehook.Fingerprint(drv, env) // with the active template's image (IMG-8)
	if err != nil {
		return nil, "", Provider{}, fmt.Errorf("handover: environment %s (%s): %w", env.ID, env.Name, err)
	}
	return env, fp, Provider{Driver: env.Driver, Account: s.o.providerAccount(drv.Schema(), env.Config, env.ID)}, nil
}

// PrepareManagedAccount prepares the hand-over of managed account
// accountRef ("secret:ID@vN") to company's projects on sandboxes of
// environment environmentID (AUTH-2): it authorizes p
// (authz.ActionAuthCheck), replaces any earlier record of (company,
// accountRef) with a pending one for the environment's current
// fingerprint, provider and the sorted project set, so that the old
// validation is gone whatever the check says, then runs the host's
// Checker and stores its answer (failed, with the error, when the check
// could not run; the error is returned too). Without a Checker, or when
// it answers StatusPending, the record stays pending for RecordResult. An
// answer that a newer preparation overtook is not stored (ErrStale).
func (s *Service) PrepareManagedAccount(ctx context.Context, p authz.Principal, company, accountRef, environmentID string, projects []string) (AuthCheck, error) {
	if company == "" {
		return AuthCheck{}, fmt.Errorf("handover: prepare managed account %s: field company is empty: %w", accountRef, errcode.ErrInvalid)
	}
	if _, err := ParseAccountRef(accountRef); err != nil {
		return AuthCheck{}, err
	}
	for _, pr := range projects {
		if pr == "" || len(pr) > 256 {
			return AuthCheck{}, fmt.Errorf("handover: prepare managed account %s: field projects holds an empty or too long id: %w", accountRef, errcode.ErrInvalid)
		}
	}
	if err := s.authorize(ctx, p, authz.ActionAuthCheck, company, accountRef); err != nil {
		return AuthCheck{}, err
	}
	env, fp, prov, err := s.subject(ctx, environmentID)
	if err != nil {
		return AuthCheck{}, err
	}
	var b [12]byte
	_, _ = rand.Read(b[:])
	rec := AuthCheck{Company: company, AccountRef: accountRef, Version: checkVersion, Status: StatusPending,
		Fingerprint: fp, Provider: prov, Projects: normalizeProjects(projects), Environment: env.ID,
		Preparation: "prep_" + hex.EncodeToString(b[:]), PreparedAt: s.now(), PreparedBy: p.ID}
	if err := s.src.Checks.PutAuthCheck(ctx, rec); err != nil {
		return AuthCheck{}, fmt.Errorf("handover: prepare managed account %s of company %q: %w", accountRef, company, err)
	}
	s.log.Info("managed account prepared", "company", company, "account", accountRef, "environment", env.ID,
		"fingerprint", fp, "provider", prov.text(), "projects", rec.Projects, "actor", p.ID)
	if s.o.Checker == nil {
		return rec, nil
	}
	st, msg, cerr := s.o.Checker.CheckProjectAuth(ctx, p, cloneCheck(rec))
	switch {
	case cerr != nil:
		st, msg = StatusFailed, "the project auth check could not run: "+cerr.Error()
	case st == StatusPending:
		return rec, nil
	case st != StatusSucceeded:
		st = StatusFailed
	}
	done, err := s.complete(context.WithoutCancel(ctx), rec, st, msg, p.ID)
	if err != nil {
		return rec, errors.Join(err, cerr)
	}
	if cerr != nil {
		return done, fmt.Errorf("handover: project auth check of %s for company %q: %w", accountRef, company, cerr)
	}
	return done, nil
}

// complete stores the answer st (succeeded or failed) with msg to rec's
// preparation.
func (s *Service) complete(ctx context.Context, rec AuthCheck, st Status, msg string, by string) (AuthCheck, error) {
	if len(msg) > 1024 {
		msg = msg[:1024]
	}
	done, err := s.src.Checks.CompleteAuthCheck(ctx, rec.Company, rec.AccountRef, rec.Preparation, st, s.now(), by, msg)
	if err != nil {
		return AuthCheck{}, err
	}
	s.log.Info("project auth check answered", "company", rec.Company, "account", rec.AccountRef, "preparation", rec.Preparation, "status", st, "actor", by)
	return done, nil
}

// RecordResult stores the host's answer to preparation prep of (company,
// accountRef), for hosts whose check answers later than the preparation
// returns: status StatusSucceeded or StatusFailed (another is
// errcode.ErrInvalid), and message, why it failed or a note on success
// (no secret; at most 1024 bytes are kept). It authorizes p
// (authz.ActionAuthCheck); an answer for a preparation that a newer one
// replaced is ErrStale and stores nothing. A record p may not read is
// errcode.ErrNotFound, as a missing one.
func (s *Service) RecordResult(ctx context.Context, p authz.Principal, company, accountRef, prep string, status Status, message string) (AuthCheck, error) {
	if status != StatusSucceeded && status != StatusFailed {
		return AuthCheck{}, fmt.Errorf("handover: record the project auth check of %s for company %q: field status %q: want succeeded or failed: %w", accountRef, company, status, errcode.ErrInvalid)
	}
	if err := s.authorizeRecord(ctx, p, company, accountRef); err != nil {
		return AuthCheck{}, err
	}
	rec, err := s.complete(ctx, AuthCheck{Company: company, AccountRef: accountRef, Preparation: prep}, status, message, p.ID)
	return rec, hideMissing(err, company, accountRef)
}

// Get returns the record of (company, accountRef) after authorizing p
// (authz.ActionAuthCheck); errcode.ErrNotFound if there is none, and the
// same error (one text) if p may not read it.
func (s *Service) Get(ctx context.Context, p authz.Principal, company, accountRef string) (AuthCheck, error) {
	if err := s.authorizeRecord(ctx, p, company, accountRef); err != nil {
		return AuthCheck{}, err
	}
	rec, err := s.src.Checks.GetAuthCheck(ctx, company, accountRef)
	return rec, hideMissing(err, company, accountRef)
}

// List returns company's records (every company's for "") after
// authorizing p (authz.ActionAuthCheck).
func (s *Service) List(ctx context.Context, p authz.Principal, company string) ([]AuthCheck, error) {
	if err := s.authorize(ctx, p, authz.ActionAuthCheck, company, ""); err != nil {
		return nil, err
	}
	return s.src.Checks.ListAuthChecks(ctx, company)
}

// Clear removes the record of (company, accountRef) after authorizing p
// (authz.ActionAuthCheck): the account is refused until the next
// preparation succeeds. errcode.ErrNotFound if there is none, and the same error
// (one text) if p may not read it.
func (s *Service) Clear(ctx context.Context, p authz.Principal, company, accountRef string) error {
	if err := s.authorizeRecord(ctx, p, company, accountRef); err != nil {
		return err
	}
	if err := s.src.Checks.DeleteAuthCheck(ctx, company, accountRef); err != nil {
		return hideMissing(err, company, accountRef)
	}
	s.log.Info("project auth check cleared", "company", company, "account", accountRef, "actor", p.ID)
	return nil
}
