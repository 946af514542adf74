package lease

import (
	"context"

	"github.com/berthdev/berth/internal/envhook"
	"github.com/berthdev/berth/internal/secretcfg"
)

// recordStore wraps the manager's Store with what follows from a lease
// record's writes:
//   - with a SecretKeeper (leasehook.Sources), the secret references of every lease
//     record are recorded before it is inserted, and released once an
//     update records the lease ended (CFG-7, LEASE-9), so that the catalog
//     deletes a retired secret only after the last lease that uses it is
//     proven clean. Updates that change a lease's config record its new
//     uses explicitly (Manager.useSecrets) before the write.
//   - the record of a draft lease (Lease.Draft) is deleted once an update
//     records it ended, i.e. its cleanup proven (PRB-4): a draft probe
//     leaves nothing behind, unless its cleanup is unproven (the
//     pending_cleanup record stays until a release or sweep proves it).
type recordStore struct {
	Store
	k   envhook.SecretKeeper // nil: no secret tracking
	log func(msg string, args ...any)
}

// InsertLease records l's secret uses, then inserts it. If the insert
// fails, the uses are released again (best effort).
func (s *recordStore) InsertLease(ctx context.Context, l *Lease, q Quotas) (*Lease, error) {
	if s.k != nil {
		if err := s.k.Use(ctx, l.ID, l.Config); err != nil {
			return nil, err
		}
	}
	holder, err := s.Store.InsertLease(ctx, l, q)
	if err != nil {
		s.release(ctx, l.ID)
	}
	return holder, err
}

// UpdateLease updates l and, once l has ended, releases its secret uses and
// deletes it if it is a draft's.
func (s *recordStore) UpdateLease(ctx context.Context, l *Lease) error {
	if err := s.Store.UpdateLease(ctx, l); err != nil {
		return err
	}
	if l.Ended() {
		if mayUseSecrets(l) {
			s.release(ctx, l.ID)
		}
		if l.Draft {
			if err := s.Store.DeleteLease(context.WithoutCancel(ctx), l.ID, l.Version); err != nil {
				s.log("lease: removing the record of a draft lease whose cleanup is proven failed; retention prunes it", "lease", l.ID, "err", err)
			}
		}
	}
	return nil
}

// mayUseSecrets reports whether secret uses may be recorded for l. The
// uses of a lease are the secret references of every config it held: the
// one it was inserted with (InsertLease) and those a resume put on it
// (useSecrets), and only reusable leases are resumed. So a lease of
// another policy whose config holds no secret reference has no use to
// release, and its end costs no store call for them (most leases).
func mayUseSecrets(l *Lease) bool {
	return l.Policy.reusable() || len(secretcfg.SecretRefs(l.Config)) > 0
}

func (s *recordStore) release(ctx context.Context, id string) {
	if s.k == nil {
		return
	}
	if err := s.k.Release(context.WithoutCancel(ctx), id); err != nil {
		s.log("lease: releasing secret uses failed; the secrets are kept", "lease", id, "err", err)
	}
}

// useSecrets records that lease l will hold cfg before a write that puts
// cfg on it (resume records the environment's current config).
func (m *Manager) useSecrets(ctx context.Context, id string, l *Lease) error {
	if m.o.secretKeeper == nil {
		return nil
	}
	return m.o.secretKeeper.Use(ctx, id, l.Config)
}
