package environmenttest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
)

// RunSecretUseStoreTests runs the environment.SecretUseStore conformance
// suite (CFG-7, LEASE-9 at the store level). newStore returns a fresh,
// empty store for one subtest; it registers its own cleanup with t.
// Subtests run in parallel.
func RunSecretUseStoreTests(t *testing.T, newStore func(t *testing.T) environment.SecretUseStore) {
	t.Helper()
	ctx := context.Background()
	v := func(id string, n int64) config.SecretRef { return config.SecretRef{ID: id, Version: n} }
	sorted := func(refs []config.SecretRef) []config.SecretRef {
		out := slices.Clone(refs)
		slices.SortFunc(out, func(a, b config.SecretRef) int {
			if a.ID != b.ID {
				if a.ID < b.ID {
					return -1
				}
				return 1
			}
			return int(a.Version - b.Version)
		})
		return out
	}
	want := func(t *testing.T, what string, got []config.SecretRef, err error, exp ...config.SecretRef) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if !slices.Equal(sorted(got), sorted(exp)) {
			t.Errorf("%s freed %v, want %v", what, got, exp)
		}
	}
	tests := []struct {
		name string
		run  func(t *testing.T, s environment.SecretUseStore)
	}{
		{"a secret no lease uses is freed at once", func(t *testing.T, s environment.SecretUseStore) {
			free, err := s.RetireSecrets(ctx, []config.SecretRef{v("a", 1), v("b", 0)})
			want(t, "RetireSecrets", free, err, v("a", 1), v("b", 0))
			free, err = s.ReleaseSecrets(ctx, "L-none")
			want(t, "ReleaseSecrets of a lease without uses", free, err)
		}},
		{"a used version is kept until its last lease is released", func(t *testing.T, s environment.SecretUseStore) {
			if err := s.UseSecrets(ctx, "L1", []config.SecretRef{v("a", 1), v("b", 2)}); err != nil {
				t.Fatal(err)
			}
			if err := s.UseSecrets(ctx, "L2", []config.SecretRef{v("a", 1)}); err != nil {
				t.Fatal(err)
			}
			if err := s.UseSecrets(ctx, "L2", []config.SecretRef{v("a", 1)}); err != nil {
				t.Fatalf("recording a use again: %v", err)
			}
			free, err := s.RetireSecrets(ctx, []config.SecretRef{v("a", 1), v("a", 2)})
			want(t, "RetireSecrets", free, err, v("a", 2))
			free, err = s.ReleaseSecrets(ctx, "L1")
			want(t, "ReleaseSecrets(L1)", free, err)
			free, err = s.ReleaseSecrets(ctx, "L2")
			want(t, "ReleaseSecrets(L2)", free, err, v("a", 1))
			free, err = s.ReleaseSecrets(ctx, "L2")
			want(t, "ReleaseSecrets(L2) again", free, err)
		}},
		{"retiring a whole secret waits for a lease using any version", func(t *testing.T, s environment.SecretUseStore) {
			if err := s.UseSecrets(ctx, "L1", []config.SecretRef{v("a", 3)}); err != nil {
				t.Fatal(err)
			}
			free, err := s.RetireSecrets(ctx, []config.SecretRef{v("a", 0), v("b", 0)})
			want(t, "RetireSecrets", free, err, v("b", 0))
			free, err = s.RetireSecrets(ctx, []config.SecretRef{v("a", 0)})
			want(t, "RetireSecrets again", free, err)
			free, err = s.ReleaseSecrets(ctx, "L1")
			want(t, "ReleaseSecrets(L1)", free, err, v("a", 0))
		}},
		{"a retired version is not freed by a lease using another version", func(t *testing.T, s environment.SecretUseStore) {
			if err := s.UseSecrets(ctx, "L1", []config.SecretRef{v("a", 1)}); err != nil {
				t.Fatal(err)
			}
			if err := s.UseSecrets(ctx, "L2", []config.SecretRef{v("a", 2)}); err != nil {
				t.Fatal(err)
			}
			free, err := s.RetireSecrets(ctx, []config.SecretRef{v("a", 1)})
			want(t, "RetireSecrets", free, err)
			free, err = s.ReleaseSecrets(ctx, "L2")
			want(t, "ReleaseSecrets(L2)", free, err)
			free, err = s.ReleaseSecrets(ctx, "L1")
			want(t, "ReleaseSecrets(L1)", free, err, v("a", 1))
		}},
		{"a use without a lease or a version is invalid", func(t *testing.T, s environment.SecretUseStore) {
			if err := s.UseSecrets(ctx, "", []config.SecretRef{v("a", 1)}); !errors.Is(err, errcode.ErrInvalid) {
				t.Errorf("UseSecrets without a lease: %v, want ErrInvalid", err)
			}
			if err := s.UseSecrets(ctx, "L1", []config.SecretRef{v("a", 0)}); !errors.Is(err, errcode.ErrInvalid) {
				t.Errorf("UseSecrets without a version: %v, want ErrInvalid", err)
			}
		}},
		{"concurrent releases free a shared retired version exactly once", func(t *testing.T, s environment.SecretUseStore) {
			const n = 8
			for i := range n {
				if err := s.UseSecrets(ctx, fmt.Sprintf("L%d", i), []config.SecretRef{v("shared", 1)}); err != nil {
					t.Fatal(err)
				}
			}
			free, err := s.RetireSecrets(ctx, []config.SecretRef{v("shared", 0)})
			want(t, "RetireSecrets", free, err)
			var mu sync.Mutex
			var all []config.SecretRef
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					free, err := s.ReleaseSecrets(ctx, fmt.Sprintf("L%d", i))
					if err != nil {
						t.Error(err)
					}
					mu.Lock()
					all = append(all, free...)
					mu.Unlock()
				})
			}
			wg.Wait()
			want(t, "the concurrent releases", all, nil, v("shared", 0))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.run(t, newStore(t))
		})
	}
}
