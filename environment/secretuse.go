package environment

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/secretcfg"
)

// This file keeps secrets alive as long as the leases that use them (CFG-7,
// LEASE-6, LEASE-9). A lease record keeps secret references, and its
// cleanup resolves them again; so a version that an update superseded, or
// the secrets of a deleted environment, are deleted from the SecretStore
// only once no lease that is not proven clean uses them. The reference
// tracking lives in berth's own store (SecretUseStore), not in the host's
// SecretStore.

// SecretUseStore records which leases use which secret versions, and which
// secrets (or versions) no saved config references any more (retired). A
// use of version v of secret S is covered by a retirement of S@v and by one
// of the whole secret S (Version 0). Implementations: memorySecretUseStore,
// and the SQL stores, which pass the same conformance suite
// (internal/environmenttest.RunSecretUseStoreTests). Each method is atomic with
// respect to the others, across processes sharing the store.
type SecretUseStore interface {
	// UseSecrets records that lease uses refs (each with Version > 0).
	// Recording a use again is not an error.
	UseSecrets(ctx context.Context, lease string, refs []config.SecretRef) error
	// RetireSecrets marks refs as referenced by no saved config. It returns
	// those of refs that no lease uses: the caller deletes them from the
	// SecretStore now, and they are not kept as retired. The others stay
	// retired until ReleaseSecrets frees them.
	RetireSecrets(ctx context.Context, refs []config.SecretRef) (free []config.SecretRef, err error)
	// ReleaseSecrets drops every use of lease (the lease is proven clean)
	// and returns the retired refs that no lease uses any more, no longer
	// kept as retired: the caller deletes them from the SecretStore.
	ReleaseSecrets(ctx context.Context, lease string) (free []config.SecretRef, err error)
}

// covers reports whether retirement r covers a use of u.
func covers(r, u config.SecretRef) bool {
	return r.ID == u.ID && (r.Version == 0 || r.Version == u.Version)
}

// memorySecretUseStore is newMemorySecretUseStore's SecretUseStore.
type memorySecretUseStore struct {
	mu      sync.Mutex
	uses    map[string][]config.SecretRef // lease -> refs
	retired map[config.SecretRef]bool
}

// newMemorySecretUseStore returns an empty in-memory SecretUseStore for
// tests and the embedded default, safe for concurrent use.
func newMemorySecretUseStore() SecretUseStore {
	return &memorySecretUseStore{uses: map[string][]config.SecretRef{}, retired: map[config.SecretRef]bool{}}
}

// UseSecrets implements SecretUseStore.
func (s *memorySecretUseStore) UseSecrets(_ context.Context, lease string, refs []config.SecretRef) error {
	if err := checkUses(lease, refs); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range refs {
		if !slices.Contains(s.uses[lease], r) {
			s.uses[lease] = append(s.uses[lease], r)
		}
	}
	return nil
}

// RetireSecrets implements SecretUseStore.
func (s *memorySecretUseStore) RetireSecrets(_ context.Context, refs []config.SecretRef) ([]config.SecretRef, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var free []config.SecretRef
	for _, r := range refs {
		if s.usedLocked(r) {
			s.retired[r] = true
		} else if !slices.Contains(free, r) {
			delete(s.retired, r)
			free = append(free, r)
		}
	}
	return free, nil
}

// ReleaseSecrets implements SecretUseStore.
func (s *memorySecretUseStore) ReleaseSecrets(_ context.Context, lease string) ([]config.SecretRef, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.uses, lease)
	var free []config.SecretRef
	for r := range s.retired {
		if !s.usedLocked(r) {
			delete(s.retired, r)
			free = append(free, r)
		}
	}
	sortRefs(free)
	return free, nil
}

func (s *memorySecretUseStore) usedLocked(r config.SecretRef) bool {
	for _, refs := range s.uses {
		for _, u := range refs {
			if covers(r, u) {
				return true
			}
		}
	}
	return false
}

// checkUses refuses a use without a lease or a version.
func checkUses(lease string, refs []config.SecretRef) error {
	if lease == "" {
		return fmt.Errorf("environment: recording secret uses: no lease id: %w", errcode.ErrInvalid)
	}
	for _, r := range refs {
		if r.ID == "" || r.Version <= 0 {
			return fmt.Errorf("environment: lease %s: secret use %s needs an id and a version: %w", lease, r, errcode.ErrInvalid)
		}
	}
	return nil
}

func sortRefs(refs []config.SecretRef) {
	slices.SortFunc(refs, func(a, b config.SecretRef) int {
		if a.ID != b.ID {
			if a.ID < b.ID {
				return -1
			}
			return 1
		}
		return int(a.Version - b.Version)
	})
}

// secretKeeper is the envhook.SecretKeeper: it deletes a secret (or
// version) from the SecretStore only once no saved config and no lease
// that is not proven clean references it (CFG-7, LEASE-9). The catalog
// retires what a saved config stops referencing, and the lease manager
// records the references of each lease record and releases them once the
// lease is proven clean (internal/leasehook.Sources.SecretKeeper); berth.New gives both
// the same keeper. It is safe for concurrent use.
type secretKeeper struct {
	uses    SecretUseStore
	secrets SecretStore
	log     *slog.Logger
}

// newSecretKeeper returns a keeper that tracks uses in uses and deletes
// from secrets. log (nil: discard) gets a line for every deletion that
// failed, naming the reference only.
func newSecretKeeper(uses SecretUseStore, secrets SecretStore, log *slog.Logger) *secretKeeper {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &secretKeeper{uses: uses, secrets: secrets, log: log}
}

// Use records that lease uses the secret references of cfg (secret fields
// and secret-map values). Call it before the lease record holding cfg is
// written, so that no retirement deletes them in between; an error means
// nothing may be written that depends on them.
func (k *secretKeeper) Use(ctx context.Context, lease string, cfg config.Config) error {
	refs := secretcfg.SecretRefs(cfg)
	if len(refs) == 0 {
		return nil
	}
	if err := k.uses.UseSecrets(ctx, lease, refs); err != nil {
		return fmt.Errorf("lease %s: recording the secrets it uses: %w", lease, err)
	}
	return nil
}

// Release drops the uses of lease, which is proven clean, and deletes the
// retired secrets that no lease uses any more.
func (k *secretKeeper) Release(ctx context.Context, lease string) error {
	free, err := k.uses.ReleaseSecrets(ctx, lease)
	if err != nil {
		return fmt.Errorf("lease %s: releasing the secrets it used: %w", lease, err)
	}
	k.delete(ctx, free)
	return nil
}

// Retire marks refs as referenced by no saved config and deletes those that
// no lease uses; the others are deleted by the Release of the last lease
// that uses them. If the uses cannot be read, nothing is deleted (a secret
// is kept rather than taken from a lease's cleanup) and the error says so.
func (k *secretKeeper) Retire(ctx context.Context, refs []config.SecretRef) error {
	if len(refs) == 0 {
		return nil
	}
	free, err := k.uses.RetireSecrets(ctx, refs)
	if err != nil {
		return fmt.Errorf("retiring secrets: %w", err)
	}
	k.delete(ctx, free)
	return nil
}

func (k *secretKeeper) delete(ctx context.Context, refs []config.SecretRef) {
	ctx = context.WithoutCancel(ctx)
	for _, r := range refs {
		if err := k.secrets.Delete(ctx, r); err != nil {
			k.log.LogAttrs(ctx, slog.LevelWarn, "environment: deleting a retired secret failed",
				slog.String("secret", r.String()), slog.String("error", err.Error()))
		}
	}
}
