package benchload

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/lease"
)

// HistoryPage is how many leases an environment's first page of history
// holds (the example server's default page).
const HistoryPage = 50

// Retention is the retention the prune measurements use: the lease
// manager's default PruneAfter.
const Retention = 30 * 24 * time.Hour

// PruneBatch is the prune batch measured: the lease manager's default
// sweep limit, the batch each Sweep prunes.
const PruneBatch = 100

// HistoryCost is one operation's cost on the store with the history and
// on the anchor store without it, measured alternately in one run: the
// median over the rounds of each round's mean.
type HistoryCost struct {
	// Op names the operation.
	Op string `json:"op"`
	// Full and Anchor are the costs per operation in µs.
	Full   float64 `json:"full"`
	Anchor float64 `json:"anchor"`
}

// Ratio is Full / Anchor.
func (c HistoryCost) Ratio() float64 { return c.Full / c.Anchor }

// HistoryResult is what MeasureHistory measured.
type HistoryResult struct {
	Costs []HistoryCost `json:"costs"`
	// PastRetention counts the full store's ended leases of the fill
	// released more than Retention ago before any prune, Newer those
	// newer than that (the leases the measurements add are not counted).
	PastRetention int `json:"pastRetention"`
	Newer         int `json:"newer"`
	// PrunedBatches counts the leases the measured prune batches removed,
	// and SweepPruned those a Sweep with Retention set removed after
	// them; PastRetentionAfter and NewerAfter are the counts after both
	// (NewerAfter must equal Newer: nothing within the retention is
	// pruned; PastRetention - PastRetentionAfter must equal the pruned).
	PrunedBatches      int `json:"prunedBatches"`
	SweepPruned        int `json:"sweepPruned"`
	PastRetentionAfter int `json:"pastRetentionAfter"`
	NewerAfter         int `json:"newerAfter"`
}

// HistoryRun sizes MeasureHistory.
type HistoryRun struct {
	// Rounds is how many times each operation runs on each store,
	// alternately; Cycles how long each round of acquire+release cycles
	// runs (after a warm-up of half as long).
	Rounds int
	Cycles time.Duration
}

// historySystem is a System on one store of MeasureHistory.
type historySystem struct {
	sys    *berth.System
	leases lease.Store
	close  func() error
	h      History
	held   []*lease.Handle
}

// MeasureHistory measures, on the store at fullURL (filled as full says)
// and on the anchor store at anchorURL (filled as anchor says: the same
// live leases, a small history), alternately in rounds: acquire+release
// cycles, one Sweep pass (its orphan search included: each store's
// System holds one lease of each environment, so that the fake driver
// lists a sandbox there; pruning off), listing the live leases, the first
// page of an environment's history (its newest HistoryPage leases), the
// blast radius of an environment, and a prune batch of PruneBatch ended
// leases past Retention. It then checks the retention on the full store:
// the leases past it before and after, those within it untouched, and a
// Sweep of a System with PruneAfter set to Retention.
func MeasureHistory(ctx context.Context, anchorURL, fullURL string, anchor, full History, run HistoryRun) (res HistoryResult, err error) {
	run.Rounds = max(run.Rounds, 1)
	var stores [2]*historySystem // anchor, full
	defer func() {
		for _, s := range stores {
			if s != nil {
				for _, h := range s.held {
					_, _ = h.Release(context.WithoutCancel(ctx), lease.ReleaseOptions{Disposition: lease.Destroy})
				}
				err = errors.Join(err, s.close())
			}
		}
	}()
	for i, u := range []string{anchorURL, fullURL} {
		h := []History{anchor, full}[i]
		sys, ls, closeSys, err := openSystem(ctx, u, fake.New(nil), lease.Options{PruneAfter: -1})
		if err != nil {
			return res, err
		}
		s := &historySystem{sys: sys, leases: ls, close: closeSys, h: h}
		stores[i] = s
		for _, env := range h.EnvironmentIDs {
			l, err := sys.Leases().Acquire(ctx, operator, lease.AcquireRequest{Company: Company, EnvironmentID: env, Run: "held-" + randomHex(4)})
			if err != nil {
				return res, fmt.Errorf("benchload: history: hold a lease of %s: %w", env, err)
			}
			s.held = append(s.held, l)
		}
	}
	fullDB, d, err := openRaw(fullURL)
	if err != nil {
		return res, err
	}
	defer fullDB.Close()
	cutoff := time.Now().Add(-Retention).UnixNano()
	counts := func() (past, newer int, err error) {
		err = fullDB.QueryRowContext(ctx, d.bind(`SELECT
			COUNT(CASE WHEN released_at < ? THEN 1 END), COUNT(CASE WHEN released_at >= ? THEN 1 END)
			FROM leases WHERE status = 'released' AND reuse_key IS NULL AND run LIKE 'history-%'`), cutoff, cutoff).Scan(&past, &newer)
		if err != nil {
			err = fmt.Errorf("benchload: history: count the ended leases: %w", err)
		}
		return past, newer, err
	}
	if res.PastRetention, res.Newer, err = counts(); err != nil {
		return res, err
	}

	type op struct {
		name string
		reps int
		do   func(s *historySystem) error
	}
	ops := []op{
		{"sweep pass (orphan search of each environment)", 5, func(s *historySystem) error {
			_, err := s.sys.Leases().Sweep(ctx, operator)
			return err
		}},
		{fmt.Sprintf("list the live leases (%d)", full.Live), 3, func(s *historySystem) error {
			ls, err := s.sys.Leases().List(ctx, operator, lease.Filter{Live: true})
			if err == nil && len(ls) < s.h.Live {
				err = fmt.Errorf("benchload: history: %d live leases listed, want at least %d", len(ls), s.h.Live)
			}
			return err
		}},
		{fmt.Sprintf("an environment's first page of history (%d newest)", HistoryPage), 10, func(s *historySystem) error {
			ls, err := firstPage(ctx, s.sys, s.h.EnvironmentIDs[0])
			if err == nil && len(ls) != HistoryPage {
				err = fmt.Errorf("benchload: history: first page of %d leases, want %d", len(ls), HistoryPage)
			}
			return err
		}},
		{"blast radius of an environment", 10, func(s *historySystem) error {
			_, err := s.sys.Catalog().BlastRadius(ctx, operator, s.h.EnvironmentIDs[0])
			return err
		}},
		{fmt.Sprintf("prune a batch of %d ended leases past the retention", PruneBatch), 2, func(s *historySystem) error {
			n, err := s.leases.PruneLeases(ctx, time.Unix(0, cutoff), PruneBatch)
			if err == nil && n != PruneBatch {
				err = fmt.Errorf("benchload: history: a prune batch removed %d leases, want %d", n, PruneBatch)
			}
			if s == stores[1] {
				res.PrunedBatches += n
			}
			return err
		}},
	}
	samples := make([][2][]float64, len(ops)+1)
	for range run.Rounds {
		for i := range 2 {
			s := stores[i]
			r, err := AcquireRelease(ctx, s.sys, 1, run.Cycles)
			if err != nil {
				return res, err
			}
			samples[0][i] = append(samples[0][i], 1e6/r.OpsPerSec)
			for j, o := range ops {
				start := time.Now()
				for range o.reps {
					if err := o.do(s); err != nil {
						return res, fmt.Errorf("%s: %w", o.name, err)
					}
				}
				samples[j+1][i] = append(samples[j+1][i], float64(time.Since(start).Microseconds())/float64(o.reps))
			}
		}
	}
	names := []string{"acquire+release"}
	for _, o := range ops {
		names = append(names, o.name)
	}
	for j, n := range names {
		res.Costs = append(res.Costs, HistoryCost{Op: n, Anchor: median(samples[j][0]), Full: median(samples[j][1])})
	}

	// The retention: a Sweep of a System that prunes after Retention.
	sys, _, closeSys, err := openSystem(ctx, fullURL, fake.New(nil), lease.Options{PruneAfter: Retention})
	if err != nil {
		return res, err
	}
	rep, err := sys.Leases().Sweep(ctx, operator)
	if cerr := closeSys(); err == nil {
		err = cerr
	}
	if err != nil {
		return res, fmt.Errorf("benchload: history: a sweep with retention: %w", err)
	}
	res.SweepPruned = rep.Pruned
	if res.PastRetentionAfter, res.NewerAfter, err = counts(); err != nil {
		return res, err
	}
	return res, nil
}

// firstPage is an environment's first page of history: its HistoryPage
// newest leases.
func firstPage(ctx context.Context, sys *berth.System, env string) ([]*lease.Lease, error) {
	return sys.Leases().List(ctx, operator, lease.Filter{Environment: env, Newest: true, Limit: HistoryPage})
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
