package benchload

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/store/sqlite"
)

// HistoryConfig sizes a store that FillHistory fills.
type HistoryConfig struct {
	// Ended is how many ended leases (released, no reuse key) the store
	// holds; their releases spread evenly over HistorySpan, the newest
	// at the fill.
	Ended int
	// Live is how many live leases (active, expiring a year after the
	// fill, claimed by nobody) it holds.
	Live int
	// Environments is how many environments of the fake driver the leases
	// spread over (round robin); at least 1.
	Environments int
}

// HistorySpan is the time the ended leases of a filled store were released
// over, ending at the fill: with the lease manager's default retention of
// 30 days, a quarter of them are past it when the store is filled.
const HistorySpan = 40 * 24 * time.Hour

// historyFormat names the fill's form of the rows: the cache key changes
// with it, so that a change of FillHistory never reads an older fill.
const historyFormat = "h1"

// History is what FillHistory or HistoryFile made.
type History struct {
	HistoryConfig
	// EnvironmentIDs are the environments the leases belong to.
	EnvironmentIDs []string
	// FilledAt is when the rows were written (a cached file's fill, not
	// its copy).
	FilledAt time.Time
	// Fill is how long writing the rows took (bulk SQL, indexes
	// included), Copy how long copying a cached file took; Cached says
	// whether the file came from the cache.
	Fill, Copy time.Duration
	Cached     bool
}

// FillHistory fills the empty store at storeURL (sqlite:///path or
// postgres://) with cfg's leases by bulk SQL. It composes a System on it
// (OpenSystem) to create the environments and two leases through the
// real lease manager, an ended one (acquired and released) and a live
// one (acquired), and then copies each row of those two by INSERT ...
// SELECT over a generated series, changing only what differs between
// leases (id, run, environment, provider lease id, times, run key;
// claims and holders cleared), so that every other column has the form
// the store itself writes; the two model rows are deleted after. On
// PostgreSQL the table is vacuumed and analyzed after, as autovacuum
// would have done to a table that grew over weeks, and a checkpoint
// writes the fill out; SQLite stores keep no statistics, and none are
// made.
func FillHistory(ctx context.Context, storeURL string, cfg HistoryConfig) (History, error) {
	cfg.Environments = max(cfg.Environments, 1)
	h := History{HistoryConfig: cfg}
	fk := fake.New(nil)
	sys, _, closeSys, err := openSystem(ctx, storeURL, fk, lease.Options{})
	if err != nil {
		return h, err
	}
	var ended, live string
	err = func() error {
		for i := range cfg.Environments {
			id, err := NewEnvironment(ctx, sys, fmt.Sprintf("history-%d", i))
			if err != nil {
				return err
			}
			h.EnvironmentIDs = append(h.EnvironmentIDs, id)
		}
		env := h.EnvironmentIDs[0]
		e, err := sys.Leases().Acquire(ctx, operator, lease.AcquireRequest{Company: Company, EnvironmentID: env, Run: "history-model-ended"})
		if err != nil {
			return fmt.Errorf("benchload: history: acquire the model lease: %w", err)
		}
		if _, err := e.Release(ctx, lease.ReleaseOptions{Disposition: lease.Destroy}); err != nil {
			return fmt.Errorf("benchload: history: release the model lease %s: %w", e.ID(), err)
		}
		l, err := sys.Leases().Acquire(ctx, operator, lease.AcquireRequest{Company: Company, EnvironmentID: env, Run: "history-model-live"})
		if err != nil {
			return fmt.Errorf("benchload: history: acquire the live model lease: %w", err)
		}
		ended, live = e.ID(), l.ID()
		return nil
	}()
	if cerr := closeSys(); err == nil && cerr != nil {
		err = fmt.Errorf("benchload: history: close: %w", cerr)
	}
	if err != nil {
		return h, err
	}
	db, d, err := openRaw(storeURL)
	if err != nil {
		return h, err
	}
	defer db.Close()
	start := time.Now()
	h.FilledAt = start
	if err := d.fill(ctx, db, ended, live, h); err != nil {
		return h, err
	}
	h.Fill = time.Since(start)
	return h, nil
}

// rawDialect is the SQL that differs between the two databases in a fill.
type rawDialect int

const (
	rawSQLite rawDialect = iota
	rawPostgres
)

// openRaw opens the database of storeURL with database/sql, outside the
// store (which must be migrated already).
func openRaw(storeURL string) (*sql.DB, rawDialect, error) {
	switch {
	case strings.HasPrefix(storeURL, "sqlite://"):
		path := strings.TrimPrefix(storeURL, "sqlite://")
		db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(OFF)")
		if err != nil {
			return nil, 0, fmt.Errorf("benchload: history: open %s: %w", path, err)
		}
		db.SetMaxOpenConns(1)
		return db, rawSQLite, nil
	case strings.HasPrefix(storeURL, "postgres://"), strings.HasPrefix(storeURL, "postgresql://"):
		db, err := sql.Open("pgx", storeURL)
		if err != nil {
			return nil, 0, fmt.Errorf("benchload: history: open the PostgreSQL database: %w", err)
		}
		return db, rawPostgres, nil
	}
	return nil, 0, fmt.Errorf("benchload: history: store %q: want sqlite:///path or postgres://", storeURL)
}

// bind rewrites ? to $n on PostgreSQL.
func (d rawDialect) bind(q string) string {
	if d != rawPostgres {
		return q
	}
	var b strings.Builder
	n := 0
	for _, c := range q {
		if c == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

// fillChunk is how many rows one INSERT ... SELECT writes.
const fillChunk = 100_000

// fill writes h's rows as copies of the model leases ended and live, and
// deletes the models.
func (d rawDialect) fill(ctx context.Context, db *sql.DB, ended, live string, h History) error {
	rows, err := db.QueryContext(ctx, "SELECT * FROM leases WHERE 1 = 0")
	if err != nil {
		return fmt.Errorf("benchload: history: read the leases table's columns: %w", err)
	}
	cols, err := rows.Columns()
	rows.Close()
	if err != nil {
		return fmt.Errorf("benchload: history: read the leases table's columns: %w", err)
	}
	var reuse int
	if err := db.QueryRowContext(ctx, d.bind("SELECT COUNT(*) FROM leases WHERE id IN (?, ?) AND reuse_key IS NOT NULL"), ended, live).Scan(&reuse); err != nil || reuse != 0 {
		return fmt.Errorf("benchload: history: the model leases hold a reuse key (%d) or could not be read: %v", reuse, err)
	}
	// n, the row's number, is 1..Ended for ended leases, then
	// Ended+1..Ended+Live for live ones; ids are "lse_" and n in 16
	// digits (the form of newLeaseID's hex), ascending as they are
	// written.
	pad := "printf('%016d', g.n)"
	if d == rawPostgres {
		pad = "lpad(g.n::text, 16, '0')"
	}
	env := "CASE g.n % " + fmt.Sprint(len(h.EnvironmentIDs))
	for i, id := range h.EnvironmentIDs {
		env += fmt.Sprintf(" WHEN %d THEN '%s'", i, id)
	}
	env += " END"
	now := h.FilledAt.UnixNano()
	span := HistorySpan.Nanoseconds()
	step := span / int64(max(h.Ended, 1))
	// acquired_at: ended leases from now-span in steps, released a
	// second later; live ones in the last hour, a millisecond apart.
	acquiredEnded := fmt.Sprintf("CAST(%d AS BIGINT) + (g.n - 1) * CAST(%d AS BIGINT)", now-span, step)
	acquiredLive := fmt.Sprintf("CAST(%d AS BIGINT) + (g.n - %d) * CAST(1000000 AS BIGINT)", now-int64(time.Hour), h.Ended)
	exprs := func(live bool) string {
		acq := acquiredEnded
		if live {
			acq = acquiredLive
		}
		out := make([]string, len(cols))
		for i, c := range cols {
			e := "t." + c
			switch c {
			case "id":
				e = "'lse_' || " + pad
			case "environment_id":
				e = env
			case "run":
				e = "'history-' || g.n"
			case "provider_lease_id":
				e = "CASE WHEN t.provider_lease_id = '' THEN '' ELSE t.provider_lease_id || '-' || g.n END"
			case "run_key":
				e = "CASE WHEN t.run_key IS NULL THEN NULL ELSE t.run_key || '-' || g.n END"
			case "acquired_at", "last_used_at":
				e = acq
			case "released_at":
				e = "NULL"
				if !live {
					e = acq + " + 1000000000"
				}
			case "expires_at":
				if live {
					e = fmt.Sprintf("CAST(%d AS BIGINT)", now+int64(365*24*time.Hour))
				} else {
					e = "CASE WHEN t.expires_at IS NULL THEN NULL ELSE " + acq + " + (t.expires_at - t.acquired_at) END"
				}
			case "claimed_by", "holder":
				e = "''"
			case "claimed_until", "holder_until":
				e = "NULL"
			}
			out[i] = e
		}
		return strings.Join(out, ", ")
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("benchload: history: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit, a no-op
	insert := func(model string, live bool, from, to int) error {
		var q string
		if d == rawPostgres {
			q = fmt.Sprintf("INSERT INTO leases (%s) SELECT %s FROM leases t, generate_series(CAST(%d AS BIGINT), CAST(%d AS BIGINT)) AS g(n) WHERE t.id = $1",
				strings.Join(cols, ", "), exprs(live), from, to)
		} else {
			q = fmt.Sprintf("WITH RECURSIVE g(n) AS (SELECT %d UNION ALL SELECT n + 1 FROM g WHERE n < %d) INSERT INTO leases (%s) SELECT %s FROM leases t, g WHERE t.id = ?",
				from, to, strings.Join(cols, ", "), exprs(live))
		}
		res, err := tx.ExecContext(ctx, q, model)
		if err != nil {
			return fmt.Errorf("benchload: history: insert leases %d to %d: %w", from, to, err)
		}
		if n, err := res.RowsAffected(); err != nil || n != int64(to-from+1) {
			return fmt.Errorf("benchload: history: insert leases %d to %d: %d rows written (%v)", from, to, n, err)
		}
		return nil
	}
	for _, part := range []struct {
		model    string
		live     bool
		from, to int
	}{{ended, false, 1, h.Ended}, {live, true, h.Ended + 1, h.Ended + h.Live}} {
		for from := part.from; from <= part.to; from += fillChunk {
			if err := insert(part.model, part.live, from, min(from+fillChunk-1, part.to)); err != nil {
				return err
			}
		}
	}
	if _, err := tx.ExecContext(ctx, d.bind("DELETE FROM leases WHERE id IN (?, ?)"), ended, live); err != nil {
		return fmt.Errorf("benchload: history: delete the model leases: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("benchload: history: commit: %w", err)
	}
	if d == rawPostgres {
		if _, err := db.ExecContext(ctx, "VACUUM ANALYZE leases"); err != nil {
			return fmt.Errorf("benchload: history: vacuum: %w", err)
		}
		// The fill's dirty pages are written now, not by the checkpointer
		// while the measurements run.
		if _, err := db.ExecContext(ctx, "CHECKPOINT"); err != nil {
			return fmt.Errorf("benchload: history: checkpoint: %w", err)
		}
	} else if _, err := db.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		return fmt.Errorf("benchload: history: checkpoint: %w", err)
	}
	return nil
}

// SchemaVersion is the store schema's version: a short hash of the latest
// migration of every component, read from a store migrated afresh in a
// SQLite file under dir (removed after).
func SchemaVersion(ctx context.Context, dir string) (string, error) {
	tmp, err := os.MkdirTemp(dir, "schema-")
	if err != nil {
		return "", fmt.Errorf("benchload: schema version: %w", err)
	}
	defer os.RemoveAll(tmp)
	path := filepath.Join(tmp, "schema.db")
	st, err := sqlite.Open(ctx, path)
	if err != nil {
		return "", fmt.Errorf("benchload: schema version: %w", err)
	}
	if err := st.Close(); err != nil {
		return "", fmt.Errorf("benchload: schema version: %w", err)
	}
	db, _, err := openRaw("sqlite://" + path)
	if err != nil {
		return "", err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, "SELECT component, MAX(version) FROM schema_migrations GROUP BY component ORDER BY component")
	if err != nil {
		return "", fmt.Errorf("benchload: schema version: %w", err)
	}
	defer rows.Close()
	sum := sha256.New()
	for rows.Next() {
		var c string
		var v int
		if err := rows.Scan(&c, &v); err != nil {
			return "", fmt.Errorf("benchload: schema version: %w", err)
		}
		fmt.Fprintf(sum, "%s=%d\n", c, v)
	}
	if err := rows.Err(); err != nil {
		return "", fmt.Errorf("benchload: schema version: %w", err)
	}
	return hex.EncodeToString(sum.Sum(nil))[:12], nil
}

// HistoryCacheDir is where HistoryFile keeps its fills:
// os.UserCacheDir()/berth-bench.
func HistoryCacheDir() (string, error) {
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("benchload: history cache: %w", err)
	}
	return filepath.Join(d, "berth-bench"), nil
}

// HistoryFile makes the SQLite file dst (absent) a store filled as cfg
// asks, a copy of the fill cached in cacheDir (HistoryCacheDir if ""),
// keyed by the schema version, the fill's form and cfg:
// leases-1m-<schema>-<ended>-<live>-<environments>.db, with its History
// beside it in a .json file. A missing fill is made first (FillHistory in
// a temporary file renamed when done), so that the first run pays for it
// and later runs of the same schema copy it.
func HistoryFile(ctx context.Context, dst, cacheDir string, cfg HistoryConfig) (History, error) {
	cfg.Environments = max(cfg.Environments, 1)
	if cacheDir == "" {
		var err error
		if cacheDir, err = HistoryCacheDir(); err != nil {
			return History{}, err
		}
	}
	if err := os.MkdirAll(cacheDir, 0o700); err != nil {
		return History{}, fmt.Errorf("benchload: history cache: %w", err)
	}
	schema, err := SchemaVersion(ctx, cacheDir)
	if err != nil {
		return History{}, err
	}
	base := filepath.Join(cacheDir, fmt.Sprintf("leases-1m-%s%s-%d-%d-%d", schema, historyFormat, cfg.Ended, cfg.Live, cfg.Environments))
	var h History
	meta, err := os.ReadFile(base + ".json")
	if err == nil && json.Unmarshal(meta, &h) == nil && fileExists(base+".db") {
		h.Cached = true
	} else {
		tmp := base + ".filling.db"
		for _, p := range []string{tmp, tmp + "-wal", tmp + "-shm"} {
			_ = os.Remove(p)
		}
		if h, err = FillHistory(ctx, "sqlite://"+tmp, cfg); err != nil {
			return h, err
		}
		for _, p := range []string{tmp + "-wal", tmp + "-shm"} {
			_ = os.Remove(p) // checkpointed and truncated by the fill
		}
		b, err := json.Marshal(h)
		if err != nil {
			return h, err
		}
		if err := os.WriteFile(base+".json.tmp", b, 0o600); err != nil {
			return h, fmt.Errorf("benchload: history cache: %w", err)
		}
		if err := errors.Join(os.Rename(tmp, base+".db"), os.Rename(base+".json.tmp", base+".json")); err != nil {
			return h, fmt.Errorf("benchload: history cache: %w", err)
		}
	}
	start := time.Now()
	if err := copyFile(dst, base+".db"); err != nil {
		return h, err
	}
	h.Copy = time.Since(start)
	return h, nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// copyFile copies src to dst, which must not exist.
func copyFile(dst, src string) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("benchload: history: %w", err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("benchload: history: %w", err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("benchload: history: copy %s: %w", src, err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("benchload: history: copy %s: %w", src, err)
	}
	return nil
}
