package environmenttest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/reason"
)

// RunHealthStoreTests runs the environment.HealthStore conformance suite
// (CAP-3 at the store level). newStore returns a fresh, empty store for one
// subtest; it registers its own cleanup with t. Subtests run in parallel.
func RunHealthStoreTests(t *testing.T, newStore func(t *testing.T) environment.HealthStore) {
	t.Helper()
	ctx := context.Background()
	at := time.Date(2026, 11, 30, 9, 0, 0, 123456000, time.UTC)
	down := environment.ProviderHealth{Driver: "docker", Endpoint: "unix:///var/run/docker.sock",
		Code: reason.ProviderUnavailable, Reason: "engine not answering", CheckedAt: at}
	timeEqual := cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })
	tests := []struct {
		name string
		run  func(t *testing.T, s environment.HealthStore)
	}{
		{"a never measured endpoint is not found", func(t *testing.T, s environment.HealthStore) {
			if _, err := s.GetProviderHealth(ctx, "docker", "unix:///nowhere"); !errors.Is(err, errcode.ErrNotFound) {
				t.Errorf("Get of a missing record: %v, want ErrNotFound", err)
			}
			if l, err := s.ListProviderHealth(ctx); err != nil || len(l) != 0 {
				t.Errorf("List of an empty store = %v, %v", l, err)
			}
		}},
		{"put then get round-trips", func(t *testing.T, s environment.HealthStore) {
			if err := s.PutProviderHealth(ctx, down); err != nil {
				t.Fatal(err)
			}
			got, err := s.GetProviderHealth(ctx, down.Driver, down.Endpoint)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(down, got, timeEqual); diff != "" {
				t.Errorf("Get (-want +got):\n%s", diff)
			}
		}},
		{"the next measurement replaces the last: success clears a failure", func(t *testing.T, s environment.HealthStore) {
			if err := s.PutProviderHealth(ctx, down); err != nil {
				t.Fatal(err)
			}
			up := environment.ProviderHealth{Driver: down.Driver, Endpoint: down.Endpoint, Available: true, CheckedAt: at.Add(time.Minute)}
			if err := s.PutProviderHealth(ctx, up); err != nil {
				t.Fatal(err)
			}
			got, err := s.GetProviderHealth(ctx, down.Driver, down.Endpoint)
			if err != nil || !got.Available || got.Reason != "" || got.Code != "" || !got.CheckedAt.Equal(up.CheckedAt) {
				t.Errorf("Get after a success = %+v, %v", got, err)
			}
			if l, _ := s.ListProviderHealth(ctx); len(l) != 1 {
				t.Errorf("List holds %d records, want 1", len(l))
			}
		}},
		{"list sorts by driver then endpoint; endpoints are exact", func(t *testing.T, s environment.HealthStore) {
			recs := []environment.ProviderHealth{
				{Driver: "docker", Endpoint: "unix:///b", Available: true, CheckedAt: at},
				{Driver: "daytona", Endpoint: "https://api.example/api secret:sec_1@v1", Available: true, CheckedAt: at},
				{Driver: "docker", Endpoint: "unix:///B", Available: true, CheckedAt: at},
				{Driver: "docker", Endpoint: "unix:///a", Available: true, CheckedAt: at},
			}
			for _, h := range recs {
				if err := s.PutProviderHealth(ctx, h); err != nil {
					t.Fatal(err)
				}
			}
			l, err := s.ListProviderHealth(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, h := range l {
				got = append(got, h.Driver+" "+h.Endpoint)
			}
			want := []string{"daytona https://api.example/api secret:sec_1@v1", "docker unix:///B", "docker unix:///a", "docker unix:///b"}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("List order (-want +got):\n%s", diff)
			}
		}},
		{"a record without driver or endpoint is invalid", func(t *testing.T, s environment.HealthStore) {
			for _, h := range []environment.ProviderHealth{{Endpoint: "x"}, {Driver: "docker"}} {
				if err := s.PutProviderHealth(ctx, h); !errors.Is(err, errcode.ErrInvalid) {
					t.Errorf("Put(%+v) = %v, want ErrInvalid", h, err)
				}
			}
		}},
		{"concurrent puts leave one record", func(t *testing.T, s environment.HealthStore) {
			var wg sync.WaitGroup
			for i := range 10 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					h := down
					h.Available = i%2 == 0
					h.CheckedAt = at.Add(time.Duration(i) * time.Second)
					if err := s.PutProviderHealth(ctx, h); err != nil {
						t.Error(err)
					}
				}()
			}
			wg.Wait()
			if l, err := s.ListProviderHealth(ctx); err != nil || len(l) != 1 {
				t.Errorf("List after concurrent puts = %d records, %v; want 1", len(l), err)
			}
		}},
		{"a cancelled context is honoured", func(t *testing.T, s environment.HealthStore) {
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			if err := s.PutProviderHealth(cctx, down); err == nil {
				t.Error("Put with a cancelled context succeeded")
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, newStore(t))
		})
	}
}
