package environment

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/errcode"
)

// SecretStore keeps secret values (SSH private keys, provider API keys) out
// of configs (CFG-3). The catalog moves every pasted secret into it and keeps
// only the config.SecretRef. Versions are immutable: Replace adds a version
// and leaves the older ones readable until they are deleted, so that a
// failed update can be rolled back without touching the stored config's
// secret. Implementations are safe for concurrent use and never put a value
// in an error, a log line or a String method.
type SecretStore interface {
	// Put stores value as a new secret owned by the environment owner's
	// config field and returns its reference (Version 1).
	Put(ctx context.Context, owner, field, value string) (config.SecretRef, error)
	// Replace stores value as the next version of ref.ID and returns the new
	// reference (latest Version + 1). It returns an error wrapping
	// errcode.ErrNotFound if the secret does not exist.
	Replace(ctx context.Context, ref config.SecretRef, value string) (config.SecretRef, error)
	// Get returns the value of exactly ref's version, or an error wrapping
	// errcode.ErrNotFound (the error names the reference, never a value).
	Get(ctx context.Context, ref config.SecretRef) (string, error)
	// Delete removes version ref.Version of ref.ID, or the whole secret when
	// ref.Version is 0. Deleting something absent is not an error.
	Delete(ctx context.Context, ref config.SecretRef) error
}

// secretInfo describes a stored secret without its value (tests).
type secretInfo struct {
	ID       string  `json:"id"`
	Owner    string  `json:"owner"`
	Field    string  `json:"field"`
	Versions []int64 `json:"versions"`
}

// memorySecretStore is newMemorySecretStore's SecretStore.
type memorySecretStore struct {
	mu      sync.Mutex
	secrets map[string]*memSecret
}

type memSecret struct {
	owner, field string
	latest       int64
	values       map[int64]string
}

var _ SecretStore = (*memorySecretStore)(nil)

// newMemorySecretStore returns an empty in-memory SecretStore for tests
// and the embedded default (envhook.NewMemorySecretStore; berth.New without
// Options.Secrets), safe for concurrent use. Put makes ids of
// "sec_" and 16 random hex digits.
func newMemorySecretStore() SecretStore {
	return &memorySecretStore{secrets: map[string]*memSecret{}}
}

// Put implements SecretStore. The id is "sec_" followed by 16 random hex
// digits.
func (m *memorySecretStore) Put(ctx context.Context, owner, field, value string) (config.SecretRef, error) {
	if err := ctx.Err(); err != nil {
		return config.SecretRef{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	id := "sec_" + randomHex(8)
	for m.secrets[id] != nil {
		id = "sec_" + randomHex(8)
	}
	m.secrets[id] = &memSecret{owner: owner, field: field, latest: 1, values: map[int64]string{1: value}}
	return config.SecretRef{ID: id, Version: 1}, nil
}

// Replace implements SecretStore.
func (m *memorySecretStore) Replace(ctx context.Context, ref config.SecretRef, value string) (config.SecretRef, error) {
	if err := ctx.Err(); err != nil {
		return config.SecretRef{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.secrets[ref.ID]
	if s == nil {
		return config.SecretRef{}, fmt.Errorf("environment: secret %s: %w", ref, errcode.ErrNotFound)
	}
	s.latest++
	s.values[s.latest] = value
	return config.SecretRef{ID: ref.ID, Version: s.latest}, nil
}

// Get implements SecretStore.
func (m *memorySecretStore) Get(ctx context.Context, ref config.SecretRef) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.secrets[ref.ID]; s != nil {
		if v, ok := s.values[ref.Version]; ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("environment: secret %s: %w", ref, errcode.ErrNotFound)
}

// Delete implements SecretStore.
func (m *memorySecretStore) Delete(ctx context.Context, ref config.SecretRef) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.secrets[ref.ID]
	if s == nil {
		return nil
	}
	if ref.Version != 0 {
		delete(s.values, ref.Version)
	}
	if ref.Version == 0 || len(s.values) == 0 {
		delete(m.secrets, ref.ID)
	}
	return nil
}

// list describes every stored secret (ids, owners, fields and versions; no
// values), sorted by id, for tests.
func (m *memorySecretStore) list() []secretInfo {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]secretInfo, 0, len(m.secrets))
	for id, s := range m.secrets {
		info := secretInfo{ID: id, Owner: s.owner, Field: s.field}
		for v := range s.values {
			info.Versions = append(info.Versions, v)
		}
		slices.Sort(info.Versions)
		out = append(out, info)
	}
	slices.SortFunc(out, func(a, b secretInfo) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// randomHex returns 2n random hex digits.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b)
}
