package lease

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
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

// checkQuota refuses a, before its write-ahead record, when a new lease
// would put its company past a limit of Options.Quotas. It reads the
// company's live leases (Filter.Live, through the status index). The
// check and the insert are serialized per company in this manager
// (lockQuota), so the bound is exact within one process; replicas that
// acquire for one company at the same instant may each pass it once.
func (m *Manager) checkQuota(ctx context.Context, a *acq) error {
	q := m.o.Quotas
	if a.draft || a.req.Company == "" || a.req.Company == authz.InstanceCompany || q.PerCompany <= 0 && q.PerCompanyEnvironment <= 0 {
		return nil
	}
	f := Filter{Company: a.req.Company, Live: true}
	if q.PerCompany <= 0 {
		f.Environment = a.env.ID
	}
	ls, err := m.store.ListLeases(ctx, f)
	if err != nil {
		return fmt.Errorf("lease: acquire environment %s: counting the live leases of company %s for its quota: %w", a.env.ID, a.req.Company, err)
	}
	onEnv := 0
	for _, l := range ls {
		if l.Environment == a.env.ID {
			onEnv++
		}
	}
	if q.PerCompany > 0 && len(ls) >= q.PerCompany {
		return &errcode.Error{Message: fmt.Sprintf("Company %s has %d live leases, its limit: release one before leasing environment %q.", a.req.Company, len(ls), a.env.Name),
			Err: fmt.Errorf("lease: acquire environment %s: company %s has %d live leases, its limit (Quotas.PerCompany) is %d; release one first: %w",
				a.env.ID, a.req.Company, len(ls), q.PerCompany, ErrQuota)}
	}
	if q.PerCompanyEnvironment > 0 && onEnv >= q.PerCompanyEnvironment {
		return &errcode.Error{Message: fmt.Sprintf("Company %s has %d live leases of environment %q, its limit: release one before leasing it again.", a.req.Company, onEnv, a.env.Name),
			Err: fmt.Errorf("lease: acquire environment %s: company %s has %d live leases of this environment, its limit (Quotas.PerCompanyEnvironment) is %d; release one first: %w",
				a.env.ID, a.req.Company, onEnv, q.PerCompanyEnvironment, ErrQuota)}
	}
	return nil
}

// lockQuota serializes, in this manager, the quota check of a's company
// with the write of the record it admits (the insert or the adoption), so
// that concurrent acquisitions of one company cannot all pass on the same
// count; it returns the unlock (idempotent). Without quotas, and for
// acquisitions checkQuota does not count, it locks nothing.
func (m *Manager) lockQuota(a *acq) func() {
	q := m.o.Quotas
	if a.draft || a.req.Company == "" || a.req.Company == authz.InstanceCompany || q.PerCompany <= 0 && q.PerCompanyEnvironment <= 0 {
		return func() {}
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(a.req.Company))
	mu := &m.quotaLocks[h.Sum32()%uint32(len(m.quotaLocks))]
	mu.Lock()
	var once sync.Once
	return func() { once.Do(mu.Unlock) }
}

// quotaOrRunLease is checkQuota for an acquisition about to insert a new
// record. An acquisition of a run whose lease exists adds no lease: when
// the quota refuses, the run key's holder, if any, is returned instead (nil
// with a nil error: no limit in the way).
func (m *Manager) quotaOrRunLease(ctx context.Context, a *acq) (*Lease, error) {
	qerr := m.checkQuota(ctx, a)
	if qerr == nil || a.runKey == "" {
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
