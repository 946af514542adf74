package sqlstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/internal/testenv"
)

// BenchmarkEnvironmentCreateGet measures CreateEnvironment followed by
// GetEnvironment of a typical record. The anchor, measured in the same run
// on the same database, is a bare INSERT + SELECT of one row by primary key
// with a JSON body of the same size; x_raw_sql is the ratio of the two (the
// cost of the store's transaction, encoding and checks).
//
//	go test -run '^$' -bench EnvironmentCreateGet ./store/internal/sqlstore/
func BenchmarkEnvironmentCreateGet(b *testing.B) {
	for _, tc := range []struct {
		name string
		url  func(testing.TB) string
	}{{"sqlite", sqliteURL}, {"postgres", testenv.Postgres}} {
		b.Run(tc.name, func(b *testing.B) {
			ctx := context.Background()
			db := openTest(b, tc.url(b))
			e := &environment.Environment{
				Name: "bench", Driver: "ssh", Status: environment.StatusActive, Revision: 1,
				Config: config.Config{"host": "build.example.test", "port": int64(22), "user": "ci",
					"key": config.SecretRef{ID: "sec-1", Version: 1}},
				Env:       map[string]string{"PATH": "/usr/bin"},
				CreatedAt: time.Now(), UpdatedAt: time.Now(),
			}
			n := 0
			b.ReportAllocs()
			for b.Loop() {
				e.ID = fmt.Sprintf("env-%d", n)
				e.Name = e.ID
				if err := db.CreateEnvironment(ctx, e, false); err != nil {
					b.Fatal(err)
				}
				if _, err := db.GetEnvironment(ctx, e.ID); err != nil {
					b.Fatal(err)
				}
				n++
			}
			ours := b.Elapsed()

			if _, err := db.writes().exec(ctx, "CREATE TABLE bench_anchor (id TEXT NOT NULL PRIMARY KEY, body TEXT)"); err != nil {
				b.Fatal(err)
			}
			body, _ := jsonText(e)
			start := time.Now()
			for i := range n {
				id := fmt.Sprintf("a-%d", i)
				if _, err := db.writes().exec(ctx, "INSERT INTO bench_anchor (id, body) VALUES (?, ?)", id, body); err != nil {
					b.Fatal(err)
				}
				var got string
				if err := db.reads().queryRow(ctx, "SELECT body FROM bench_anchor WHERE id = ?", id).Scan(&got); err != nil {
					b.Fatal(err)
				}
			}
			anchor := time.Since(start)
			b.ReportMetric(float64(ours)/float64(anchor), "x_raw_sql")
		})
	}
}
