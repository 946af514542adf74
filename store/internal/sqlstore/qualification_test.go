package sqlstore

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/berthdev/berth/images"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/qualification"
)

// QUAL-2: every field of a record survives the columns exactly, beyond the
// suite's sample: snapshot identities, platform variants, musl, no image,
// nanosecond times.
func TestQualificationRecordRoundTrip(t *testing.T) {
	t.Parallel()
	snap, err := images.SnapshotIdentity("daytona", "5f0c2b6e-91d4-4f53-a0a2-3c1e2b8f9d10")
	if err != nil {
		t.Fatal(err)
	}
	records := []qualification.Record{{
		Company: "acme", Environment: "env-snapshot", Fingerprint: "sha256:01",
		Image: snap, Template: "snapshot:daytona/tpl-1",
		Platform:   mustPlatform("linux/arm64/v8 libc=musl:1.2.4 kernel=6.6.14-0-lts release=alpine:3.19.1"),
		LeaseID:    "lse_1",
		RecordedAt: time.Date(2026, 11, 29, 10, 0, 0, 123456789, time.UTC),
	}, {
		Company: "acme", Environment: "env-bare", Fingerprint: "sha256:02",
		Platform: mustPlatform("darwin/arm64 release=macos:14.4.1"),
	}}
	for _, db := range []struct {
		name string
		url  func(testing.TB) string
	}{{"sqlite", sqliteURL}, {"postgres", testenv.Postgres}} {
		t.Run(db.name, func(t *testing.T) {
			t.Parallel()
			s := openTest(t, db.url(t))
			ctx := context.Background()
			for _, want := range records {
				if err := s.PutQualification(ctx, want); err != nil {
					t.Fatal(err)
				}
				got, err := s.GetQualification(ctx, want.Company, want.Environment)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b images.Identity) bool { return a == b })); diff != "" {
					t.Errorf("round trip of %s (-want +got):\n%s", want.Environment, diff)
				}
			}
		})
	}
}

// mustPlatform is qualification.ParsePlatform that panics on error.
func mustPlatform(s string) qualification.Platform {
	p, err := qualification.ParsePlatform(s)
	if err != nil {
		panic(err)
	}
	return p
}
