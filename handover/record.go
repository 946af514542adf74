package handover

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/errmsg"
)

// checkVersion is the only project auth check version berth accepts
// (AUTH-2: projectAuthCheckVersion 1). A record of another version is
// ignored: it never lets an account through.
const checkVersion = 1

// Status is the state of a project auth check.
type Status string

// The statuses of a project auth check.
const (
	// StatusPending: prepared; the host's check has not answered yet.
	StatusPending Status = "pending"
	// StatusSucceeded: the host's check succeeded; the only status that
	// lets the account through.
	StatusSucceeded Status = "succeeded"
	// StatusFailed: the host's check failed or could not run.
	StatusFailed Status = "failed"
)

// Provider is who provides the sandboxes of a prepared environment: the
// driver name and the provider account (for Daytona the API key's secret
// reference "secret:ID@vN"; for drivers without provider accounts the
// environment id).
type Provider struct {
	Driver  string `json:"driver"`
	Account string `json:"account"`
}

// text returns "driver/account"; it holds no secret value.
func (p Provider) text() string { return p.Driver + "/" + p.Account }

// AuthCheck is the record of a project auth check of a managed account
// (AUTH-2), keyed by (Company, AccountRef). It holds references and ids,
// never the account's value.
type AuthCheck struct {
	Company string `json:"company"`
	// AccountRef is the managed account's reference in the host's secret
	// store ("secret:ID@vN").
	AccountRef string `json:"account_ref"`
	// Version is 1 (AUTH-2's projectAuthCheckVersion) for records berth
	// writes; a record of another version never lets an account through.
	Version int    `json:"version"`
	Status  Status `json:"status"`
	// Fingerprint is the lease reuse fingerprint (lease.Lease.Fingerprint) of
	// the prepared environment's config, as a lease of it acquired now records.
	Fingerprint string   `json:"fingerprint"`
	Provider    Provider `json:"provider"`
	// Projects are the project ids, sorted, without duplicates.
	Projects []string `json:"projects"`
	// Environment is the id of the prepared environment.
	Environment string `json:"environment"`
	// Preparation is the id of the preparation that wrote the record; a
	// check result is stored only for the preparation it answers.
	Preparation string    `json:"preparation"`
	PreparedAt  time.Time `json:"prepared_at"`
	PreparedBy  string    `json:"prepared_by"`
	// CheckedAt and CheckedBy say when and by whom (the principal that
	// prepared, or the one that recorded the host's answer) the check was
	// answered; zero while pending.
	CheckedAt time.Time `json:"checked_at,omitzero"`
	CheckedBy string    `json:"checked_by,omitempty"`
	// Message is the host's reason for a failed check; never a secret.
	Message string `json:"message,omitempty"`
}

// Errors of this package.
var (
	// ErrStale: a check result answers a preparation that a newer
	// preparation (or a clear) replaced; nothing was stored.
	ErrStale error = &errcode.Error{Code: errcode.Conflict, Reason: "stale_preparation", Err: errors.New("handover: the preparation was replaced")}
	// ErrMismatch: a managed account is refused at dispatch: no project
	// auth check matches exactly (its reason, read with errcode.ReasonOf,
	// says which part).
	ErrMismatch = errcode.New(errcode.Conflict, "handover: no matching project auth check")
)

// errSecretUnknown: a task names a secret env key that the lease's
// environment does not have (reason secret_unknown, code Invalid).
var errSecretUnknown error = &errcode.Error{Code: errcode.Invalid, Reason: "secret_unknown", Err: errors.New("handover: unknown secret")}

// reasonCode says why a hand-over was refused: the reason of a resolver's
// or Service.Check's error (errcode.ReasonOf), and the code the runner's
// refusal of the command reports (its result's message starts with it). The strings travel to the runner
// and back, are listed in docs/errors.md and never change; ErrorCode maps
// one into errcode's set.
type reasonCode string

// Codes of a refused hand-over.
const (
	// reasonCheckMissing: no project auth check is recorded for the company
	// and account.
	reasonCheckMissing reasonCode = "auth_check_missing"
	// reasonCheckVersion: the check is of another version than 1.
	reasonCheckVersion reasonCode = "auth_check_version"
	// reasonCheckStatus: the check has not succeeded.
	reasonCheckStatus reasonCode = "auth_check_status"
	// reasonCheckFingerprint: the check was prepared for another config.
	reasonCheckFingerprint reasonCode = "auth_check_fingerprint"
	// reasonCheckProvider: the check was prepared for another provider.
	reasonCheckProvider reasonCode = "auth_check_provider"
	// reasonCheckProjects: the check was prepared for other projects.
	reasonCheckProjects reasonCode = "auth_check_projects"
	// reasonSecretUnknown: a secret env key the lease's environment lacks.
	reasonSecretUnknown reasonCode = "secret_unknown"
	// reasonLeaseMismatch: the session's lease is unknown, not active or of
	// another company.
	reasonLeaseMismatch reasonCode = "lease_mismatch"
)

// ErrorCode returns the code of errcode's set that c is a sub-code of:
// Conflict for the auth_check_* codes (the project auth check does not
// match: ErrMismatch's code), Invalid for secret_unknown,
// NotFound for lease_mismatch (a lease of another company is reported as
// missing), Unknown for a string that is none of the codes.
func (c reasonCode) ErrorCode() errcode.ErrorCode {
	switch c {
	case reasonCheckMissing, reasonCheckVersion, reasonCheckStatus, reasonCheckFingerprint, reasonCheckProvider, reasonCheckProjects:
		return errcode.Conflict
	case reasonSecretUnknown:
		return errcode.Invalid
	case reasonLeaseMismatch:
		return errcode.NotFound
	}
	return errcode.Unknown
}

// mismatchError is a refused managed account: code names the part of the
// project auth check that did not match (reasonCheckMissing, ...Version,
// ...Status, ...Fingerprint, ...Provider, ...Projects). It wraps
// ErrMismatch and implements controller.SecretError.
type mismatchError struct {
	code       reasonCode
	company    string
	accountRef string
	detail     string
}

// Error names the account reference, the company and the part that did
// not match; never a value.
func (e *mismatchError) Error() string {
	return fmt.Sprintf("handover: managed account %s of company %q: %s: %s", e.accountRef, e.company, e.code, e.detail)
}

// Unwrap returns ErrMismatch, behind an *errcode.Error with e's code as
// its reason and a sentence for a person.
func (e *mismatchError) Unwrap() error {
	return &errcode.Error{Reason: string(e.code),
		Message: errmsg.Sentence(fmt.Sprintf("The managed account %s cannot be handed over for company %q: its project auth check does not match (%s); run the check again", e.accountRef, e.company, e.detail)),
		Err:     ErrMismatch}
}

// SecretCode returns code (controller.SecretError).
func (e *mismatchError) SecretCode() string { return string(e.code) }

// codedError carries a stable code for controller.CodeOfSecrets. Its
// errcode is the wrapped error's when that has one (a store that is down
// stays unavailable), else its reason's (a lease of another company is not
// found).
type codedError struct {
	code reasonCode
	err  error
}

func (e *codedError) Error() string      { return e.err.Error() }
func (e *codedError) Unwrap() error      { return &errcode.Error{Reason: string(e.code), Err: e.err} }
func (e *codedError) SecretCode() string { return string(e.code) }
func (e *codedError) ErrorCode() errcode.ErrorCode {
	if c := errcode.Code(e.err); c != errcode.Unknown {
		return c
	}
	return e.code.ErrorCode()
}

// match reports whether c lets the account through for a lease of
// fingerprint and provider, handed to projects: nil, or a *mismatchError
// naming the first part that differs, checked in this order: version,
// status, fingerprint, provider, projects (compared sorted, without
// duplicates).
func (c AuthCheck) match(fingerprint string, provider Provider, projects []string) error {
	mis := func(code reasonCode, format string, args ...any) error {
		return &mismatchError{code: code, company: c.Company, accountRef: c.AccountRef, detail: fmt.Sprintf(format, args...)}
	}
	switch {
	case c.Version != checkVersion:
		return mis(reasonCheckVersion, "the check is of version %d, want %d", c.Version, checkVersion)
	case c.Status != StatusSucceeded:
		return mis(reasonCheckStatus, "the check is %s, not succeeded", c.Status)
	case c.Fingerprint != fingerprint:
		return mis(reasonCheckFingerprint, "the check was prepared for config %s, the lease runs %s", c.Fingerprint, fingerprint)
	case c.Provider != provider:
		return mis(reasonCheckProvider, "the check was prepared for provider %s, the lease is of %s", c.Provider.text(), provider.text())
	}
	if want := normalizeProjects(projects); !slices.Equal(c.Projects, want) {
		return mis(reasonCheckProjects, "the check was prepared for projects %v, the task is for %v", c.Projects, want)
	}
	return nil
}

// normalizeProjects returns the project ids sorted, without duplicates (a
// new slice; never nil).
func normalizeProjects(projects []string) []string {
	out := slices.Clone(projects)
	slices.Sort(out)
	out = slices.Compact(out)
	if out == nil {
		out = []string{}
	}
	return out
}

// ParseAccountRef parses a managed-account reference "secret:ID@vN"
// (config.SecretRef.String) with a version of at least 1.
func ParseAccountRef(s string) (config.SecretRef, error) {
	rest, ok := strings.CutPrefix(s, "secret:")
	id, v, ok2 := strings.Cut(rest, "@v")
	n, err := strconv.ParseInt(v, 10, 64)
	if !ok || !ok2 || id == "" || err != nil || n < 1 || len(s) > 256 || strings.ContainsAny(id, " \t\r\n@") {
		return config.SecretRef{}, fmt.Errorf("handover: field account_ref %q is not a secret reference secret:ID@vN: %w", s, errcode.ErrInvalid)
	}
	return config.SecretRef{ID: id, Version: n}, nil
}

// Store keeps project auth check records. Implementations: NewMemoryStore
// here and the SQL stores of store/sqlite and store/postgres; each passes
// handovertest.RunStoreTests. Safe for concurrent use, also by several
// processes on one database.
type Store interface {
	// PutAuthCheck stores c as the record of (c.Company, c.AccountRef),
	// replacing any earlier record of that key.
	PutAuthCheck(ctx context.Context, c AuthCheck) error
	// CompleteAuthCheck stores the answer of preparation prep in the
	// record of (company, accountRef) in one conditional update: status,
	// checkedAt, checkedBy and message. It returns the updated record, or
	// an error wrapping ErrStale if the record's preparation is another
	// one (replaced), errcode.ErrNotFound if there is none (cleared).
	CompleteAuthCheck(ctx context.Context, company, accountRef, prep string, status Status, checkedAt time.Time, checkedBy, message string) (AuthCheck, error)
	// GetAuthCheck returns the record of (company, accountRef), or an
	// error wrapping errcode.ErrNotFound.
	GetAuthCheck(ctx context.Context, company, accountRef string) (AuthCheck, error)
	// ListAuthChecks returns the records of company (every company's
	// when company is ""), sorted by company, then account reference.
	ListAuthChecks(ctx context.Context, company string) ([]AuthCheck, error)
	// DeleteAuthCheck removes the record of (company, accountRef); an
	// error wrapping errcode.ErrNotFound if there is none.
	DeleteAuthCheck(ctx context.Context, company, accountRef string) error
}

func isNotFound(err error) bool { return errors.Is(err, errcode.ErrNotFound) }
