package lease

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/berthdev/berth/errcode"
)

// memoryStore is NewMemoryStore's Store, for tests and single-process hosts. One
// mutex serializes every operation, which gives it the key and claim
// atomicity the Store contract asks for. It copies the scalar fields of the
// leases it is given and returns, and shares their maps and runner, which
// the Store contract makes read-only: a write or a read costs one struct
// copy, whatever the size of a lease's config. It indexes the leases that
// have not ended apart, so that reads of live leases (Filter.Live, or
// statuses that are always live), sweeps and adoptions cost what the live
// leases cost, not the history that retention (Options.PruneAfter) has not
// pruned yet; and the ended ones by release time, so that pruning costs
// what it prunes. The zero value is not usable; call NewMemoryStore.
type memoryStore struct {
	mu      sync.Mutex
	leases  map[string]*Lease
	live    map[string]*Lease // the leases not ended (Lease.Ended), of leases
	ended   releases          // the ended leases with a release time, oldest first; entries may be stale
	byReuse map[string]string // reuse key -> lease id
	byRun   map[string]string // run key -> lease id
}

// release is an entry of memoryStore.ended: lease id ended, released at.
// It is stale once the lease is gone, live again or released at another
// time; PruneLeases drops stale entries as it meets them.
type release struct {
	at time.Time
	id string
}

// releases is a min-heap of releases by time, then id: the order in which
// the SQL stores prune. (Typed rather than container/heap, whose Push
// would box every entry.)
type releases []release

func (r releases) less(i, j int) bool {
	if c := r[i].at.Compare(r[j].at); c != 0 {
		return c < 0
	}
	return r[i].id < r[j].id
}

func (r *releases) push(e release) {
	h := *r
	if len(h) == cap(h) {
		// Doubling, where append grows a long slice by a quarter: a
		// history of ended leases grows by one per release, and each
		// growth copies it all.
		h = slices.Grow(h, max(len(h), 64))
	}
	h = append(h, e)
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if !h.less(i, p) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
	*r = h
}

// pop removes and returns the earliest release; r must not be empty.
func (r *releases) pop() release {
	h := *r
	top, n := h[0], len(h)-1
	h[0] = h[n]
	h[n] = release{}
	h = h[:n]
	for i := 0; ; {
		m, l := i, 2*i+1
		if l < n && h.less(l, m) {
			m = l
		}
		if l+1 < n && h.less(l+1, m) {
			m = l + 1
		}
		if m == i {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	*r = h
	return top
}

var (
	_ Store          = (*memoryStore)(nil)
	_ releaseClaimer = (*memoryStore)(nil)
)

// NewMemoryStore returns an empty in-memory Store for tests and single-process
// hosts (it also implements ClaimLeaseForRelease, see Store).
func NewMemoryStore() Store {
	return &memoryStore{leases: map[string]*Lease{}, live: map[string]*Lease{}, byReuse: map[string]string{}, byRun: map[string]string{}}
}

// keyHolderLocked returns another lease than l holding l's reuse or run key.
func (s *memoryStore) keyHolderLocked(l *Lease) *Lease {
	if id, ok := s.byReuse[l.ReuseKey]; ok && l.ReuseKey != "" && id != l.ID {
		return s.leases[id]
	}
	if id, ok := s.byRun[l.RunKey]; ok && l.RunKey != "" && id != l.ID {
		return s.leases[id]
	}
	return nil
}

// putLocked stores a copy of l and keeps the key and live indexes in
// step. The copy shares l's maps and runner (see Store: they are
// read-only). A lease already stored is overwritten in place: the store
// never hands out its own records (every read returns a copy), so nothing
// else holds them.
func (s *memoryStore) putLocked(l *Lease) {
	old, ok := s.leases[l.ID]
	var wasEnded bool
	var wasReleased time.Time
	if ok {
		wasEnded, wasReleased = old.Ended(), old.ReleasedAt
		if old.ReuseKey != "" {
			delete(s.byReuse, old.ReuseKey)
		}
		if old.RunKey != "" {
			delete(s.byRun, old.RunKey)
		}
	}
	if l.ReuseKey != "" {
		s.byReuse[l.ReuseKey] = l.ID
	}
	if l.RunKey != "" {
		s.byRun[l.RunKey] = l.ID
	}
	if ok {
		*old = *l
	} else {
		old = l.shallow()
		s.leases[l.ID] = old
	}
	if !old.Ended() {
		s.live[l.ID] = old
		return
	}
	delete(s.live, l.ID)
	if !old.ReleasedAt.IsZero() && (!wasEnded || !wasReleased.Equal(old.ReleasedAt)) {
		s.ended.push(release{at: old.ReleasedAt, id: old.ID})
	}
}

// InsertLease implements Store: the count and the insert under the
// store's lock.
func (s *memoryStore) InsertLease(ctx context.Context, l *Lease, q Quotas) (*Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.leases[l.ID]; ok {
		return nil, fmt.Errorf("lease %s: id taken: %w", l.ID, errcode.ErrConflict)
	}
	if o := s.keyHolderLocked(l); o != nil {
		return o.shallow(), fmt.Errorf("lease %s: key held by lease %s: %w", l.ID, o.ID, errcode.ErrConflict)
	}
	if q.limits(l.Company) {
		all, onEnv := s.countLiveLocked(l.Company, l.Environment)
		if err := q.Admit(l.Company, l.Environment, all, onEnv); err != nil {
			return nil, err
		}
	}
	l.Version = 1
	s.putLocked(l)
	return nil, nil
}

// countLiveLocked returns the live leases of company, and those on env.
func (s *memoryStore) countLiveLocked(company, env string) (all, onEnv int) {
	for _, l := range s.live {
		if l.Company == company && !l.Ended() {
			all++
			if l.Environment == env {
				onEnv++
			}
		}
	}
	return all, onEnv
}

// GetLease implements Store.
func (s *memoryStore) GetLease(ctx context.Context, id string) (*Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.leases[id]
	if !ok {
		return nil, fmt.Errorf("lease %s: %w", id, errcode.ErrNotFound)
	}
	return l.shallow(), nil
}

// UpdateLease implements Store.
func (s *memoryStore) UpdateLease(ctx context.Context, l *Lease) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old, ok := s.leases[l.ID]
	if !ok {
		return fmt.Errorf("lease %s: %w", l.ID, errcode.ErrNotFound)
	}
	if old.Version != l.Version {
		return fmt.Errorf("lease %s: stored version %d, update based on %d: %w", l.ID, old.Version, l.Version, errcode.ErrConflict)
	}
	if o := s.keyHolderLocked(l); o != nil {
		return fmt.Errorf("lease %s: key held by lease %s: %w", l.ID, o.ID, errcode.ErrConflict)
	}
	l.Version++
	s.putLocked(l)
	return nil
}

// FindByReuseKey implements Store.
func (s *memoryStore) FindByReuseKey(ctx context.Context, key string) (*Lease, error) {
	return s.findBy(ctx, key, s.byReuse)
}

// FindByRunKey implements Store.
func (s *memoryStore) FindByRunKey(ctx context.Context, key string) (*Lease, error) {
	return s.findBy(ctx, key, s.byRun)
}

func (s *memoryStore) findBy(ctx context.Context, key string, index map[string]string) (*Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if id, ok := index[key]; ok && key != "" {
		return s.leases[id].shallow(), nil
	}
	return nil, fmt.Errorf("lease key %q: %w", key, errcode.ErrNotFound)
}

// ListLeases implements Store.
func (s *memoryStore) ListLeases(ctx context.Context, f Filter) ([]*Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	var out []*Lease
	from := s.leases
	if f.Live || alwaysLive(f.Statuses) {
		from = s.live // the history costs nothing
	}
	for _, l := range from {
		if f.match(l) {
			out = append(out, l.shallow())
		}
	}
	s.mu.Unlock()
	sortLeases(out)
	if f.Newest {
		slices.Reverse(out)
	}
	if f.Limit > 0 && len(out) > f.Limit {
		out = out[:f.Limit]
	}
	return out, nil
}

// alwaysLive reports whether statuses is not empty and a lease in any of
// them is live (not Ended) whatever its reuse key, so that only the live
// index can hold it.
func alwaysLive(statuses []Status) bool {
	for _, st := range statuses {
		if (&Lease{Status: st}).Ended() {
			return false
		}
	}
	return len(statuses) > 0
}

func sortLeases(ls []*Lease) {
	slices.SortFunc(ls, func(a, b *Lease) int {
		if c := a.AcquiredAt.Compare(b.AcquiredAt); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
}

// ClaimLease implements Store.
func (s *memoryStore) ClaimLease(ctx context.Context, id, owner string, now, until time.Time) (*Lease, error) {
	return s.claim(ctx, id, owner, now, until, false)
}

// ClaimLeaseForRelease implements releaseClaimer.
func (s *memoryStore) ClaimLeaseForRelease(ctx context.Context, id, owner string, now, until time.Time) (*Lease, error) {
	return s.claim(ctx, id, owner, now, until, true)
}

// claim is ClaimLease, which with expire also sets the ExpiresAt of an
// active or retained lease to until (ClaimLeaseForRelease).
func (s *memoryStore) claim(ctx context.Context, id, owner string, now, until time.Time, expire bool) (*Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.leases[id]
	if !ok {
		return nil, fmt.Errorf("lease %s: %w", id, errcode.ErrNotFound)
	}
	if !l.claimFree(owner, now) {
		return l.shallow(), fmt.Errorf("lease %s: claimed by %s until %s: %w", id, l.ClaimedBy, l.ClaimedUntil.Format(time.RFC3339), ErrClaimed)
	}
	l.ClaimedBy, l.ClaimedUntil = owner, until
	if expire && (l.Status == StatusActive || l.Status == StatusRetained) {
		l.ExpiresAt = until
	}
	l.Version++
	return l.shallow(), nil
}

// ClaimForSweep implements Store.
func (s *memoryStore) ClaimForSweep(ctx context.Context, owner string, now, until time.Time, limit int) ([]*Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var cand []*Lease
	for _, l := range s.live { // an ended lease needs no sweep
		if needsSweep(l, now) && l.claimFree("", now) {
			cand = append(cand, l)
		}
	}
	sortLeases(cand)
	if limit > 0 && len(cand) > limit {
		cand = cand[:limit]
	}
	out := make([]*Lease, 0, len(cand))
	for _, l := range cand {
		l.ClaimedBy, l.ClaimedUntil = owner, until
		l.Version++
		out = append(out, l.shallow())
	}
	return out, nil
}

// DeleteLease implements Store.
func (s *memoryStore) DeleteLease(ctx context.Context, id string, version int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.leases[id]
	if !ok {
		return fmt.Errorf("lease %s: %w", id, errcode.ErrNotFound)
	}
	if l.Version != version {
		return fmt.Errorf("lease %s: stored version %d, delete based on %d: %w", id, l.Version, version, errcode.ErrConflict)
	}
	s.deleteLocked(l)
	return nil
}

func (s *memoryStore) deleteLocked(l *Lease) {
	if l.ReuseKey != "" {
		delete(s.byReuse, l.ReuseKey)
	}
	if l.RunKey != "" {
		delete(s.byRun, l.RunKey)
	}
	delete(s.leases, l.ID)
	delete(s.live, l.ID)
}

// PruneLeases implements Store.
func (s *memoryStore) PruneLeases(ctx context.Context, before time.Time, limit int) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// Oldest release first, as the SQL stores prune; a claimed lease is
	// kept for a later pass.
	n := 0
	var claimed []release
	for len(s.ended) > 0 && (limit <= 0 || n < limit) && s.ended[0].at.Before(before) {
		e := s.ended.pop()
		l, ok := s.leases[e.id]
		switch {
		case !ok || !l.Ended() || !l.ReleasedAt.Equal(e.at):
			// stale: pruned, live again, or released again later
		case !prunable(l, before):
			claimed = append(claimed, e)
		default:
			s.deleteLocked(l)
			n++
		}
	}
	for _, e := range claimed {
		s.ended.push(e)
	}
	return n, nil
}

// prunable reports whether PruneLeases at before removes l.
func prunable(l *Lease, before time.Time) bool {
	return l.Ended() && !l.ReleasedAt.IsZero() && l.ReleasedAt.Before(before) && l.claimFree("", before)
}

// AdoptPooled implements Store.
func (s *memoryStore) AdoptPooled(ctx context.Context, ad *Lease, q Quotas) (*Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var cand []*Lease
	for _, l := range s.live { // members are pooled: live
		if adoptable(l, ad) {
			cand = append(cand, l)
		}
	}
	if len(cand) == 0 {
		return nil, fmt.Errorf("lease: no pooled member of environment %s with fingerprint %s: %w", ad.Environment, ad.Fingerprint, errcode.ErrNotFound)
	}
	sortLeases(cand)
	upd := adopt(cand[0], ad)
	if o := s.keyHolderLocked(upd); o != nil {
		return nil, fmt.Errorf("lease %s: adopting it: key held by lease %s: %w", upd.ID, o.ID, errcode.ErrConflict)
	}
	if q.limits(upd.Company) {
		all, onEnv := s.countLiveLocked(upd.Company, upd.Environment)
		if err := q.Admit(upd.Company, upd.Environment, all, onEnv); err != nil {
			return nil, err
		}
	}
	upd.Version++
	s.putLocked(upd)
	return upd.clone(), nil
}
