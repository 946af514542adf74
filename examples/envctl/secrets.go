package main

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

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/environment"
)

// fileSecrets is envctl's durable environment.SecretStore: every value is
// sealed with AES-256-GCM under a key kept in a 0600 file beside the
// database, and the sealed values are kept in a 0600 JSON file. A real host
// plugs in its own secret manager instead; berth only needs the interface.
type fileSecrets struct {
	mu   sync.Mutex
	path string
	aead cipher.AEAD
}

type sealedSecret struct {
	Owner  string            `json:"owner"`
	Field  string            `json:"field"`
	Latest int64             `json:"latest"`
	Sealed map[string]string `json:"sealed"` // version -> base64(nonce|ciphertext)
}

var _ environment.SecretStore = (*fileSecrets)(nil)

// openFileSecrets opens (creating if needed) the secret file and key file
// that belong to the database at dbPath.
func openFileSecrets(dbPath string) (*fileSecrets, error) {
	keyPath := dbPath + ".key"
	key, err := os.ReadFile(keyPath)
	if errors.Is(err, os.ErrNotExist) {
		key = make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(filepath.Dir(keyPath), 0o700); err != nil {
			return nil, err
		}
		if err := os.WriteFile(keyPath, key, 0o600); err != nil {
			return nil, fmt.Errorf("envctl: writing secret key %s: %w", keyPath, err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("envctl: reading secret key %s: %w", keyPath, err)
	}
	if len(key) != 32 {
		return nil, fmt.Errorf("envctl: secret key %s is not 32 bytes", keyPath)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &fileSecrets{path: dbPath + ".secrets", aead: aead}, nil
}

func (s *fileSecrets) load() (map[string]*sealedSecret, error) {
	b, err := os.ReadFile(s.path)
	if errors.Is(err, os.ErrNotExist) {
		return map[string]*sealedSecret{}, nil
	}
	if err != nil {
		return nil, err
	}
	m := map[string]*sealedSecret{}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("envctl: secret file %s is corrupt: %w", s.path, err)
	}
	return m, nil
}

func (s *fileSecrets) save(m map[string]*sealedSecret) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	tmp := s.path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, s.path)
}

func (s *fileSecrets) seal(id string, version int64, value string) (string, error) {
	nonce := make([]byte, s.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	ad := fmt.Appendf(nil, "%s@%d", id, version)
	return base64.StdEncoding.EncodeToString(s.aead.Seal(nonce, nonce, []byte(value), ad)), nil
}

func (s *fileSecrets) open(id string, version int64, sealed string) (string, error) {
	b, err := base64.StdEncoding.DecodeString(sealed)
	if err != nil || len(b) < s.aead.NonceSize() {
		return "", fmt.Errorf("envctl: secret %s@v%d is corrupt", id, version)
	}
	ad := fmt.Appendf(nil, "%s@%d", id, version)
	plain, err := s.aead.Open(nil, b[:s.aead.NonceSize()], b[s.aead.NonceSize():], ad)
	if err != nil {
		return "", fmt.Errorf("envctl: secret %s@v%d cannot be opened with this key", id, version)
	}
	return string(plain), nil
}

func (s *fileSecrets) Put(ctx context.Context, owner, field, value string) (drivers.SecretRef, error) {
	if err := ctx.Err(); err != nil {
		return drivers.SecretRef{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m, err := s.load()
	if err != nil {
		return drivers.SecretRef{}, err
	}
	idb := make([]byte, 8)
	if _, err := rand.Read(idb); err != nil {
		return drivers.SecretRef{}, err
	}
	id := "sec_" + hex.EncodeToString(idb)
	sealed, err := s.seal(id, 1, value)
	if err != nil {
		return drivers.SecretRef{}, err
	}
	m[id] = &sealedSecret{Owner: owner, Field: field, Latest: 1, Sealed: map[string]string{"1": sealed}}
	if err := s.save(m); err != nil {
		return drivers.SecretRef{}, err
	}
	return drivers.SecretRef{ID: id, Version: 1}, nil
}

func (s *fileSecrets) Replace(ctx context.Context, ref drivers.SecretRef, value string) (drivers.SecretRef, error) {
	if err := ctx.Err(); err != nil {
		return drivers.SecretRef{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m, err := s.load()
	if err != nil {
		return drivers.SecretRef{}, err
	}
	sec, ok := m[ref.ID]
	if !ok {
		return drivers.SecretRef{}, fmt.Errorf("envctl: secret %s: %w", ref.ID, environment.ErrNotFound)
	}
	v := sec.Latest + 1
	sealed, err := s.seal(ref.ID, v, value)
	if err != nil {
		return drivers.SecretRef{}, err
	}
	sec.Latest = v
	sec.Sealed[fmt.Sprint(v)] = sealed
	if err := s.save(m); err != nil {
		return drivers.SecretRef{}, err
	}
	return drivers.SecretRef{ID: ref.ID, Version: v}, nil
}

func (s *fileSecrets) Get(ctx context.Context, ref drivers.SecretRef) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m, err := s.load()
	if err != nil {
		return "", err
	}
	sec, ok := m[ref.ID]
	if !ok {
		return "", fmt.Errorf("envctl: secret %s: %w", ref, environment.ErrNotFound)
	}
	sealed, ok := sec.Sealed[fmt.Sprint(ref.Version)]
	if !ok {
		return "", fmt.Errorf("envctl: secret %s: %w", ref, environment.ErrNotFound)
	}
	return s.open(ref.ID, ref.Version, sealed)
}

func (s *fileSecrets) Delete(ctx context.Context, ref drivers.SecretRef) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m, err := s.load()
	if err != nil {
		return err
	}
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
	return s.save(m)
}
