package sqlstore

import (
	"context"
	"testing"
	"time"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/instance"
	"github.com/berthdev/berth/internal/instancehook"
	"github.com/berthdev/berth/internal/testenv"
)

// BenchmarkSettingsReader measures what the gate pays for the instance
// settings on every resolution, probe and lease acquisition (CFG-9): the
// cached Reader of the instance settings (internal/instancehook: a store
// read at most once per second) over a database holding a record. The
// anchor, in the same run on the same database, is the store read an
// uncached gate would make per check (GetSettings); x_store_read is the
// cached read as a fraction of it.
//
//	go test -run '^$' -bench SettingsReader ./store/internal/sqlstore/
func BenchmarkSettingsReader(b *testing.B) {
	for _, tc := range []struct {
		name string
		url  func(testing.TB) string
	}{{"sqlite", sqliteURL}, {"postgres", testenv.Postgres}} {
		b.Run(tc.name, func(b *testing.B) {
			ctx := context.Background()
			db := openTest(b, tc.url(b))
			hs, hr := instancehook.New(db, instancehook.Options{})
			svc, reader := hs.(*instance.Service), hr.(instance.Reader)
			on := true
			if _, err := svc.Update(ctx, authz.Principal{ID: "op", Role: authz.RoleLocalOperator}, 0, func(c *instance.Settings) error { c.ManagedSandboxOnly = on; return nil }); err != nil {
				b.Fatal(err)
			}
			n := 0
			b.ReportAllocs()
			for b.Loop() {
				if _, err := reader.Current(ctx); err != nil {
					b.Fatal(err)
				}
				n++
			}
			cached := b.Elapsed()
			start := time.Now()
			for range n {
				if _, err := db.GetSettings(ctx); err != nil {
					b.Fatal(err)
				}
			}
			anchor := time.Since(start)
			b.ReportMetric(float64(anchor.Nanoseconds())/float64(n), "anchor-ns/op")
			b.ReportMetric(float64(cached.Nanoseconds())/float64(anchor.Nanoseconds()), "x_store_read")
		})
	}
}
