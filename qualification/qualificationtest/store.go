// Package qualificationtest is the conformance suite for qualification.Store
// implementations. A store's test calls RunStoreTests with a constructor
// that returns a fresh, empty store for each subtest.
package qualificationtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/images"
	"github.com/berthdev/berth/qualification"
)

// recordCmp compares records: identities by value, times by Equal.
var recordCmp = cmp.Options{
	cmp.Comparer(func(a, b images.Identity) bool { return a == b }),
	cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) }),
}

// record returns a complete record for company and environment, with a
// fingerprint seeded by n. Times have microsecond precision, which every
// store keeps.
func record(company, environment string, n int) qualification.Record {
	return qualification.Record{
		Company:     company,
		Environment: environment,
		Fingerprint: fmt.Sprintf("sha256:%064x", n),
		Image:       images.MustParseIdentity(fmt.Sprintf("127.0.0.1:5000/app@sha256:%064x", n+1)),
		Template:    fmt.Sprintf("snapshot:fake/template-%d", n),
		Platform: qualification.Platform{OS: "linux", Arch: "amd64", Libc: qualification.LibcGlibc, LibcVersion: "2.36",
			Kernel: "6.1.0-18-amd64", ReleaseID: "debian", ReleaseVersion: "12"},
		Isolation:  []string{"container", "gvisor"}[n%2],
		LeaseID:    fmt.Sprintf("lease-%d", n),
		RecordedAt: time.Date(2026, 11, 29, 10, 0, n%60, 123456000, time.UTC),
	}
}

// RunStoreTests runs the conformance suite against the stores newStore
// makes (QUAL-2, QUAL-4). newStore returns a fresh, empty store for one
// subtest and registers its own cleanup with t; subtests run in parallel,
// so the stores it returns must not share records.
func RunStoreTests(t *testing.T, newStore func(t *testing.T) qualification.Store) {
	t.Helper()
	ctx := context.Background()
	tests := []struct {
		name string
		fn   func(t *testing.T, s qualification.Store)
	}{
		{"missing record is ErrNotFound", func(t *testing.T, s qualification.Store) {
			if _, err := s.GetQualification(ctx, "acme", "env-1"); !errors.Is(err, errcode.ErrNotFound) {
				t.Errorf("Get of a missing record: %v, want ErrNotFound", err)
			}
		}},
		{"put then get returns the same record", func(t *testing.T, s qualification.Store) {
			want := record("acme", "env-1", 1)
			mustPut(t, s, want)
			got, err := s.GetQualification(ctx, "acme", "env-1")
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got, recordCmp); diff != "" {
				t.Errorf("Get (-want +got):\n%s", diff)
			}
		}},
		// QUAL-3: an invalidation round-trips with its reason and time.
		{"an invalidated record round-trips", func(t *testing.T, s qualification.Store) {
			want := record("acme", "env-1", 3)
			want.InvalidatedAt, want.InvalidReason = time.Date(2026, 11, 30, 8, 0, 0, 654321000, time.UTC), "snapshot snap-9 not found at the provider"
			mustPut(t, s, want)
			got, err := s.GetQualification(ctx, "acme", "env-1")
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got, recordCmp); diff != "" || got.InvalidatedAt.IsZero() {
				t.Errorf("Get of an invalidated record (-want +got):\n%s", diff)
			}
			// Putting a new record (a later successful probe) clears it.
			fresh := record("acme", "env-1", 4)
			mustPut(t, s, fresh)
			if got, err := s.GetQualification(ctx, "acme", "env-1"); err != nil || !got.InvalidatedAt.IsZero() {
				t.Errorf("Get after a fresh put = %+v, %v; want a standing record", got, err)
			}
		}},
		{"put replaces the record of the same company and environment", func(t *testing.T, s qualification.Store) {
			mustPut(t, s, record("acme", "env-1", 1))
			want := record("acme", "env-1", 2)
			mustPut(t, s, want)
			got, err := s.GetQualification(ctx, "acme", "env-1")
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got, recordCmp); diff != "" {
				t.Errorf("Get after replace (-want +got):\n%s", diff)
			}
			list, err := s.ListQualifications(ctx, "env-1")
			if err != nil || len(list) != 1 {
				t.Errorf("List after replace = %d records, %v; want 1", len(list), err)
			}
		}},
		// QUAL-4
		{"record for company A is not returned for company B", func(t *testing.T, s qualification.Store) {
			mustPut(t, s, record("company-a", "env-1", 1))
			if got, err := s.GetQualification(ctx, "company-b", "env-1"); !errors.Is(err, errcode.ErrNotFound) {
				t.Errorf("Get for company B = %+v, %v; want ErrNotFound", got, err)
			}
		}},
		{"list returns every company's record of one environment sorted by company", func(t *testing.T, s qualification.Store) {
			b, a, other := record("beta", "env-1", 1), record("alpha", "env-1", 2), record("alpha", "env-2", 3)
			for _, r := range []qualification.Record{b, a, other} {
				mustPut(t, s, r)
			}
			got, err := s.ListQualifications(ctx, "env-1")
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]qualification.Record{a, b}, got, recordCmp); diff != "" {
				t.Errorf("List(env-1) (-want +got):\n%s", diff)
			}
			none, err := s.ListQualifications(ctx, "env-unknown")
			if err != nil || len(none) != 0 {
				t.Errorf("List of an environment without records = %v, %v; want empty, nil", none, err)
			}
		}},
		{"delete removes every company's record of the environment only", func(t *testing.T, s qualification.Store) {
			keep := record("alpha", "env-2", 3)
			for _, r := range []qualification.Record{record("alpha", "env-1", 1), record("beta", "env-1", 2), keep} {
				mustPut(t, s, r)
			}
			if err := s.DeleteQualifications(ctx, "env-1"); err != nil {
				t.Fatal(err)
			}
			for _, c := range []string{"alpha", "beta"} {
				if _, err := s.GetQualification(ctx, c, "env-1"); !errors.Is(err, errcode.ErrNotFound) {
					t.Errorf("Get(%s, env-1) after delete: %v, want ErrNotFound", c, err)
				}
			}
			got, err := s.GetQualification(ctx, "alpha", "env-2")
			if err != nil {
				t.Fatalf("the other environment's record was deleted: %v", err)
			}
			if diff := cmp.Diff(keep, got, recordCmp); diff != "" {
				t.Errorf("kept record (-want +got):\n%s", diff)
			}
			if err := s.DeleteQualifications(ctx, "env-unknown"); err != nil {
				t.Errorf("delete of an environment without records: %v", err)
			}
		}},
		{"record without company or environment is refused and not stored", func(t *testing.T, s qualification.Store) {
			noCompany, noEnv := record("", "env-1", 1), record("acme", "", 2)
			for _, r := range []qualification.Record{noCompany, noEnv} {
				if err := s.PutQualification(ctx, r); !errors.Is(err, errcode.ErrInvalid) {
					t.Errorf("Put(company %q, environment %q): %v, want ErrInvalidRecord", r.Company, r.Environment, err)
				}
			}
			if list, err := s.ListQualifications(ctx, "env-1"); err != nil || len(list) != 0 {
				t.Errorf("List after refused puts = %v, %v; want empty", list, err)
			}
		}},
		{"zero platform and template round trip", func(t *testing.T, s qualification.Store) {
			want := record("acme", "env-1", 1)
			want.Template, want.Platform = "", qualification.Platform{}
			mustPut(t, s, want)
			got, err := s.GetQualification(ctx, "acme", "env-1")
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got, recordCmp); diff != "" {
				t.Errorf("Get (-want +got):\n%s", diff)
			}
		}},
		{"concurrent puts for many companies all land", func(t *testing.T, s qualification.Store) {
			const n = 20
			var wg sync.WaitGroup
			errs := make(chan error, n)
			for i := range n {
				wg.Go(func() { errs <- s.PutQualification(ctx, record(fmt.Sprintf("c%02d", i), "env-1", i)) })
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			list, err := s.ListQualifications(ctx, "env-1")
			if err != nil || len(list) != n {
				t.Fatalf("List = %d records, %v; want %d", len(list), err, n)
			}
			for i, r := range list {
				if want := fmt.Sprintf("c%02d", i); r.Company != want {
					t.Errorf("List[%d].Company = %q, want %q", i, r.Company, want)
				}
			}
		}},
		{"last test: missing is ErrNotFound, stored one round-trips per company", func(t *testing.T, s qualification.Store) {
			if _, err := s.GetLastTest(ctx, "acme", "env-1"); !errors.Is(err, errcode.ErrNotFound) {
				t.Fatalf("GetLastTest of a missing test: %v, want ErrNotFound", err)
			}
			at := time.Date(2026, 12, 7, 10, 42, 0, 123456000, time.UTC)
			fail := qualification.LastTest{Company: "acme", Environment: "env-1", At: at, Code: "host_key_unknown",
				Message: "The host key of 10.0.0.5:22 is not trusted.", FailingSince: at.Add(-time.Hour)}
			if err := s.PutLastTest(ctx, fail); err != nil {
				t.Fatalf("PutLastTest: %v", err)
			}
			got, err := s.GetLastTest(ctx, "acme", "env-1")
			if err != nil {
				t.Fatalf("GetLastTest: %v", err)
			}
			if d := cmp.Diff(fail, got, recordCmp); d != "" {
				t.Errorf("GetLastTest (-put +got):\n%s", d)
			}
			if _, err := s.GetLastTest(ctx, "globex", "env-1"); !errors.Is(err, errcode.ErrNotFound) {
				t.Errorf("another company's last test: %v, want ErrNotFound", err)
			}
			if _, err := s.GetQualification(ctx, "acme", "env-1"); !errors.Is(err, errcode.ErrNotFound) {
				t.Errorf("a last test made a qualification record: %v", err)
			}
			ok := qualification.LastTest{Company: "acme", Environment: "env-1", At: at.Add(time.Minute), OK: true, Code: "recorded", Message: "Reached the target."}
			if err := s.PutLastTest(ctx, ok); err != nil {
				t.Fatalf("PutLastTest (replace): %v", err)
			}
			if got, _ := s.GetLastTest(ctx, "acme", "env-1"); cmp.Diff(ok, got, recordCmp) != "" {
				t.Errorf("after a replace GetLastTest = %+v, want %+v", got, ok)
			}
		}},
		{"last test: deleted with the qualifications, refused without keys", func(t *testing.T, s qualification.Store) {
			mustPut(t, s, record("acme", "env-1", 1))
			for _, c := range []string{"acme", "globex"} {
				if err := s.PutLastTest(ctx, qualification.LastTest{Company: c, Environment: "env-1", At: time.Now(), OK: true, Message: "ok"}); err != nil {
					t.Fatalf("PutLastTest(%s): %v", c, err)
				}
			}
			if err := s.PutLastTest(ctx, qualification.LastTest{Company: "acme", Environment: "env-2", At: time.Now(), Message: "kept"}); err != nil {
				t.Fatalf("PutLastTest(env-2): %v", err)
			}
			for _, bad := range []qualification.LastTest{{Environment: "env-1"}, {Company: "acme"}} {
				if err := s.PutLastTest(ctx, bad); !errors.Is(err, errcode.ErrInvalid) {
					t.Errorf("PutLastTest(%+v) = %v, want ErrInvalid", bad, err)
				}
			}
			if err := s.DeleteQualifications(ctx, "env-1"); err != nil {
				t.Fatalf("DeleteQualifications: %v", err)
			}
			for _, c := range []string{"acme", "globex"} {
				if _, err := s.GetLastTest(ctx, c, "env-1"); !errors.Is(err, errcode.ErrNotFound) {
					t.Errorf("last test of %s after the delete: %v, want ErrNotFound", c, err)
				}
			}
			if got, err := s.GetLastTest(ctx, "acme", "env-2"); err != nil || got.Message != "kept" {
				t.Errorf("another environment's last test after the delete: %+v, %v", got, err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.fn(t, newStore(t))
		})
	}
}

func mustPut(t *testing.T, s qualification.Store, r qualification.Record) {
	t.Helper()
	if err := s.PutQualification(context.Background(), r); err != nil {
		t.Fatalf("Put(%s, %s): %v", r.Company, r.Environment, err)
	}
}
