package leasetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/lease"
)

// liveOf counts the live leases of company (and those on env) as the
// store lists them.
func liveOf(t *testing.T, s lease.Store, company, env string) (all, onEnv int) {
	t.Helper()
	ls, err := s.ListLeases(context.Background(), lease.Filter{Company: company, Live: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range ls {
		if l.Environment == env {
			onEnv++
		}
	}
	return len(ls), onEnv
}

// testInsertWithinQuota (issue 51): InsertLease with quotas counts the
// company's live leases in the step that writes: an insert that would pass
// a limit (per company, per company and environment) writes nothing and
// wraps ErrQuota naming the limit; ended leases, other companies' and the
// instance company's do not count; a key conflict is answered as without
// quotas; and a Quotas that limits nothing counts nothing.
func testInsertWithinQuota(t *testing.T, s lease.Store) {
	ctx := context.Background()
	q := lease.Quotas{PerCompany: 3, PerCompanyEnvironment: 2}
	ended := Sample("ended", lease.StatusReleased, "", "")
	mustInsert(t, s, ended)
	other := Sample("globex-1", lease.StatusActive, "", "")
	other.Company = "globex"
	mustInsert(t, s, other)
	pool := Sample("pool-1", lease.StatusActive, "", "")
	pool.Company = authz.InstanceCompany
	mustInsert(t, s, pool)
	for i, env := range []string{"env-1", "env-1", "env-2"} {
		l := Sample(fmt.Sprintf("q%d", i), lease.StatusStarting, "", "")
		l.Environment = env
		if _, err := s.InsertLease(ctx, l, q); err != nil {
			t.Fatalf("insert %d within %+v: %v", i, q, err)
		}
	}
	third := Sample("q-env1", lease.StatusStarting, "", "")
	_, err := s.InsertLease(ctx, third, lease.Quotas{PerCompanyEnvironment: 2})
	if !errors.Is(err, lease.ErrQuota) {
		t.Errorf("a third live lease of acme on env-1 within 2 per environment: %v, want ErrQuota", err)
	}
	fourth := Sample("q-env3", lease.StatusStarting, "", "")
	fourth.Environment = "env-3"
	_, err = s.InsertLease(ctx, fourth, q)
	if !errors.Is(err, lease.ErrQuota) {
		t.Errorf("a fourth live lease of acme within 3 per company: %v, want ErrQuota", err)
	}
	for _, id := range []string{"q-env1", "q-env3"} {
		if _, err := s.GetLease(ctx, id); !errors.Is(err, errcode.ErrNotFound) {
			t.Errorf("refused lease %s was written: %v", id, err)
		}
	}
	if all, _ := liveOf(t, s, "acme", "env-1"); all != 3 {
		t.Errorf("acme has %d live leases after the refusals, want 3", all)
	}
	// Other tenants are not limited by acme's count.
	g := Sample("globex-2", lease.StatusStarting, "", "")
	g.Company = "globex"
	if _, err := s.InsertLease(ctx, g, q); err != nil {
		t.Errorf("globex's second lease: %v", err)
	}
	ic := Sample("pool-2", lease.StatusStarting, "", "")
	ic.Company = authz.InstanceCompany
	if _, err := s.InsertLease(ctx, ic, lease.Quotas{PerCompany: 1}); err != nil {
		t.Errorf("an instance lease under a quota: %v (the instance company counts for nobody)", err)
	}
	// A lease that ends frees its place.
	done := mustGet(t, s, "q0")
	done.Status = lease.StatusReleased
	if err := s.UpdateLease(ctx, done); err != nil {
		t.Fatal(err)
	}
	if _, err := s.InsertLease(ctx, fourth, q); err != nil {
		t.Errorf("after one ended: %v", err)
	}
	// A taken key is a conflict with its holder, quota or not.
	keyed := Sample("keyed", lease.StatusActive, "", "run-key")
	keyed.Company = "initech"
	if _, err := s.InsertLease(ctx, keyed, q); err != nil {
		t.Fatal(err)
	}
	dup := Sample("keyed-2", lease.StatusStarting, "", "run-key")
	dup.Company = "initech"
	holder, err := s.InsertLease(ctx, dup, q)
	if !errors.Is(err, errcode.ErrConflict) || holder == nil || holder.ID != "keyed" {
		t.Errorf("insert of a held run key within quotas: %v, %v; want ErrConflict with its holder", holder, err)
	}
	// No limit: a plain insert.
	free := Sample("free", lease.StatusStarting, "", "")
	if _, err := s.InsertLease(ctx, free, lease.Quotas{}); err != nil {
		t.Errorf("insert without limits: %v", err)
	}
}

// testConcurrentInsertsWithinQuota (issue 51): 20 concurrent inserts of one
// company against a limit of 4 (per company, and separately per company
// and environment): exactly 4 are written, the rest wrap ErrQuota. Run on
// two pools of one database (sqlstore's twoPools) it holds across
// processes.
func testConcurrentInsertsWithinQuota(t *testing.T, s lease.Store) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		company string
		q       lease.Quotas
	}{
		{"per company", "acme", lease.Quotas{PerCompany: 4}},
		{"per company and environment", "globex", lease.Quotas{PerCompanyEnvironment: 4}},
	} {
		var wg sync.WaitGroup
		var mu sync.Mutex
		won, refused := 0, 0
		for i := range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l := Sample(fmt.Sprintf("%s-%d", tc.company, i), lease.StatusStarting, "", "")
				l.Company = tc.company
				_, err := s.InsertLease(ctx, l, tc.q)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					won++
				case errors.Is(err, lease.ErrQuota):
					refused++
				default:
					t.Errorf("%s: insert %d: %v", tc.name, i, err)
				}
			}()
		}
		wg.Wait()
		if all, _ := liveOf(t, s, tc.company, "env-1"); won != 4 || refused != 16 || all != 4 {
			t.Errorf("%s: %d inserts won, %d refused, %d live; want 4, 16, 4", tc.name, won, refused, all)
		}
	}
}

// testAdoptWithinQuota (issue 51): an adoption counts the adopting
// company's live leases in its step: at the limit it is refused with
// ErrQuota and the member stays pooled.
func testAdoptWithinQuota(t *testing.T, s lease.Store) {
	ctx := context.Background()
	mustInsert(t, s, pooledSample("m1", "fp1", 0))
	mustInsert(t, s, pooledSample("m2", "fp1", time.Second))
	mustInsert(t, s, Sample("busy", lease.StatusActive, "", ""))
	ad := adoption("fp1", "r1", "adopter-1")
	if got, err := s.AdoptPooled(ctx, ad, lease.Quotas{PerCompany: 2}); err != nil || got.ID != "m1" {
		t.Fatalf("adoption within 2 with 1 live: %v, %v", got, err)
	}
	ad2 := adoption("fp1", "r2", "adopter-2")
	if _, err := s.AdoptPooled(ctx, ad2, lease.Quotas{PerCompany: 2}); !errors.Is(err, lease.ErrQuota) {
		t.Errorf("adoption with 2 live within 2: %v, want ErrQuota", err)
	}
	if l := mustGet(t, s, "m2"); l.Status != lease.StatusPooled || l.Company != authz.InstanceCompany {
		t.Errorf("a refused adoption changed member m2: %+v", l)
	}
}
