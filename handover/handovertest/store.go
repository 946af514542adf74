// Package handovertest is the conformance suite of handover.Store: every
// implementation (handover.NewMemoryStore's, the SQL stores of
// store/sqlite and store/postgres) passes RunStoreTests.
package handovertest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/handover"
)

// RunStoreTests runs the conformance suite on stores made by newStore; every
// subtest gets a fresh store.
func RunStoreTests(t *testing.T, newStore func(t *testing.T) handover.Store) {
	ctx := context.Background()
	at := time.Date(2026, 11, 30, 12, 0, 0, 123456000, time.UTC)
	rec := func(company, ref, prep string) handover.AuthCheck {
		return handover.AuthCheck{Company: company, AccountRef: ref, Version: 1, Status: handover.StatusPending,
			Fingerprint: "sha256:ab", Provider: handover.Provider{Driver: "daytona", Account: "secret:sec_k@v2"},
			Projects: []string{"p1", "p2"}, Environment: "env_1", Preparation: prep, PreparedAt: at, PreparedBy: "op-1"}
	}
	t.Run("put get round trip and replace", func(t *testing.T) {
		s := newStore(t)
		if _, err := s.GetAuthCheck(ctx, "acme", "secret:a@v1"); !errors.Is(err, errcode.ErrNotFound) {
			t.Fatalf("Get of nothing = %v, want ErrNotFound", err)
		}
		a := rec("acme", "secret:a@v1", "prep_1")
		if err := s.PutAuthCheck(ctx, a); err != nil {
			t.Fatal(err)
		}
		got, err := s.GetAuthCheck(ctx, "acme", "secret:a@v1")
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(a, got); d != "" {
			t.Errorf("round trip (-put +got):\n%s", d)
		}
		b := rec("acme", "secret:a@v1", "prep_2")
		b.Projects, b.Fingerprint, b.Version = []string{}, "sha256:cd", 2
		if err := s.PutAuthCheck(ctx, b); err != nil {
			t.Fatal(err)
		}
		got, _ = s.GetAuthCheck(ctx, "acme", "secret:a@v1")
		if d := cmp.Diff(b, got); d != "" {
			t.Errorf("after a replace (-put +got):\n%s", d)
		}
		// Another company's record of the same account is another key.
		if _, err := s.GetAuthCheck(ctx, "globex", "secret:a@v1"); !errors.Is(err, errcode.ErrNotFound) {
			t.Errorf("Get for another company = %v, want ErrNotFound", err)
		}
	})
	t.Run("complete only the current preparation", func(t *testing.T) {
		s := newStore(t)
		if _, err := s.CompleteAuthCheck(ctx, "acme", "secret:a@v1", "prep_1", handover.StatusSucceeded, at, "op-1", ""); !errors.Is(err, errcode.ErrNotFound) {
			t.Errorf("Complete of nothing = %v, want ErrNotFound", err)
		}
		if err := s.PutAuthCheck(ctx, rec("acme", "secret:a@v1", "prep_1")); err != nil {
			t.Fatal(err)
		}
		if err := s.PutAuthCheck(ctx, rec("acme", "secret:a@v1", "prep_2")); err != nil {
			t.Fatal(err)
		}
		if _, err := s.CompleteAuthCheck(ctx, "acme", "secret:a@v1", "prep_1", handover.StatusSucceeded, at, "op-1", ""); !errors.Is(err, handover.ErrStale) {
			t.Errorf("Complete of a replaced preparation = %v, want ErrStale", err)
		}
		later := at.Add(time.Minute)
		got, err := s.CompleteAuthCheck(ctx, "acme", "secret:a@v1", "prep_2", handover.StatusFailed, later, "op-2", "project p2 lacks access")
		if err != nil {
			t.Fatal(err)
		}
		want := rec("acme", "secret:a@v1", "prep_2")
		want.Status, want.CheckedAt, want.CheckedBy, want.Message = handover.StatusFailed, later, "op-2", "project p2 lacks access"
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("completed record (-want +got):\n%s", d)
		}
		if stored, _ := s.GetAuthCheck(ctx, "acme", "secret:a@v1"); !cmp.Equal(want, stored) {
			t.Errorf("stored after Complete = %+v, want %+v", stored, want)
		}
	})
	t.Run("list sorted and by company, delete", func(t *testing.T) {
		s := newStore(t)
		for _, k := range [][2]string{{"globex", "secret:b@v1"}, {"acme", "secret:b@v1"}, {"acme", "secret:a@v1"}} {
			if err := s.PutAuthCheck(ctx, rec(k[0], k[1], "prep_"+k[0])); err != nil {
				t.Fatal(err)
			}
		}
		keys := func(cs []handover.AuthCheck) []string {
			out := []string{}
			for _, c := range cs {
				out = append(out, c.Company+"/"+c.AccountRef)
			}
			return out
		}
		all, err := s.ListAuthChecks(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff([]string{"acme/secret:a@v1", "acme/secret:b@v1", "globex/secret:b@v1"}, keys(all)); d != "" {
			t.Errorf("List all (-want +got):\n%s", d)
		}
		acme, _ := s.ListAuthChecks(ctx, "acme")
		if d := cmp.Diff([]string{"acme/secret:a@v1", "acme/secret:b@v1"}, keys(acme)); d != "" {
			t.Errorf("List acme (-want +got):\n%s", d)
		}
		if err := s.DeleteAuthCheck(ctx, "acme", "secret:b@v1"); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteAuthCheck(ctx, "acme", "secret:b@v1"); !errors.Is(err, errcode.ErrNotFound) {
			t.Errorf("second Delete = %v, want ErrNotFound", err)
		}
		if _, err := s.CompleteAuthCheck(ctx, "acme", "secret:b@v1", "prep_acme", handover.StatusSucceeded, at, "op", ""); !errors.Is(err, errcode.ErrNotFound) {
			t.Errorf("Complete after a clear = %v, want ErrNotFound", err)
		}
		if _, err := s.GetAuthCheck(ctx, "globex", "secret:b@v1"); err != nil {
			t.Errorf("the other company's record went with the delete: %v", err)
		}
	})
	t.Run("concurrent preparations: one answer stands", func(t *testing.T) {
		s := newStore(t)
		var wg sync.WaitGroup
		var mu sync.Mutex
		won := 0
		for i := range 8 {
			wg.Go(func() {
				prep := fmt.Sprintf("prep_%d", i)
				if err := s.PutAuthCheck(ctx, rec("acme", "secret:a@v1", prep)); err != nil {
					t.Error(err)
					return
				}
				_, err := s.CompleteAuthCheck(ctx, "acme", "secret:a@v1", prep, handover.StatusSucceeded, at, "op", prep)
				switch {
				case err == nil:
					mu.Lock()
					won++
					mu.Unlock()
				case !errors.Is(err, handover.ErrStale):
					t.Error(err)
				}
			})
		}
		wg.Wait()
		got, err := s.GetAuthCheck(ctx, "acme", "secret:a@v1")
		if err != nil {
			t.Fatal(err)
		}
		// The stored record is one preparation's, and if it is answered,
		// the answer is its own.
		if got.Status == handover.StatusSucceeded && got.Message != got.Preparation {
			t.Errorf("record of %s carries the answer of %s", got.Preparation, got.Message)
		}
		if won == 0 {
			t.Error("no preparation got its answer stored")
		}
	})
	t.Run("cancelled context", func(t *testing.T) {
		s := newStore(t)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if err := s.PutAuthCheck(cctx, rec("acme", "secret:a@v1", "p")); err == nil {
			t.Error("Put with a cancelled context succeeded")
		}
	})
}
