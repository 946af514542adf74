package lease

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/errcode"
)

// Quotas limit the live leases of tenants (the source description's
// "spending constraints before a live remote run"). A zero field sets no
// limit. Live leases are those that have not ended (Filter.Live): starting,
// active, retained, pending_cleanup, and released leases that keep a
// resumable sandbox; each may hold a sandbox that costs. Pool members
// (StatusPooled, authz.InstanceCompany) count for no company until adopted.
type Quotas struct {
	// PerCompany limits the live leases of one company, over every
	// environment.
	PerCompany int
	// PerCompanyEnvironment limits the live leases of one company on one
	// environment.
	PerCompanyEnvironment int
}

// ErrQuota: an acquisition was refused because the company is at a limit
// of Options.Quotas; nothing was written or allocated. The error names the
// limit and the company's own count, never another company's.
// Its reason is "quota_exceeded" (errcode.ReasonOf).
var ErrQuota error = &errcode.Error{Code: errcode.Unavailable, Reason: "quota_exceeded", Err: errors.New("lease: quota reached")}

// limits reports whether q limits the leases of company: it sets a limit,
// and company is a company (not "" and not authz.InstanceCompany, whose
// setup and pool leases count for nobody).
func (q Quotas) limits(company string) bool {
	return counted(company) && (q.PerCompany > 0 || q.PerCompanyEnvironment > 0)
}

// counted reports whether company's leases count for quotas: a company,
// not "" and not authz.InstanceCompany.
func counted(company string) bool {
	return company != "" && company != authz.InstanceCompany
}

// Admit returns nil when one more live lease of company on environment
// fits q, given the company's live leases now (live, over every
// environment) and those on environment (onEnvironment); else an error
// wrapping ErrQuota that names the limit and the company's own counts. A
// Store's InsertLease and AdoptPooled call it with the counts they read in
// the step that writes.
func (q Quotas) Admit(company, environment string, live, onEnvironment int) error {
	if !q.limits(company) {
		return nil
	}
	if q.PerCompany > 0 && live >= q.PerCompany {
		return &errcode.Error{Message: fmt.Sprintf("Company %s is at its limit of live leases (%d): release one before leasing environment %s.", company, q.PerCompany, environment),
			Err: fmt.Errorf("lease: acquire environment %s: company %s has %d live leases, its limit (quota per company: Quotas.PerCompany or the instance setting quotaPerCompany) is %d; release one first: %w",
				environment, company, live, q.PerCompany, ErrQuota)}
	}
	if q.PerCompanyEnvironment > 0 && onEnvironment >= q.PerCompanyEnvironment {
		return &errcode.Error{Message: fmt.Sprintf("Company %s is at its limit of live leases on environment %s (%d): release one before leasing it again.", company, environment, q.PerCompanyEnvironment),
			Err: fmt.Errorf("lease: acquire environment %s: company %s has %d live leases of this environment, its limit (quota per company and environment: Quotas.PerCompanyEnvironment or the instance setting quotaPerCompanyEnvironment) is %d; release one first: %w",
				environment, company, onEnvironment, q.PerCompanyEnvironment, ErrQuota)}
	}
	return nil
}

// stricter returns the lower of two limits, 0 meaning none.
func stricter(a, b int) int {
	switch {
	case a <= 0:
		return max(b, 0)
	case b <= 0:
		return a
	}
	return min(a, b)
}

// quotasFor returns the limits in force for a: none for a draft (a probe)
// or a lease of no company; else, per field, the stricter of
// Options.Quotas and the instance settings (leasehook.Sources.Settings: the
// instance's quotaPerCompany and quotaPerCompanyEnvironment, 8 and 4 when
// never set), so that every manager of an instance enforces one number.
func (m *Manager) quotasFor(ctx context.Context, a *acq) (Quotas, error) {
	q := m.o.Quotas
	if a.draft || a.member || !counted(a.req.Company) {
		return Quotas{}, nil
	}
	if m.o.settings != nil {
		s, err := m.o.settings.Current(ctx)
		if err != nil {
			return Quotas{}, fmt.Errorf("lease: acquire environment %s: reading the instance's quotas: %w", a.env.ID, err)
		}
		q.PerCompany = stricter(q.PerCompany, s.QuotaPerCompany)
		q.PerCompanyEnvironment = stricter(q.PerCompanyEnvironment, s.QuotaPerCompanyEnvironment)
	}
	return q, nil
}

// quotaNamed returns err, a quota refusal, with a message that names a's
// environment by its name (the store that refused knows only its id);
// other errors as they are.
func quotaNamed(a *acq, err error) error {
	if !errors.Is(err, ErrQuota) || a.env == nil || a.env.Name == "" {
		return err
	}
	msg := errcode.MessageOf(err)
	if !strings.Contains(msg, a.env.ID) {
		return err
	}
	return &errcode.Error{Message: strings.ReplaceAll(msg, "environment "+a.env.ID, fmt.Sprintf("environment %q", a.env.Name)), Err: err}
}

// lockQuota serializes, in this manager, the writes of a's company that
// the store admits against its quotas (the insert or the adoption, each
// one step that counts the company's live leases and writes), so that
// concurrent acquisitions of one company wait here rather than in the
// store's quota lock, each holding a store connection; it returns the
// unlock (idempotent). Without quotas it locks nothing.
func (m *Manager) lockQuota(a *acq) func() {
	if !a.quotas.limits(a.req.Company) {
		return func() {}
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(a.req.Company))
	mu := &m.quotaLocks[h.Sum32()%uint32(len(m.quotaLocks))]
	mu.Lock()
	var once sync.Once
	return func() { once.Do(mu.Unlock) }
}

// runLeaseOr returns the lease holding a's run key when qerr is a quota
// refusal and a has a run key whose lease exists; else qerr.
func (m *Manager) runLeaseOr(ctx context.Context, a *acq, qerr error) (*Lease, error) {
	if qerr == nil || a.runKey == "" || !errors.Is(qerr, ErrQuota) {
		return nil, qerr
	}
	l, err := m.store.FindByRunKey(ctx, a.runKey)
	if err != nil {
		if errors.Is(err, errcode.ErrNotFound) {
			return nil, qerr
		}
		return nil, fmt.Errorf("lease: acquire environment %s: %w", a.env.ID, err)
	}
	return l, nil
}

// insert writes a's new record l: with a's quotas checked by the store in
// the same step when they limit its company (Store.InsertLease).
func (m *Manager) insert(ctx context.Context, a *acq, l *Lease) (*Lease, error) {
	return m.store.InsertLease(ctx, l, a.quotasFor(l.Company))
}

// quotasFor returns a's quotas when they limit company, else the zero
// Quotas: what the store checks in the step that writes (Store.InsertLease,
// Store.AdoptPooled).
func (a *acq) quotasFor(company string) Quotas {
	if a.quotas.limits(company) {
		return a.quotas
	}
	return Quotas{}
}
