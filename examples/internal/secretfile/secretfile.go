// Package secretfile is the demo secret store that envctl and
// examples/server share: environment.SecretStore sealed with AES-256-GCM in a
// 0600 file beside the database, its key in another (see Store for what it
// is not).
package secretfile

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
)

// Store is the DEMO environment.SecretStore of envctl and examples/server,
// and deliberately in an internal package no host may import: every value is sealed with AES-256-GCM
// under a key kept in a 0600 file beside the database, and the sealed
// values are kept in a 0600 JSON file rewritten whole under a flock(2) on
// every change. That keeps a CLI's secrets out of its database and its
// output, and no more: the key sits next to the ciphertext, readable by the
// same account (and so by any local lease's task, see the README's note on
// host accounts), there is no key rotation, no audit and no access control
// beyond file modes, and every write rewrites the file. A host plugs in its
// own secret manager (Vault, a cloud KMS, the OS keyring) through the
// four methods of environment.SecretStore; tests use
// berth.Options.MemorySecrets.
type Store struct {
	mu   sync.Mutex // orders this process's goroutines
	path string     // the sealed values
	lock string     // the file flock(2)ed around every access, across processes
	aead cipher.AEAD
}

type sealedSecret struct {
	Owner  string            `json:"owner"`
	Field  string            `json:"field"`
	Latest int64             `json:"latest"`
	Sealed map[string]string `json:"sealed"` // version -> base64(nonce|ciphertext)
}

var _ environment.SecretStore = (*Store)(nil)

// Open opens (creating if needed) the secret file and key file
// that belong to the database at dbPath. The key is created under the same
// OS file lock (PATH.lock) that every read-modify-write of the secret file
// takes, so concurrent processes agree on one key and lose no secret.
func Open(ctx context.Context, dbPath string) (*Store, error) {
	if err := os.MkdirAll(filepath.Dir(dbPath), 0o700); err != nil {
		return nil, err
	}
	s := &Store{path: dbPath + ".secrets", lock: dbPath + ".lock"}
	keyPath := dbPath + ".key"
	var key []byte
	err := withFileLock(ctx, s.lock, func() error {
		var err error
		key, err = os.ReadFile(keyPath)
		if errors.Is(err, os.ErrNotExist) {
			key = make([]byte, 32)
			if _, err := rand.Read(key); err != nil {
				return err
			}
			if err := writePrivate(keyPath, key); err != nil {
				return fmt.Errorf("secretfile: writing secret key %s: %w", keyPath, err)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("secretfile: reading secret key %s: %w", keyPath, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(key) != 32 {
		return nil, fmt.Errorf("secretfile: secret key %s is not 32 bytes", keyPath)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	if s.aead, err = cipher.NewGCM(block); err != nil {
		return nil, err
	}
	return s, nil
}

// writePrivate writes b to path through a 0600 temporary file and a rename,
// so that a reader sees the old content or the new, never a part.
func writePrivate(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// update runs a read-modify-write of the secret file: fn changes m, which is
// saved if fn succeeds. It holds the in-process mutex and the OS file lock.
func (s *Store) update(ctx context.Context, fn func(m map[string]*sealedSecret) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return withFileLock(ctx, s.lock, func() error {
		m, err := s.load()
		if err != nil {
			return err
		}
		if err := fn(m); err != nil {
			return err
		}
		return s.save(m)
	})
}

func (s *Store) load() (map[string]*sealedSecret, error) {
	b, err := os.ReadFile(s.path)
	if errors.Is(err, os.ErrNotExist) {
		return map[string]*sealedSecret{}, nil
	}
	if err != nil {
		return nil, err
	}
	m := map[string]*sealedSecret{}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("secretfile: secret file %s is corrupt: %w", s.path, err)
	}
	return m, nil
}

func (s *Store) save(m map[string]*sealedSecret) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return writePrivate(s.path, b)
}

func (s *Store) seal(id string, version int64, value string) (string, error) {
	nonce := make([]byte, s.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	ad := fmt.Appendf(nil, "%s@%d", id, version)
	return base64.StdEncoding.EncodeToString(s.aead.Seal(nonce, nonce, []byte(value), ad)), nil
}

func (s *Store) open(id string, version int64, sealed string) (string, error) {
	b, err := base64.StdEncoding.DecodeString(sealed)
	if err != nil || len(b) < s.aead.NonceSize() {
		return "", fmt.Errorf("secretfile: secret %s@v%d is corrupt", id, version)
	}
	ad := fmt.Appendf(nil, "%s@%d", id, version)
	plain, err := s.aead.Open(nil, b[:s.aead.NonceSize()], b[s.aead.NonceSize():], ad)
	if err != nil {
		return "", fmt.Errorf("secretfile: secret %s@v%d cannot be opened with this key", id, version)
	}
	return string(plain), nil
}

func (s *Store) Put(ctx context.Context, owner, field, value string) (config.SecretRef, error) {
	if err := ctx.Err(); err != nil {
		return config.SecretRef{}, err
	}
	idb := make([]byte, 8)
	if _, err := rand.Read(idb); err != nil {
		return config.SecretRef{}, err
	}
	id := "sec_" + hex.EncodeToString(idb)
	sealed, err := s.seal(id, 1, value)
	if err != nil {
		return config.SecretRef{}, err
	}
	err = s.update(ctx, func(m map[string]*sealedSecret) error {
		m[id] = &sealedSecret{Owner: owner, Field: field, Latest: 1, Sealed: map[string]string{"1": sealed}}
		return nil
	})
	if err != nil {
		return config.SecretRef{}, err
	}
	return config.SecretRef{ID: id, Version: 1}, nil
}

func (s *Store) Replace(ctx context.Context, ref config.SecretRef, value string) (config.SecretRef, error) {
	if err := ctx.Err(); err != nil {
		return config.SecretRef{}, err
	}
	var v int64
	err := s.update(ctx, func(m map[string]*sealedSecret) error {
		sec, ok := m[ref.ID]
		if !ok {
			return fmt.Errorf("secretfile: secret %s: %w", ref.ID, errcode.ErrNotFound)
		}
		v = sec.Latest + 1
		sealed, err := s.seal(ref.ID, v, value)
		if err != nil {
			return err
		}
		sec.Latest = v
		sec.Sealed[fmt.Sprint(v)] = sealed
		return nil
	})
	if err != nil {
		return config.SecretRef{}, err
	}
	return config.SecretRef{ID: ref.ID, Version: v}, nil
}

func (s *Store) Get(ctx context.Context, ref config.SecretRef) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	var m map[string]*sealedSecret
	s.mu.Lock()
	err := withFileLock(ctx, s.lock, func() error {
		var err error
		m, err = s.load()
		return err
	})
	s.mu.Unlock()
	if err != nil {
		return "", err
	}
	sec, ok := m[ref.ID]
	if !ok {
		return "", fmt.Errorf("secretfile: secret %s: %w", ref, errcode.ErrNotFound)
	}
	sealed, ok := sec.Sealed[fmt.Sprint(ref.Version)]
	if !ok {
		return "", fmt.Errorf("secretfile: secret %s: %w", ref, errcode.ErrNotFound)
	}
	return s.open(ref.ID, ref.Version, sealed)
}

func (s *Store) Delete(ctx context.Context, ref config.SecretRef) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.update(ctx, func(m map[string]*sealedSecret) error {
		sec, ok := m[ref.ID]
		if !ok {
			return nil
		}
		if ref.Version == 0 {
			delete(m, ref.ID)
		} else {
			delete(sec.Sealed, fmt.Sprint(ref.Version))
			if len(sec.Sealed) == 0 {
				delete(m, ref.ID)
			}
		}
		return nil
	})
}
