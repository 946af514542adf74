package benchload_test

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/internal/benchload"
	"github.com/berthdev/berth/internal/testenv"
	_ "github.com/berthdev/berth/store/postgres" // registers the "pgx" driver for the wait sampling
)

func TestMain(m *testing.M) { testenv.PostgresMain(m) }

var (
	dur     = flag.Duration("benchload.dur", 2*time.Second, "how long each workload runs")
	workers = flag.Int("benchload.workers", 1, "concurrent acquire+release workers of BenchmarkAcquireRelease")
)

// BenchmarkAcquireRelease: ephemeral acquire+release cycles per second
// through a berth.System with the fake driver, with -benchload.workers
// workers (1), on the memory store, SQLite and PostgreSQL; the anchor,
// measured in the same run with as many workers, is the bare fake driver
// (driver_ops/s, x_driver the cost ratio). cpu_us/op is this process's
// CPU per cycle. Each runs for -benchload.dur:
//
//	BERTH_REQUIRE_REAL=1 go test -run '^$' -bench AcquireRelease -benchtime 1x ./internal/benchload/
func BenchmarkAcquireRelease(b *testing.B) {
	for _, tc := range []struct {
		name string
		url  func(testing.TB) string
	}{
		{"memory", func(testing.TB) string { return "memory" }},
		{"sqlite", func(tb testing.TB) string { return "sqlite://" + tb.TempDir() + "/berth.db" }},
		{"postgres", testenv.Postgres},
	} {
		b.Run(tc.name, func(b *testing.B) {
			ctx := context.Background()
			fk := fake.New(nil)
			sys, closeSys, err := benchload.OpenSystem(ctx, tc.url(b), fk)
			if err != nil {
				b.Fatal(err)
			}
			defer func() {
				if err := closeSys(); err != nil {
					b.Error(err)
				}
			}()
			for b.Loop() {
				anchor, err := benchload.DriverCycles(ctx, fake.New(nil), *workers, *dur/4)
				if err != nil {
					b.Fatal(err)
				}
				r, err := benchload.AcquireRelease(ctx, sys, *workers, *dur)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(r.OpsPerSec, "ops/s")
				b.ReportMetric(float64(r.CPUPerOp.Nanoseconds())/1e3, "cpu_us/op")
				b.ReportMetric(anchor.OpsPerSec, "driver_ops/s")
				b.ReportMetric(anchor.OpsPerSec/r.OpsPerSec, "x_driver")
			}
		})
	}
}

// BenchmarkReplicas: 1, 2, 4 and 8 host replicas (separate Systems) on one
// PostgreSQL with the fake driver, 4 workers each, at zero provider delay
// and at 50 ms: aggregate acquire+release/s per replica count (ops/s_rN),
// and x8_vs_1, the 8 replicas' rate over one's. It fails if a reuse key
// got two sandboxes or a cleanup was processed twice (LEASE-10).
//
//	BERTH_REQUIRE_REAL=1 go test -run '^$' -bench Replicas -benchtime 1x ./internal/benchload/
func BenchmarkReplicas(b *testing.B) {
	for _, delay := range []time.Duration{0, 50 * time.Millisecond} {
		b.Run(fmt.Sprintf("delay=%s", delay), func(b *testing.B) {
			for b.Loop() {
				rates := map[int]float64{}
				for _, n := range []int{1, 2, 4, 8} {
					r, err := benchload.Replicas(context.Background(), testenv.Postgres(b), n, 4, delay, *dur)
					if err != nil {
						b.Fatalf("%d replicas: %v", n, err)
					}
					if r.DoubleCreates != 0 || r.TwiceProcessed != 0 {
						b.Fatalf("%d replicas: %d double creates, %d cleanups processed twice: %s", n, r.DoubleCreates, r.TwiceProcessed, r)
					}
					b.Logf("%s", r)
					rates[n] = r.OpsPerSec
					b.ReportMetric(r.OpsPerSec, fmt.Sprintf("ops/s_r%d", n))
				}
				b.ReportMetric(rates[8]/rates[1], "x8_vs_1")
			}
		})
	}
}

// BenchmarkReplicasOne runs -benchload.replicas replicas at
// -benchload.delay once, for profiles, and logs what PostgreSQL's backends
// of the database were waiting on (pg_stat_activity, sampled every 10 ms):
// where the replicas contend.
func BenchmarkReplicasOne(b *testing.B) {
	for b.Loop() {
		url := testenv.Postgres(b)
		mon, err := sql.Open("pgx", url)
		if err != nil {
			b.Fatal(err)
		}
		defer mon.Close()
		waits := map[string]int{}
		samples := 0
		ctx, stop := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			for ctx.Err() == nil {
				rows, err := mon.QueryContext(ctx, `SELECT state, COALESCE(wait_event_type, ''), COALESCE(wait_event, '')
					FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`)
				if err == nil {
					samples++
					for rows.Next() {
						var state, typ, ev string
						if rows.Scan(&state, &typ, &ev) == nil && state != "idle" {
							waits[state+" "+typ+":"+ev]++
						}
					}
					rows.Close()
				}
				time.Sleep(10 * time.Millisecond)
			}
		}()
		r, err := benchload.Replicas(context.Background(), url, *replicas, 4, *delay, *dur)
		stop()
		<-done
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("%s", r)
		b.Logf("backends not idle, per sample of %d (state wait_type:event): %v", samples, perSample(waits, samples))
		b.ReportMetric(r.OpsPerSec, "ops/s")
	}
}

// perSample is each count of m divided by n.
func perSample(m map[string]int, n int) map[string]float64 {
	out := make(map[string]float64, len(m))
	for k, v := range m {
		out[k] = float64(v) / float64(max(n, 1))
	}
	return out
}

var (
	replicas = flag.Int("benchload.replicas", 8, "replicas of BenchmarkReplicasOne")
	delay    = flag.Duration("benchload.delay", 0, "provider delay of BenchmarkReplicasOne")
)
