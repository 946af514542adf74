package lease

import (
	"context"

	"github.com/berthdev/berth/environment"
)

// keepingStore records, through Options.SecretKeeper, the secret references
// of every lease record before it is inserted, and releases them once an
// update records the lease proven clean (CFG-7, LEASE-9), so that the
// catalog deletes a retired secret only after the last lease that uses it
// is clean. Updates that change a lease's config record its new uses
// explicitly (Manager.useSecrets) before the write.
type keepingStore struct {
	Store
	k   *environment.SecretKeeper
	log func(msg string, args ...any)
}

// InsertLease records l's secret uses, then inserts it. If the insert
// fails, the uses are released again (best effort).
func (s *keepingStore) InsertLease(ctx context.Context, l *Lease) (*Lease, error) {
	if err := s.k.Use(ctx, l.ID, l.Config); err != nil {
		return nil, err
	}
	holder, err := s.Store.InsertLease(ctx, l)
	if err != nil {
		s.release(ctx, l.ID)
	}
	return holder, err
}

// UpdateLease updates l and, once l is proven clean, releases its uses.
func (s *keepingStore) UpdateLease(ctx context.Context, l *Lease) error {
	if err := s.Store.UpdateLease(ctx, l); err != nil {
		return err
	}
	if l.provenClean() {
		s.release(ctx, l.ID)
	}
	return nil
}

func (s *keepingStore) release(ctx context.Context, id string) {
	if err := s.k.Release(context.WithoutCancel(ctx), id); err != nil {
		s.log("lease: releasing secret uses failed; the secrets are kept", "lease", id, "err", err)
	}
}

// provenClean reports whether l's sandbox is gone with proof, or was never
// made: released (not resumable), expired or failed. Its secrets are no
// longer needed for a cleanup.
func (l *Lease) provenClean() bool {
	switch l.Status {
	case StatusReleased, StatusExpired, StatusFailed:
		return !l.HoldsSandbox()
	}
	return false
}

// useSecrets records that lease l will hold cfg before a write that puts
// cfg on it (resume records the environment's current config).
func (m *Manager) useSecrets(ctx context.Context, id string, l *Lease) error {
	if m.o.SecretKeeper == nil {
		return nil
	}
	return m.o.SecretKeeper.Use(ctx, id, l.Config)
}
