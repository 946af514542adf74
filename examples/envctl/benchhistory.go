package main

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/berthdev/berth/internal/benchload"
	"github.com/berthdev/berth/internal/testenv"
)

// The leases-1m rows (internal/benchload, issue 55 item 4): the lease
// operations on a store holding a million ended leases and 10,000 live
// ones against the same operations, alternated in one run, on a store
// with the same live leases and no history to speak of (5,000 ended: the
// prune batches need some past the retention), on SQLite and PostgreSQL.
// The goal is a ratio within 1.5x.

func init() { benchWorkloads = append(benchWorkloads, "leases-1m") }

// historySizes are the full store's and the anchor's fills: 1,000,000
// ended and 10,000 live leases in 4 environments, or under --quick
// 20,000 and 1,000 (the anchor keeps 5,000 ended).
func (b *bench) historySizes() (full, anchor benchload.HistoryConfig, run benchload.HistoryRun) {
	full = benchload.HistoryConfig{Ended: 1_000_000, Live: 10_000, Environments: 4}
	run = benchload.HistoryRun{Rounds: 5, Cycles: 2 * time.Second}
	if b.scale.execs < fullScale.execs { // --quick
		full = benchload.HistoryConfig{Ended: 20_000, Live: 1_000, Environments: 4}
		run = benchload.HistoryRun{Rounds: 2, Cycles: 400 * time.Millisecond}
	}
	anchor = full
	anchor.Ended = 5_000
	return full, anchor, run
}

func (b *bench) historyName(store string) string {
	full, _, _ := b.historySizes()
	return fmt.Sprintf("leases-1m (%s, %d ended + %d live)", store, full.Ended, full.Live)
}

func (b *bench) historyAnchor() string {
	_, anchor, _ := b.historySizes()
	return fmt.Sprintf("no history (%d ended + %d live)", anchor.Ended, anchor.Live)
}

// historyOps are the operations each store's rows measure, in order.
func historyOps(live int) []string {
	return []string{
		"acquire+release",
		"sweep pass (orphan search of each environment)",
		fmt.Sprintf("list the live leases (%d)", live),
		fmt.Sprintf("an environment's first page of history (%d newest)", benchload.HistoryPage),
		"blast radius of an environment",
		fmt.Sprintf("prune a batch of %d ended leases past the retention", benchload.PruneBatch),
	}
}

func (b *bench) historyPlanned() []benchRow {
	full, _, _ := b.historySizes()
	var rows []benchRow
	for _, st := range []string{"SQLite", "PostgreSQL"} {
		for _, op := range historyOps(full.Live) {
			rows = append(rows, benchRow{Workload: b.historyName(st) + ": " + op, Anchor: b.historyAnchor(), Unit: "µs"})
		}
		rows = append(rows, benchRow{Workload: b.historyName(st) + ": leases past the 30-day retention pruned by one sweep", Anchor: "past it, up to 50 batches of 100", Unit: "leases"})
	}
	return rows
}

// historyRows fills both stores of each database (SQLite: a copy of the
// fill cached under the user's cache directory by schema version, made
// on the first run; PostgreSQL: filled in the run, in fresh databases of
// testenv's cluster) and measures them (benchload.MeasureHistory). A
// prune that removed a lease within the retention, or a count of pruned
// leases that does not match the leases past it that went, fails the
// workload.
func (b *bench) historyRows(t *benchTB) []benchRow {
	full, anchor, run := b.historySizes()
	var rows []benchRow
	for _, st := range []string{"SQLite", "PostgreSQL"} {
		var urls [2]string
		var hs [2]benchload.History
		for i, cfg := range []benchload.HistoryConfig{anchor, full} {
			var err error
			if st == "SQLite" {
				path := filepath.Join(t.TempDir(), "leases.db")
				urls[i] = "sqlite://" + path
				hs[i], err = benchload.HistoryFile(t.ctx, path, "", cfg)
			} else {
				urls[i] = testenv.Postgres(t)
				hs[i], err = benchload.FillHistory(t.ctx, urls[i], cfg)
			}
			if err != nil {
				live(t)
				t.Fatalf("leases-1m (%s): fill %d ended and %d live leases: %v", st, cfg.Ended, cfg.Live, err)
			}
			fmt.Fprintf(b.g.stderr, "envctl bench: leases-1m (%s): %d ended + %d live leases: fill %s (cached: %v), copy %s\n",
				st, cfg.Ended, cfg.Live, hs[i].Fill.Round(time.Millisecond), hs[i].Cached, hs[i].Copy.Round(time.Millisecond))
		}
		res, err := benchload.MeasureHistory(t.ctx, urls[0], urls[1], hs[0], hs[1], run)
		if err != nil {
			live(t)
			t.Fatalf("leases-1m (%s): %v", st, err)
		}
		fmt.Fprintf(b.g.stderr, "envctl bench: leases-1m (%s): ended leases past the retention %d, within it %d; pruned by the batches %d, by a sweep %d; after: past %d, within %d\n",
			st, res.PastRetention, res.Newer, res.PrunedBatches, res.SweepPruned, res.PastRetentionAfter, res.NewerAfter)
		if res.NewerAfter != res.Newer || res.PastRetention-res.PastRetentionAfter != res.PrunedBatches+res.SweepPruned {
			t.Fatalf("leases-1m (%s): pruning did not follow the retention: %d ended leases within it before, %d after; %d past it before, %d after, %d pruned",
				st, res.Newer, res.NewerAfter, res.PastRetention, res.PastRetentionAfter, res.PrunedBatches+res.SweepPruned)
		}
		for _, c := range res.Costs {
			rows = append(rows, row(t, b.historyName(st)+": "+c.Op, b.historyAnchor(), "µs", c.Full, c.Anchor))
		}
		// A sweep prunes up to 50 batches of its limit of 100.
		want := min(res.PastRetention-res.PrunedBatches, 50*benchload.PruneBatch)
		rows = append(rows, row(t, b.historyName(st)+": leases past the 30-day retention pruned by one sweep", "past it, up to 50 batches of 100", "leases",
			float64(res.SweepPruned), float64(want)))
	}
	return rows
}
