package main

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/berthdev/berth/internal/runnerload"
	"github.com/berthdev/berth/internal/testenv"
)

// The runner load rows (internal/runnerload, issue 55): simulated runners
// (one process of their own, each a real internal/runner connection,
// journal and outbox) streaming 40 KB/s each into the real controller of
// a System on SQLite and on PostgreSQL, over WebSockets on loopback.

func init() {
	benchWorkloads = append(benchWorkloads, "runners-1k", "runners-10k-idle", "reconnect-storm")
}

// quickLoad and quickStorm are the runners-1k and reconnect-storm rows'
// configurations under --quick. The test of the rows' wiring makes them
// smaller (TestBenchRunnersQuick: the suite runs it under -race on two
// shared cores, and internal/runnerload's own test runs the harness).
var quickLoad, quickStorm, quickIdle = runnerload.Quick, runnerload.StormQuick, runnerload.IdleQuick

// addLoadRows registers the load workloads' rows with runBench.
func (b *bench) addLoadRows(workloads map[string]func(*benchTB) []benchRow, planned map[string][]benchRow) {
	workloads["runners-1k"] = b.runnersRows
	planned["runners-1k"] = b.runnersPlanned()
	workloads["runners-10k-idle"] = b.idleRows
	planned["runners-10k-idle"] = []benchRow{{Workload: b.idleName() + ": host RSS per session", Anchor: "goal 100 KB (issue 55)", Unit: "KB"}}
	workloads["reconnect-storm"] = b.stormRows
	planned["reconnect-storm"] = []benchRow{{Workload: b.stormName(), Anchor: "goal 30 s (issue 55)", Unit: "s"}}
	workloads["leases-1m"] = b.historyRows
	planned["leases-1m"] = b.historyPlanned()
}

// stormConfig is runnerload.StormFull, or quickStorm under --quick.
func (b *bench) stormConfig() runnerload.Config {
	if b.scale.execs < fullScale.execs { // --quick
		return quickStorm
	}
	return runnerload.StormFull
}

func (b *bench) stormName() string {
	c := b.stormConfig()
	return fmt.Sprintf("reconnect storm: %d of %d simulated runners dropped at once, all back (PostgreSQL)", int(c.Storm*float64(c.Sessions)), c.Sessions)
}

// stormRows: the reconnect storm on PostgreSQL: the time until every
// dropped session took a command again, against the goal of 30 s.
// A byte lost or stored twice (stored != offered, or a stream's stored
// output not contiguous) fails the workload.
func (b *bench) stormRows(t *benchTB) []benchRow {
	bin, out, err := testenv.SharedBuild(t.ctx, runnerload.SimPackage, nil)
	if err != nil {
		t.Skipf("no simulated runners: %v\n%s", err, out)
	}
	cfg := b.stormConfig()
	cfg.SimBinary, cfg.Dir, cfg.StoreURL = bin, t.TempDir(), testenv.Postgres(t)
	res, err := runnerload.Run(t.ctx, cfg)
	fmt.Fprintf(b.g.stderr, "envctl bench: reconnect-storm: %s\n", res)
	if err != nil {
		live(t)
		t.Fatalf("reconnect-storm: %v", err)
	}
	if res.Dropped == 0 || res.Reconnected != res.Dropped || res.StoredBytes != res.OfferedBytes || res.Gaps != 0 {
		t.Fatalf("reconnect-storm: %d dropped, %d reconnected, %d bytes stored of %d offered, %d streams not contiguous",
			res.Dropped, res.Reconnected, res.StoredBytes, res.OfferedBytes, res.Gaps)
	}
	return []benchRow{row(t, b.stormName(), "goal 30 s (issue 55)", "s", res.StormBack.Seconds(), 30)}
}

// loadConfig is runnerload.Full, or quickLoad under --quick.
func (b *bench) loadConfig() runnerload.Config {
	if b.scale.execs < fullScale.execs { // --quick
		return quickLoad
	}
	return runnerload.Full
}

func (b *bench) runnersName(store string) string {
	c := b.loadConfig()
	return fmt.Sprintf("%d simulated runners x %d KB/s for %s (%s, stored)", c.Sessions, c.Rate>>10, c.Duration, store)
}

// runnersPlanned are the rows of one store each: stored over offered
// bytes/s (goal >= 0.95, nothing lost), offered over the target (below 1:
// back-pressure slowed the writers), and the dispatch p99 under that load
// against the goal of 250 ms.
func (b *bench) runnersPlanned() []benchRow {
	var rows []benchRow
	for _, st := range []string{"SQLite", "PostgreSQL"} {
		n := b.runnersName(st)
		rows = append(rows,
			benchRow{Workload: n + ": stored", Anchor: "offered", Unit: "MB/s"},
			benchRow{Workload: n + ": offered", Anchor: "target", Unit: "MB/s"},
			benchRow{Workload: n + ": dispatch p99", Anchor: "goal 250 ms (issue 55)", Unit: "ms"})
	}
	return rows
}

func (b *bench) runnersRows(t *benchTB) []benchRow {
	bin, out, err := testenv.SharedBuild(t.ctx, runnerload.SimPackage, nil)
	if err != nil {
		t.Skipf("no simulated runners: %v\n%s", err, out)
	}
	var rows []benchRow
	for _, st := range []string{"SQLite", "PostgreSQL"} {
		cfg := b.loadConfig()
		cfg.SimBinary, cfg.Dir = bin, t.TempDir()
		if st == "SQLite" {
			cfg.StoreURL = "sqlite://" + filepath.Join(t.TempDir(), "load.db")
		} else {
			cfg.StoreURL = testenv.Postgres(t)
		}
		res, err := runnerload.Run(t.ctx, cfg)
		fmt.Fprintf(b.g.stderr, "envctl bench: runners-1k (%s): %s\n", st, res)
		if err != nil {
			live(t)
			t.Fatalf("runners-1k (%s): %v", st, err)
		}
		if res.Connected != cfg.Sessions || res.StoredBytes != res.OfferedBytes || res.UsageBytes != res.StoredBytes || res.SimFailed != 0 {
			t.Fatalf("runners-1k (%s): %d of %d sessions connected, %d bytes stored of %d offered (usage %d), %d runners failed %v",
				st, res.Connected, cfg.Sessions, res.StoredBytes, res.OfferedBytes, res.UsageBytes, res.SimFailed, res.SimErrors)
		}
		n := b.runnersName(st)
		ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
		rows = append(rows,
			row(t, n+": stored", "offered", "MB/s", res.StoredBytesPerSec/1e6, res.OfferedBytesPerSec/1e6),
			row(t, n+": offered", "target", "MB/s", res.OfferedBytesPerSec/1e6, res.TargetBytesPerSec/1e6),
			row(t, n+": dispatch p99", "goal 250 ms (issue 55)", "ms", ms(res.DispatchP99), 250))
	}
	return rows
}

// idleConfig is runnerload.IdleFull, or quickIdle under --quick.
func (b *bench) idleConfig() runnerload.Config {
	if b.scale.execs < fullScale.execs { // --quick
		return quickIdle
	}
	return runnerload.IdleFull
}

func (b *bench) idleName() string {
	c := b.idleConfig()
	return fmt.Sprintf("%d simulated runners connected and idle for %s (SQLite)", c.Sessions, c.Duration)
}

// idleRows: sessions held connected with nothing to do (hello, then the
// protocol's upkeep only: heartbeats, the connection's claim, renewals)
// on SQLite: the host process's peak RSS over the window per session,
// against the goal of 100 KB. A session that did not connect,
// reconnected during the window or did not take the ping after it fails
// the workload.
func (b *bench) idleRows(t *benchTB) []benchRow {
	bin, out, err := testenv.SharedBuild(t.ctx, runnerload.SimPackage, nil)
	if err != nil {
		t.Skipf("no simulated runners: %v\n%s", err, out)
	}
	cfg := b.idleConfig()
	cfg.SimBinary, cfg.Dir = bin, t.TempDir()
	cfg.StoreURL = "sqlite://" + filepath.Join(t.TempDir(), "idle.db")
	res, err := runnerload.Run(t.ctx, cfg)
	fmt.Fprintf(b.g.stderr, "envctl bench: runners-10k-idle: %s\n", res)
	if err != nil {
		live(t)
		t.Fatalf("runners-10k-idle: %v", err)
	}
	if res.Connected != cfg.Sessions || res.Reconnects != 0 || res.SimFailed != 0 {
		t.Fatalf("runners-10k-idle: %d of %d sessions connected, %d reconnects in the window, %d runners failed %v",
			res.Connected, cfg.Sessions, res.Reconnects, res.SimFailed, res.SimErrors)
	}
	return []benchRow{row(t, b.idleName()+": host RSS per session", "goal 100 KB (issue 55)", "KB", float64(res.HostRSS)/float64(res.Connected)/1024, 100)}
}
