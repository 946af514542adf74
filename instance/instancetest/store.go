// Package instancetest is the conformance suite of instance.Store: every
// implementation (instance.NewMemoryStore's, the SQL stores of store/sqlite and
// store/postgres) passes RunStoreTests.
//
//	instancetest.RunStoreTests(t, func(t *testing.T) instance.Store { return instance.NewMemoryStore() })
package instancetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/instance"
)

// RunStoreTests runs the conformance suite on stores made by newStore;
// every subtest gets a fresh, empty store.
func RunStoreTests(t *testing.T, newStore func(t *testing.T) instance.Store) {
	ctx := context.Background()
	at := time.Date(2026, 12, 2, 1, 0, 0, 123456000, time.UTC)
	rec := func(rev int64, enable, managed bool, by string) instance.Settings {
		// The quotas and the minimum isolation differ per revision (0, no
		// limit, and none at revision 3).
		return instance.Settings{EnableEnvironments: enable, ManagedSandboxOnly: managed, Revision: rev,
			MinimumIsolation: drivers.Isolation(rev % 3),
			QuotaPerCompany:  int(rev%3) * 5, QuotaPerCompanyEnvironment: int(rev%3) * 2,
			UpdatedAt: at.Add(time.Duration(rev) * time.Minute), UpdatedBy: by}
	}
	equalTimes := cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })
	want := func(t *testing.T, s instance.Store, w instance.Settings) {
		t.Helper()
		got, err := s.GetSettings(ctx)
		if err != nil {
			t.Fatalf("GetSettings: %v", err)
		}
		if d := cmp.Diff(w, got, equalTimes); d != "" {
			t.Errorf("stored settings (-want +got):\n%s", d)
		}
	}

	t.Run("nothing written is not found", func(t *testing.T) {
		s := newStore(t)
		if _, err := s.GetSettings(ctx); !errors.Is(err, errcode.ErrNotFound) {
			t.Errorf("GetSettings of an empty store = %v, want ErrNotFound", err)
		}
	})
	t.Run("put get round trip at each revision", func(t *testing.T) {
		s := newStore(t)
		first := rec(1, false, true, "admin-1")
		if err := s.PutSettings(ctx, first); err != nil {
			t.Fatal(err)
		}
		want(t, s, first)
		second := rec(2, true, false, "admin-2")
		if err := s.PutSettings(ctx, second); err != nil {
			t.Fatal(err)
		}
		want(t, s, second)
		third := rec(3, true, false, "admin-3")
		if err := s.PutSettings(ctx, third); err != nil {
			t.Fatal(err)
		}
		want(t, s, third) // quotas 0: no limit, kept as 0
	})
	t.Run("a stale or skipping revision is a conflict and changes nothing", func(t *testing.T) {
		s := newStore(t)
		first := rec(1, false, false, "admin-1")
		if err := s.PutSettings(ctx, first); err != nil {
			t.Fatal(err)
		}
		for _, rev := range []int64{1, 3, 7} {
			if err := s.PutSettings(ctx, rec(rev, true, true, "intruder")); !errors.Is(err, errcode.ErrConflict) {
				t.Errorf("PutSettings at revision %d over revision 1 = %v, want ErrConflict", rev, err)
			}
		}
		want(t, s, first)
	})
	t.Run("the first write must be revision 1", func(t *testing.T) {
		s := newStore(t)
		if err := s.PutSettings(ctx, rec(2, true, true, "x")); !errors.Is(err, errcode.ErrConflict) {
			t.Errorf("PutSettings at revision 2 on an empty store = %v, want ErrConflict", err)
		}
		if _, err := s.GetSettings(ctx); !errors.Is(err, errcode.ErrNotFound) {
			t.Errorf("after the refused write GetSettings = %v, want ErrNotFound", err)
		}
	})
	t.Run("a revision below 1 is invalid", func(t *testing.T) {
		s := newStore(t)
		for _, rev := range []int64{0, -1} {
			if err := s.PutSettings(ctx, rec(rev, true, false, "x")); !errors.Is(err, errcode.ErrInvalid) {
				t.Errorf("PutSettings at revision %d = %v, want ErrInvalid", rev, err)
			}
		}
	})
	t.Run("concurrent writers of one revision: exactly one wins", func(t *testing.T) {
		s := newStore(t)
		if err := s.PutSettings(ctx, rec(1, true, false, "admin-0")); err != nil {
			t.Fatal(err)
		}
		const writers = 8
		errs := make([]error, writers)
		var wg sync.WaitGroup
		for i := range writers {
			wg.Go(func() {
				errs[i] = s.PutSettings(ctx, rec(2, i%2 == 0, i%3 == 0, fmt.Sprintf("admin-%d", i+1)))
			})
		}
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil && winner >= 0:
				t.Errorf("writers %d and %d both wrote revision 2", winner, i)
			case err == nil:
				winner = i
			case !errors.Is(err, errcode.ErrConflict):
				t.Errorf("writer %d: %v, want nil or ErrConflict", i, err)
			}
		}
		if winner < 0 {
			t.Fatal("no writer won")
		}
		want(t, s, rec(2, winner%2 == 0, winner%3 == 0, fmt.Sprintf("admin-%d", winner+1)))
	})
	t.Run("a cancelled context is refused", func(t *testing.T) {
		s := newStore(t)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if err := s.PutSettings(cctx, rec(1, true, false, "x")); err == nil {
			t.Error("PutSettings on a cancelled context succeeded")
		}
		if _, err := s.GetSettings(ctx); !errors.Is(err, errcode.ErrNotFound) {
			t.Errorf("after a cancelled write GetSettings = %v, want ErrNotFound", err)
		}
	})
}
