// Package benchload holds the lease manager's benchmark workloads, for the
// Go benchmarks and for envctl bench:
//
//	fk := fake.New(nil)
//	sys, closeSys, err := benchload.OpenSystem(ctx, "sqlite:///tmp/b.db", fk) // or "memory", "postgres://..."
//	defer closeSys()
//	r, err := benchload.AcquireRelease(ctx, sys, 1, 2*time.Second) // r.OpsPerSec, r.CPUPerOp
//	anchor, err := benchload.DriverCycles(ctx, fk, 1, 2*time.Second)
//	rr, err := benchload.Replicas(ctx, pgURL, 8, 4, 50*time.Millisecond, 5*time.Second)
//	// rr.OpsPerSec; rr.DoubleCreates and rr.TwiceProcessed must be 0
//
// AcquireRelease measures ephemeral acquire+release cycles with the fake
// driver on one System's store; DriverCycles is its anchor, the bare
// driver. Replicas runs several Systems (host replicas, each with its own
// connection pool) on one PostgreSQL database and one fake provider, with
// sweeps running on every replica, and counts what LEASE-8 and LEASE-10
// forbid: sandboxes made twice for one reuse key, and cleanups processed
// by two sweeps. Each workload runs for a warm-up of half its duration
// first (connections opened, statements prepared, the first sweeps) and
// then measures its duration: the figures are steady rates. The workloads
// measure; they assert no time.
//
// A million lease records (issue 55): FillHistory fills an empty store
// with ended and live leases by bulk SQL, copies of two leases the real
// manager wrote (every column in the store's own form; the suite's
// TestFillHistory reads a fill back through the real stores), and
// HistoryFile keeps a SQLite fill in the user's cache directory keyed by
// the schema version and copies it per run. MeasureHistory measures the
// lease operations on a filled store and on one without the history,
// alternately, and checks that pruning follows the retention:
//
//	full, _ := benchload.HistoryFile(ctx, "/tmp/full.db", "", benchload.HistoryConfig{Ended: 1_000_000, Live: 10_000, Environments: 4})
//	anchor, _ := benchload.HistoryFile(ctx, "/tmp/anchor.db", "", benchload.HistoryConfig{Ended: 5_000, Live: 10_000, Environments: 4})
//	res, err := benchload.MeasureHistory(ctx, "sqlite:///tmp/anchor.db", "sqlite:///tmp/full.db", anchor, full, benchload.HistoryRun{Rounds: 5, Cycles: 2 * time.Second})
//	// res.Costs[i].Ratio(): full over anchor, per operation
package benchload
