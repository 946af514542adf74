package lease_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/instance"
	"github.com/berthdev/berth/internal/fakectl"
	"github.com/berthdev/berth/internal/instancehook"
	"github.com/berthdev/berth/lease"
)

// TestQuotas: an acquisition past a company's limit is refused before
// anything is written or created, naming the limit and the company's own
// count; other companies, releases and the same run's lease are not held
// against it.
func TestQuotas(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, worldOpts{options: func(o *mopts) {
		o.Quotas = lease.Quotas{PerCompany: 3, PerCompanyEnvironment: 2}
	}})
	env2 := &environment.Environment{ID: "env-2", Name: "sandbox two", Driver: w.env.Driver, Status: environment.StatusActive, Config: w.env.Config.Clone(), Revision: 1}
	w.save(env2)
	acquire := func(company, env, run string) (*lease.Handle, error) {
		return w.m.Acquire(ctx, op, lease.AcquireRequest{Company: company, EnvironmentID: env, Run: run})
	}
	h1, err := acquire("acme", "env-1", "r1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := acquire("acme", "env-1", "r2"); err != nil {
		t.Fatal(err)
	}
	leases, sandboxes := len(mustList(t, w.store)), len(fakectl.Of(w.fk).Sandboxes())
	_, err = acquire("acme", "env-1", "r3")
	if !errors.Is(err, lease.ErrQuota) {
		t.Fatalf("third lease of acme on env-1: %v, want ErrQuota", err)
	}
	for _, want := range []string{"acme", "has 2 live leases", "PerCompanyEnvironment", "is 2"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("quota error %q does not say %q", err, want)
		}
	}
	if n, s := len(mustList(t, w.store)), len(fakectl.Of(w.fk).Sandboxes()); n != leases || s != sandboxes {
		t.Fatalf("a refused acquisition wrote %d records and created %d sandboxes", n-leases, s-sandboxes)
	}
	// The same run gets its lease back: it adds none.
	again, err := acquire("acme", "env-1", "r1")
	if err != nil || again.Lease().ID != h1.Lease().ID {
		t.Fatalf("same run at the limit: %v, %v", again, err)
	}
	// Another company is not counted, and its error never names acme.
	for _, run := range []string{"o1", "o2"} {
		if _, err := acquire("other", "env-1", run); err != nil {
			t.Fatal(err)
		}
	}
	_, err = acquire("other", "env-1", "o3")
	if !errors.Is(err, lease.ErrQuota) || strings.Contains(err.Error(), "acme") {
		t.Fatalf("other's third lease: %v", err)
	}
	// The company-wide limit spans environments.
	if _, err := acquire("acme", "env-2", "r4"); err != nil {
		t.Fatal(err)
	}
	_, err = acquire("acme", "env-2", "r5")
	if !errors.Is(err, lease.ErrQuota) || !strings.Contains(err.Error(), "has 3 live leases, its limit (quota per company: Quotas.PerCompany or the instance setting quotaPerCompany) is 3") {
		t.Fatalf("fourth lease of acme: %v", err)
	}
	// A release frees its place.
	if _, err := h1.Release(ctx, lease.ReleaseOptions{Disposition: lease.Destroy}); err != nil {
		t.Fatal(err)
	}
	if _, err := acquire("acme", "env-2", "r5"); err != nil {
		t.Fatalf("after a release: %v", err)
	}
}

func mustList(t *testing.T, s lease.Store) []*lease.Lease {
	t.Helper()
	ls, err := s.ListLeases(context.Background(), lease.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	return ls
}

// The instance settings' quotas (issue 51) limit a manager given them
// (Options.Settings), defaults 8 and 4 when never written; with
// Options.Quotas too, the stricter of the two applies per field, and 0 in
// the settings leaves Options.Quotas alone.
func TestQuotasFromInstanceSettings(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name             string
		code             lease.Quotas
		perCompany, perE *int // settings; nil: never written
		want             int  // acquisitions of acme on env-1 granted
	}{
		{"the defaults: 4 per company on one environment", lease.Quotas{}, nil, nil, 4},
		{"the settings", lease.Quotas{}, ptr(2), ptr(0), 2},
		{"the code is stricter", lease.Quotas{PerCompanyEnvironment: 1}, ptr(5), ptr(5), 1},
		{"the settings are stricter", lease.Quotas{PerCompany: 6}, ptr(3), ptr(0), 3},
		{"0 in the settings: the code's limit", lease.Quotas{PerCompany: 2}, ptr(0), ptr(0), 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, worldOpts{})
			hs, hr := instancehook.New(instance.NewMemoryStore(), instancehook.Options{})
			svc, reader := hs.(*instance.Service), hr.(instance.Reader)
			if tc.perCompany != nil {
				if _, err := svc.Update(ctx, op, instance.AnyRevision, func(c *instance.Settings) error {
					c.QuotaPerCompany, c.QuotaPerCompanyEnvironment = *tc.perCompany, *tc.perE
					return nil
				}); err != nil {
					t.Fatal(err)
				}
			}
			w.m = w.newManager(func(o *mopts) { o.Quotas, o.Settings = tc.code, reader })
			granted := 0
			for i := range 8 {
				_, err := w.m.Acquire(ctx, op, lease.AcquireRequest{Company: "acme", EnvironmentID: w.env.ID, Run: fmt.Sprint("r", i)})
				switch {
				case err == nil:
					granted++
				case !errors.Is(err, lease.ErrQuota):
					t.Fatalf("acquisition %d: %v", i, err)
				}
			}
			if granted != tc.want {
				t.Errorf("%d of 8 acquisitions granted, want %d", granted, tc.want)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }
