package runnerload_test

import (
	"context"
	"flag"
	"path/filepath"
	"testing"

	"github.com/berthdev/berth/internal/runnerload"
	"github.com/berthdev/berth/internal/testenv"
)

var (
	benchSessions = flag.Int("runners.sessions", runnerload.Full.Sessions, "simulated runners of BenchmarkRunners")
	benchDuration = flag.Duration("runners.duration", runnerload.Full.Duration, "how long each streams")
	benchStore    = flag.String("runners.store", "postgres", "postgres or sqlite")
	benchStorm    = flag.Float64("runners.storm", 0, "fraction of the sessions dropped at once halfway (a reconnect storm)")
	benchIdle     = flag.Bool("runners.idle", false, "hold the sessions idle (no stream) for the duration (runners-10k-idle: -runners.sessions=10000 -runners.duration=5m)")
)

// BenchmarkRunners runs the harness once per iteration (envctl bench's
// runners-1k at its full size by default) and reports its figures; it
// asserts no time.
//
//	go test -run '^$' -bench Runners -benchtime 1x ./internal/runnerload/ -args -runners.sessions=1000 -runners.duration=60s
func BenchmarkRunners(b *testing.B) {
	ctx := context.Background()
	bin, out, err := testenv.SharedBuild(ctx, runnerload.SimPackage, nil)
	if err != nil {
		b.Fatalf("%v\n%s", err, out)
	}
	for b.Loop() {
		cfg := runnerload.Full
		cfg.Sessions, cfg.Duration, cfg.Storm, cfg.Idle, cfg.SimBinary, cfg.Dir = *benchSessions, *benchDuration, *benchStorm, *benchIdle, bin, b.TempDir()
		cfg.StoreURL = "sqlite://" + filepath.Join(b.TempDir(), "load.db")
		if *benchStore == "postgres" {
			cfg.StoreURL = testenv.Postgres(b)
		}
		res, err := runnerload.Run(ctx, cfg)
		b.Log(res)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(res.Connected), "sessions")
		b.ReportMetric(res.StoredBytesPerSec/1e6, "stored_MB/s")
		b.ReportMetric(res.OfferedBytesPerSec/res.TargetBytesPerSec, "offered/target")
		b.ReportMetric(float64(res.StoredBytes)/float64(max(res.OfferedBytes, 1)), "stored/offered")
		b.ReportMetric(float64(res.DispatchP99)/1e6, "dispatch_p99_ms")
		b.ReportMetric(float64(res.HostRSS)/float64(max(res.Connected, 1))/1024, "host_KB/session")
		b.ReportMetric(float64(res.Goroutines)/float64(max(res.Connected, 1)), "goroutines/session")
		if res.Dropped > 0 {
			b.ReportMetric(res.StormBack.Seconds(), "storm_back_s")
		}
	}
}
