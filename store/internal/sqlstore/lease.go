package sqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/lease"
)

var (
	_ lease.Store = (*DB)(nil)
	// the Store's optional method (see lease.Store)
	_ interface {
		ClaimLeaseForRelease(ctx context.Context, id, owner string, now, until time.Time) (*lease.Lease, error)
	} = (*DB)(nil)
)

// leaseColumns are the leases table's columns in the order of leaseArgs and
// scanLease.
const leaseColumns = `id, company, environment_id, workspace, run, status, policy, provider, provider_lease_id,
	acquired_at, last_used_at, expires_at, released_at,
	failure_reason, cleanup, cleanup_disposition, after_cleanup, cleanup_attempts, cleanup_evidence,
	fingerprint, reuse_key, run_key, replaces, replace_reason, uses,
	config, labels, metadata, claimed_by, claimed_until, holder, holder_until, draft, cleanup_evidence_kind, runner, version`

// leasePlaceholders has one ? per column of leaseColumns.
var leasePlaceholders = strings.TrimSuffix(strings.Repeat("?, ", strings.Count(leaseColumns, ",")+1), ", ")

// leaseUpdateSQL sets every column but id, in leaseColumns order, on the
// lease with the id and version bound to its last two ?.
var leaseUpdateSQL = func() string {
	cols := strings.Split(leaseColumns, ",")
	set := make([]string, 0, len(cols)-1)
	for _, c := range cols[1:] {
		set = append(set, strings.TrimSpace(c)+" = ?")
	}
	return "UPDATE leases SET " + strings.Join(set, ", ") + " WHERE id = ? AND version = ?"
}()

// leaseColumnNames are leaseColumns one by one.
var leaseColumnNames = func() []string {
	cols := strings.Split(leaseColumns, ",")
	for i, c := range cols {
		cols[i] = strings.TrimSpace(c)
	}
	return cols
}()

// leaseUpdateColumnsSQL returns the UPDATE of the lease with the id and
// version bound to its last two ? that sets only the columns changed
// names (indexes into leaseColumnNames, version last), in that order.
func leaseUpdateColumnsSQL(changed []int) string {
	set := make([]string, 0, len(changed))
	for _, i := range changed {
		set = append(set, leaseColumnNames[i]+" = ?")
	}
	return "UPDATE leases SET " + strings.Join(set, ", ") + " WHERE id = ? AND version = ?"
}

// maxCachedRows bounds a DB's leaseRows.
const maxCachedRows = 4096

// leaseRows remembers, per live lease this process wrote or claimed last,
// its row at one version: the column values (leaseArgs) and the lease
// itself. UpdateLease from that version then sets only the columns that
// differ: an UPDATE that names no indexed column touches none of the
// leases table's indexes (SQLite rewrites an index only when its columns
// are assigned; PostgreSQL can make a heap-only update), and most state
// changes assign three to six columns of thirty-six. The version check in
// the WHERE clause keeps this exact across processes: the row is at that
// version only if nobody wrote it since (every write of a lease row grows
// its version), so its other columns still hold the remembered values; any
// other version refuses the update as before. A claim of a remembered row
// reads back only what it changed, for the same reason (claimLease).
//
// The remembered lease shares its maps and runner with the lease it was
// written from, as the lease.Store contract allows: nobody changes them in
// place. So a lease whose Config, Labels, Metadata or Runner is the very
// value the remembered row was written with has that column's JSON text
// unchanged, and leaseArgs does not encode it again.
type leaseRows struct {
	mu   sync.Mutex
	rows map[string]leaseRow
}

type leaseRow struct {
	args  []any        // leaseArgs at lease.Version
	lease *lease.Lease // as a read of the row returns it, but for its maps' number types
}

// get returns the remembered row of lease id at version, if any.
func (c *leaseRows) get(id string, version int64) (leaseRow, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.rows[id]
	if !ok || r.lease.Version != version {
		return leaseRow{}, false
	}
	return r, true
}

// latest returns the remembered row of lease id at whatever version.
func (c *leaseRows) latest(id string) (leaseRow, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.rows[id]
	return r, ok
}

// put remembers args and a copy of l as the row of lease l.ID at
// l.Version; a lease that ended is forgotten (its record is history and
// rarely written again).
func (c *leaseRows) put(args []any, l *lease.Lease) {
	if l.Ended() {
		c.drop(l.ID)
		return
	}
	id, stored := l.ID, storedLease(l)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rows == nil {
		c.rows = map[string]leaseRow{}
	}
	if _, ok := c.rows[id]; !ok && len(c.rows) >= maxCachedRows {
		for k := range c.rows { // drop any one
			delete(c.rows, k)
			break
		}
	}
	c.rows[id] = leaseRow{args: args, lease: stored}
}

// drop forgets lease id.
func (c *leaseRows) drop(id string) {
	c.mu.Lock()
	delete(c.rows, id)
	c.mu.Unlock()
}

// storedLease returns a copy of l with its times as a read of its row
// returns them (UTC, nanoseconds, no monotonic reading). The copy shares
// l's maps and runner.
func storedLease(l *lease.Lease) *lease.Lease {
	c := *l
	for _, t := range []*time.Time{&c.AcquiredAt, &c.LastUsedAt, &c.ExpiresAt, &c.ReleasedAt, &c.ClaimedUntil, &c.HolderUntil} {
		*t = fromNanos(nanos(*t))
	}
	return &c
}

// sameMap reports whether a and b are the same map (or both nil).
func sameMap[M ~map[K]V, K comparable, V any](a, b M) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

// Indexes into leaseColumnNames of the columns leaseArgs and claimLease
// handle one by one.
var (
	colExpiresAt    = slices.Index(leaseColumnNames, "expires_at")
	colConfig       = slices.Index(leaseColumnNames, "config")
	colLabels       = slices.Index(leaseColumnNames, "labels")
	colMetadata     = slices.Index(leaseColumnNames, "metadata")
	colClaimedBy    = slices.Index(leaseColumnNames, "claimed_by")
	colClaimedUntil = slices.Index(leaseColumnNames, "claimed_until")
	colRunner       = slices.Index(leaseColumnNames, "runner")
	colVersion      = slices.Index(leaseColumnNames, "version")
)

// changedColumns returns the indexes of the columns (neither id nor
// version) whose values differ between old and args, then version's.
func changedColumns(old, args []any) []int {
	last := len(args) - 1 // version
	changed := make([]int, 0, 8)
	for i := 1; i < last; i++ {
		if args[i] != old[i] {
			changed = append(changed, i)
		}
	}
	return append(changed, last)
}

// maxKeyAttempts bounds how often InsertLease and ClaimLease start over when
// the row that refused them changed before it could be read (a key released,
// a claim expired): under any sane contention one retry suffices.
const maxKeyAttempts = 5

// nullText is s as a nullable TEXT column: NULL for "".
func nullText(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }

// leaseArgs returns l's column values in leaseColumns order, with version
// as the stored version. The JSON columns of maps and a runner that are
// prev's own (see leaseRows) take prev's text; prev may be the zero row.
func leaseArgs(l *lease.Lease, version int64, prev leaseRow) ([]any, error) {
	p := prev.lease
	text := func(col int, same bool, v any) (sql.NullString, error) {
		if same {
			return prev.args[col].(sql.NullString), nil
		}
		t, err := jsonText(v)
		if err != nil {
			return sql.NullString{}, fmt.Errorf("%s: %w", leaseColumnNames[col], err)
		}
		return t, nil
	}
	config, err := text(colConfig, p != nil && sameMap(l.Config, p.Config), l.Config)
	if err != nil {
		return nil, err
	}
	labels, err := text(colLabels, p != nil && sameMap(l.Labels, p.Labels), l.Labels)
	if err != nil {
		return nil, err
	}
	metadata, err := text(colMetadata, p != nil && sameMap(l.Metadata, p.Metadata), l.Metadata)
	if err != nil {
		return nil, err
	}
	runner, err := text(colRunner, p != nil && l.Runner == p.Runner, l.Runner)
	if err != nil {
		return nil, err
	}
	return []any{
		l.ID, l.Company, l.Environment, l.Workspace, l.Run, string(l.Status), string(l.Policy), l.Provider, l.ProviderLeaseID,
		nanos(l.AcquiredAt), nanos(l.LastUsedAt), nanos(l.ExpiresAt), nanos(l.ReleasedAt),
		l.FailureReason, string(l.Cleanup), int64(l.CleanupDisposition), string(l.AfterCleanup), int64(l.CleanupAttempts), l.CleanupEvidence,
		l.Fingerprint, nullText(l.ReuseKey), nullText(l.RunKey), l.Replaces, string(l.ReplaceReason), int64(l.Uses),
		config, labels, metadata, l.ClaimedBy, nanos(l.ClaimedUntil), l.Holder, nanos(l.HolderUntil), l.Draft, string(l.CleanupEvidenceKind), runner, version,
	}, nil
}

// scanLease reads one row of leaseColumns.
func scanLease(s scanner) (*lease.Lease, error) {
	var l lease.Lease
	var status, policy, cleanup, afterCleanup, replaceReason, evidenceKind string
	var disposition, attempts, uses int64
	var acquired, lastUsed, expires, released, claimedUntil, holderUntil sql.NullInt64
	var reuseKey, runKey, config, labels, metadata, runner sql.NullString
	if err := s.Scan(&l.ID, &l.Company, &l.Environment, &l.Workspace, &l.Run, &status, &policy, &l.Provider, &l.ProviderLeaseID,
		&acquired, &lastUsed, &expires, &released,
		&l.FailureReason, &cleanup, &disposition, &afterCleanup, &attempts, &l.CleanupEvidence,
		&l.Fingerprint, &reuseKey, &runKey, &l.Replaces, &replaceReason, &uses,
		&config, &labels, &metadata, &l.ClaimedBy, &claimedUntil, &l.Holder, &holderUntil, &l.Draft, &evidenceKind, &runner, &l.Version); err != nil {
		return nil, err
	}
	l.Status, l.Policy = lease.Status(status), lease.Policy(policy)
	l.AcquiredAt, l.LastUsedAt, l.ExpiresAt, l.ReleasedAt = fromNanos(acquired), fromNanos(lastUsed), fromNanos(expires), fromNanos(released)
	l.Cleanup, l.CleanupDisposition, l.AfterCleanup = cleanup, drivers.Disposition(disposition), lease.Status(afterCleanup)
	l.CleanupAttempts, l.Uses = int(attempts), int(uses)
	l.ReuseKey, l.RunKey = reuseKey.String, runKey.String
	l.ReplaceReason = replaceReason
	l.CleanupEvidenceKind = drivers.EvidenceKind(evidenceKind)
	l.ClaimedUntil, l.HolderUntil = fromNanos(claimedUntil), fromNanos(holderUntil)
	if err := fromJSONText(config, &l.Config); err != nil {
		return nil, fmt.Errorf("lease %s: config: %w", l.ID, err)
	}
	if err := fromJSONText(labels, &l.Labels); err != nil {
		return nil, fmt.Errorf("lease %s: labels: %w", l.ID, err)
	}
	if err := fromJSONText(metadata, &l.Metadata); err != nil {
		return nil, fmt.Errorf("lease %s: metadata: %w", l.ID, err)
	}
	if runner.Valid {
		l.Runner = new(drivers.RunnerSpec)
		if err := fromJSONText(runner, l.Runner); err != nil {
			return nil, fmt.Errorf("lease %s: runner: %w", l.ID, err)
		}
	}
	return &l, nil
}

// scanLeases reads every row of rows and closes it.
func scanLeases(rows *sql.Rows) ([]*lease.Lease, error) {
	defer rows.Close()
	var out []*lease.Lease
	for rows.Next() {
		l, err := scanLease(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, rows.Err()
}

// sortLeases orders ls as ListLeases does: by AcquiredAt, then ID.
func sortLeases(ls []*lease.Lease) {
	slices.SortFunc(ls, func(a, b *lease.Lease) int {
		if c := a.AcquiredAt.Compare(b.AcquiredAt); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
}

// leaseKeyHolder returns the lease other than l that holds l's reuse key or
// run key, or nil if none does (any more).
func (db *DB) leaseKeyHolder(ctx context.Context, l *lease.Lease) (*lease.Lease, error) {
	if l.ReuseKey == "" && l.RunKey == "" {
		return nil, nil
	}
	o, err := scanLease(db.writes().queryRow(ctx, "SELECT "+leaseColumns+` FROM leases
		WHERE id <> ? AND (reuse_key = ? OR run_key = ?) ORDER BY id`+db.d.collateC()+` LIMIT 1`,
		l.ID, nullText(l.ReuseKey), nullText(l.RunKey)))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	return o, err
}

// insertLease is InsertLease without quotas. The insert is one statement
// with ON CONFLICT DO NOTHING: the primary key and the partial unique indexes on
// reuse_key and run_key decide between concurrent inserts in any processes,
// so of concurrent acquisitions of one key exactly one writes its record
// (LEASE-8, LEASE-10). A refused insert is answered with the lease that
// holds the key, read after the refusal; if that lease gave the key up in
// between, the insert is tried again.
func (db *DB) insertLease(ctx context.Context, l *lease.Lease) (*lease.Lease, error) {
	if l == nil || l.ID == "" {
		return nil, errors.New("sqlstore: insert lease: empty id")
	}
	args, err := leaseArgs(l, 1, leaseRow{})
	if err != nil {
		return nil, fmt.Errorf("sqlstore: insert lease %s: %w", l.ID, err)
	}
	for range maxKeyAttempts {
		res, err := db.writes().exec(ctx, `INSERT INTO leases (`+leaseColumns+`) VALUES (`+leasePlaceholders+`)
			ON CONFLICT DO NOTHING`, args...)
		if err != nil {
			return nil, fmt.Errorf("sqlstore: insert lease %s: %w", l.ID, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return nil, fmt.Errorf("sqlstore: insert lease %s: %w", l.ID, err)
		}
		if n == 1 {
			l.Version = 1
			db.leaseRows.put(args, l)
			return nil, nil
		}
		var one int
		err = db.writes().queryRow(ctx, "SELECT 1 FROM leases WHERE id = ?", l.ID).Scan(&one)
		if err == nil {
			return nil, fmt.Errorf("sqlstore: insert lease %s: id taken: %w", l.ID, errcode.ErrConflict)
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return nil, fmt.Errorf("sqlstore: insert lease %s: %w", l.ID, err)
		}
		holder, err := db.leaseKeyHolder(ctx, l)
		if err != nil {
			return nil, fmt.Errorf("sqlstore: insert lease %s: find key holder: %w", l.ID, err)
		}
		if holder != nil {
			return holder, fmt.Errorf("sqlstore: insert lease %s: key held by lease %s: %w", l.ID, holder.ID, errcode.ErrConflict)
		}
	}
	return nil, fmt.Errorf("sqlstore: insert lease %s: its keys kept changing hands: %w", l.ID, errcode.ErrConflict)
}

// GetLease implements lease.Store.
func (db *DB) GetLease(ctx context.Context, id string) (*lease.Lease, error) {
	l, err := scanLease(db.reads().queryRow(ctx, "SELECT "+leaseColumns+" FROM leases WHERE id = ?", id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("sqlstore: lease %s: %w", id, errcode.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlstore: get lease %s: %w", id, err)
	}
	return l, nil
}

// UpdateLease implements lease.Store with one version-checked statement
// (UPDATE ... WHERE id = ? AND version = ?): of concurrent updates from one
// version exactly one wins, in any process, and a key another lease holds
// is refused by the unique indexes.
func (db *DB) UpdateLease(ctx context.Context, l *lease.Lease) error {
	if l == nil || l.ID == "" {
		return errors.New("sqlstore: update lease: empty id")
	}
	prev, cached := db.leaseRows.get(l.ID, l.Version)
	args, err := leaseArgs(l, l.Version+1, prev)
	if err != nil {
		return fmt.Errorf("sqlstore: update lease %s: %w", l.ID, err)
	}
	q, qargs := leaseUpdateSQL, append(args[1:len(args):len(args)], l.ID, l.Version)
	if cached {
		changed := changedColumns(prev.args, args)
		q, qargs = leaseUpdateColumnsSQL(changed), make([]any, 0, len(changed)+2)
		for _, i := range changed {
			qargs = append(qargs, args[i])
		}
		qargs = append(qargs, l.ID, l.Version)
	}
	res, err := db.writes().exec(ctx, q, qargs...)
	if err != nil {
		db.leaseRows.drop(l.ID)
		if _, ok := uniqueViolation(err); ok {
			if holder, herr := db.leaseKeyHolder(ctx, l); herr == nil && holder != nil {
				return fmt.Errorf("sqlstore: update lease %s: key held by lease %s: %w", l.ID, holder.ID, errcode.ErrConflict)
			}
			return fmt.Errorf("sqlstore: update lease %s: key held by another lease: %w", l.ID, errcode.ErrConflict)
		}
		return fmt.Errorf("sqlstore: update lease %s: %w", l.ID, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("sqlstore: update lease %s: %w", l.ID, err)
	}
	if n == 0 {
		db.leaseRows.drop(l.ID)
		var stored int64
		err := db.writes().queryRow(ctx, "SELECT version FROM leases WHERE id = ?", l.ID).Scan(&stored)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("sqlstore: update lease %s: %w", l.ID, errcode.ErrNotFound)
		case err != nil:
			return fmt.Errorf("sqlstore: update lease %s: %w", l.ID, err)
		}
		return fmt.Errorf("sqlstore: update lease %s: stored version %d, update based on %d: %w", l.ID, stored, l.Version, errcode.ErrConflict)
	}
	l.Version++
	db.leaseRows.put(args, l)
	return nil
}

// FindByReuseKey implements lease.Store; the empty key is never held.
func (db *DB) FindByReuseKey(ctx context.Context, key string) (*lease.Lease, error) {
	return db.findLeaseBy(ctx, "reuse_key", key)
}

// FindByRunKey implements lease.Store; the empty key is never held.
func (db *DB) FindByRunKey(ctx context.Context, key string) (*lease.Lease, error) {
	return db.findLeaseBy(ctx, "run_key", key)
}

// findLeaseBy returns the lease whose column (reuse_key or run_key) is key.
func (db *DB) findLeaseBy(ctx context.Context, column, key string) (*lease.Lease, error) {
	if key == "" {
		return nil, fmt.Errorf("sqlstore: lease with empty %s: %w", column, errcode.ErrNotFound)
	}
	l, err := scanLease(db.reads().queryRow(ctx, "SELECT "+leaseColumns+" FROM leases WHERE "+column+" = ?", key))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("sqlstore: lease with %s %q: %w", column, key, errcode.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlstore: find lease by %s %q: %w", column, key, err)
	}
	return l, nil
}

// ListLeases implements lease.Store: the leases matching f (as f.Match
// decides), ordered by AcquiredAt (none first), then ID in byte order.
//
// A page (f.Limit) is read in two parts, each in an order an index on
// acquired_at yields on both databases, so that an environment's page
// reads that many entries of leases_environment_acquired whatever its
// history: the leases without an acquisition time (first in the oldest
// first order, last newest first) and those with one. One ORDER BY with
// NULLS FIRST or LAST would not do: SQLite puts NULLs first in ascending
// order and PostgreSQL last, and an index serves only its own.
func (db *DB) ListLeases(ctx context.Context, f lease.Filter) ([]*lease.Lease, error) {
	parts := []listPart{listAll}
	if f.Limit > 0 {
		parts = []listPart{listNull, listTimed}
		if f.Newest {
			parts = []listPart{listTimed, listNull}
		}
	}
	var out []*lease.Lease
	for _, part := range parts {
		q, args := db.listLeasesSQL(f, part, f.Limit-len(out))
		rows, err := db.reads().query(ctx, q, args...)
		if err != nil {
			return nil, fmt.Errorf("sqlstore: list leases: %w", err)
		}
		ls, err := scanLeases(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlstore: list leases: %w", err)
		}
		out = append(out, ls...)
		if f.Limit > 0 && len(out) >= f.Limit {
			break
		}
	}
	return out, nil
}

// listPart is which leases of a filter one query of ListLeases reads.
type listPart int

const (
	listAll   listPart = iota // every lease, in the filter's order
	listNull                  // those without an acquisition time, by id
	listTimed                 // those with one, by acquired_at and id
)

// listLeasesSQL is ListLeases' query of f's leases of part, at most limit
// of them when f.Limit is set, and its arguments.
func (db *DB) listLeasesSQL(f lease.Filter, part listPart, limit int) (string, []any) {
	from := " FROM leases"
	if (f.Live || allLive(f.Statuses)) && f.ProviderLeaseID == "" {
		// SQLite would otherwise read an environment's whole history
		// through leases_environment_acquired, which yields the order.
		from += db.d.indexedBy("leases_live")
	}
	q := "SELECT " + leaseColumns + from + " WHERE 1 = 1"
	var args []any
	for _, c := range []struct{ column, value string }{
		{"company", f.Company}, {"environment_id", f.Environment}, {"run", f.Run},
		{"provider_lease_id", f.ProviderLeaseID},
	} {
		if c.value != "" {
			q += " AND " + c.column + " = ?"
			args = append(args, c.value)
		}
	}
	if f.ProviderLeaseID != "" {
		// The index on provider ids holds the non-empty ones only.
		q += " AND " + providerIDSQL
	}
	if f.Live || allLive(f.Statuses) {
		// Live leases are read through leases_live, whose predicate is
		// this term (EnvironmentUsage and the orphan search read O(live
		// leases)); for statuses that are always live it adds nothing but
		// that index.
		q += " AND " + liveSQL
	}
	if len(f.Statuses) > 0 {
		q += " AND status IN (" + strings.TrimSuffix(strings.Repeat("?, ", len(f.Statuses)), ", ") + ")"
		for _, s := range f.Statuses {
			args = append(args, string(s))
		}
	}
	desc := ""
	if f.Newest {
		desc = " DESC"
	}
	switch part {
	case listAll:
		nulls := " NULLS FIRST"
		if f.Newest {
			nulls = " NULLS LAST"
		}
		q += " ORDER BY acquired_at" + desc + nulls + ", id" + db.d.collateC() + desc
	case listNull:
		q += " AND acquired_at IS NULL ORDER BY id" + db.d.collateC() + desc
	case listTimed:
		q += " AND acquired_at IS NOT NULL ORDER BY acquired_at" + desc + ", id" + db.d.collateC() + desc
	}
	if f.Limit > 0 {
		q += fmt.Sprintf(" LIMIT %d", max(limit, 1))
	}
	return q, args
}

// claimFreeSQL is the condition "nobody but the owner bound to the first ?
// holds a live claim at the second ?" (lease.Lease.claimFree). ClaimForSweep
// binds the owner to "", which no claim has.
const claimFreeSQL = `(claimed_by = '' OR claimed_by = ? OR claimed_until IS NULL OR claimed_until <= ?)`

// ClaimLease implements lease.Store with one conditional UPDATE ...
// RETURNING: the claim is set only if at that instant nobody else holds a
// live one, so two managers in any processes never both hold a claim on a
// lease at once (LEASE-10).
func (db *DB) ClaimLease(ctx context.Context, id, owner string, now, until time.Time) (*lease.Lease, error) {
	return db.claimLease(ctx, id, owner, now, until, false)
}

// ClaimLeaseForRelease is lease.Store's optional method: ClaimLease's one
// statement also sets expires_at of an active or retained lease.
func (db *DB) ClaimLeaseForRelease(ctx context.Context, id, owner string, now, until time.Time) (*lease.Lease, error) {
	return db.claimLease(ctx, id, owner, now, until, true)
}

// claimSQL is the claim of the lease bound to its third ? (fourth with
// expire) by the owner and until bound to its first two, which with expire
// also sets expires_at of an active or retained lease to the third ?; it
// returns the row's leaseColumns, or with short only its version and
// expires_at.
func claimSQL(expire, short bool) string {
	q := "UPDATE leases SET claimed_by = ?, claimed_until = ?, "
	if expire {
		q += fmt.Sprintf("expires_at = CASE WHEN status IN ('%s', '%s') THEN ? ELSE expires_at END, ", lease.StatusActive, lease.StatusRetained)
	}
	q += "version = version + 1 WHERE id = ? AND " + claimFreeSQL + " RETURNING "
	if short {
		return q + "version, expires_at"
	}
	return q + leaseColumns
}

// claimSQLs are claimSQL's four statements, indexed [expire][short].
var claimSQLs = [2][2]string{{claimSQL(false, false), claimSQL(false, true)}, {claimSQL(true, false), claimSQL(true, true)}}

// claimLease is ClaimLease, or with expire ClaimLeaseForRelease. A claim
// of a row that leaseRows remembers returns only the version and
// expires_at: when the version is the remembered one's next, nobody wrote
// the row in between, so the claimed lease is the remembered one with the
// claim and expires_at set; otherwise the row is read again.
func (db *DB) claimLease(ctx context.Context, id, owner string, now, until time.Time, expire bool) (*lease.Lease, error) {
	args := []any{owner, nanos(until), id, owner, nanos(now)}
	if expire {
		args = []any{owner, nanos(until), nanos(until), id, owner, nanos(now)}
	}
	for range maxKeyAttempts {
		var l *lease.Lease
		var err error
		if prev, ok := db.leaseRows.latest(id); ok {
			l, err = db.claimRemembered(ctx, prev, claimSQLs[b2i(expire)][1], args, owner, until)
		} else {
			l, err = scanLease(db.writes().queryRow(ctx, claimSQLs[b2i(expire)][0], args...))
			if err == nil {
				db.remember(l)
			}
		}
		if err == nil {
			return l, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return nil, fmt.Errorf("sqlstore: claim lease %s: %w", id, err)
		}
		cur, err := db.GetLease(ctx, id)
		if err != nil {
			return nil, err
		}
		if cur.ClaimedBy != "" && cur.ClaimedBy != owner && now.Before(cur.ClaimedUntil) {
			return cur, fmt.Errorf("sqlstore: claim lease %s: claimed by %s until %s: %w", id, cur.ClaimedBy, cur.ClaimedUntil.Format(time.RFC3339), lease.ErrClaimed)
		}
		// The claim ended between the UPDATE and the read: try again.
	}
	return nil, fmt.Errorf("sqlstore: claim lease %s: its claim kept changing hands: %w", id, lease.ErrClaimed)
}

// claimRemembered runs the short claim q of the row prev remembers and
// returns the claimed lease; sql.ErrNoRows when the claim was refused.
func (db *DB) claimRemembered(ctx context.Context, prev leaseRow, q string, args []any, owner string, until time.Time) (*lease.Lease, error) {
	var version int64
	var expires sql.NullInt64
	if err := db.writes().queryRow(ctx, q, args...).Scan(&version, &expires); err != nil {
		return nil, err
	}
	id := prev.lease.ID
	if version != prev.lease.Version+1 {
		// Written elsewhere since: what the row holds now, this claim
		// included.
		db.leaseRows.drop(id)
		l, err := db.GetLease(ctx, id)
		if err != nil {
			return nil, err
		}
		db.remember(l)
		return l, nil
	}
	l := *prev.lease
	l.Version, l.ClaimedBy, l.ClaimedUntil, l.ExpiresAt = version, owner, fromNanos(nanos(until)), fromNanos(expires)
	args = slices.Clone(prev.args)
	args[colClaimedBy], args[colClaimedUntil], args[colExpiresAt], args[colVersion] = owner, nanos(until), expires, version
	db.leaseRows.put(args, &l)
	return &l, nil
}

// b2i is 1 for true, 0 for false.
func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// needsSweepSQL is the condition of lease.Store.ClaimForSweep (which
// leases need a sweep) at the instant bound to its three ?,
// built from the lease package's status names.
var needsSweepSQL = fmt.Sprintf(`(status = '%s'
	OR (status = '%s' AND (claimed_until IS NULL OR claimed_until <= ?))
	OR (status IN ('%s', '%s') AND expires_at IS NOT NULL AND expires_at <= ?)
	OR (status = '%s' AND reuse_key IS NOT NULL AND expires_at IS NOT NULL AND expires_at <= ?))`,
	lease.StatusPendingCleanup, lease.StatusStarting, lease.StatusActive, lease.StatusRetained, lease.StatusReleased)

// ClaimForSweep implements lease.Store in one statement. On PostgreSQL the
// candidates are selected FOR UPDATE SKIP LOCKED, and a candidate that
// another sweeper claimed since the statement began is re-checked on its
// newest version and dropped; on SQLite the statement runs under the
// database's write lock. Either way a lease is never handed to two
// claimants whose claims overlap (LEASE-10). The leases come back ordered
// by AcquiredAt, then ID.
func (db *DB) ClaimForSweep(ctx context.Context, owner string, now, until time.Time, limit int) ([]*lease.Lease, error) {
	n := nanos(now)
	cond := needsSweepSQL + " AND " + claimFreeSQL
	condArgs := []any{n, n, n, "", n}
	pick := db.sweepPickSQL(limit)
	var q string
	args := []any{owner, nanos(until)}
	if db.d == postgres {
		// A materialized CTE runs the locking SELECT exactly once.
		q = "WITH picked AS MATERIALIZED (" + pick + " FOR UPDATE SKIP LOCKED)" +
			" UPDATE leases SET claimed_by = ?, claimed_until = ?, version = version + 1" +
			" WHERE id IN (SELECT id FROM picked) AND " + cond + " RETURNING " + leaseColumns
		args = append(append(append([]any(nil), condArgs...), args...), condArgs...)
	} else {
		q = "UPDATE leases SET claimed_by = ?, claimed_until = ?, version = version + 1" +
			" WHERE id IN (" + pick + ") RETURNING " + leaseColumns
		args = append(args, condArgs...)
	}
	rows, err := db.writes().query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: claim leases for sweep: %w", err)
	}
	out, err := scanLeases(rows)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: claim leases for sweep: %w", err)
	}
	sortLeases(out)
	return out, nil
}

// liveSQL is "the lease has not ended" (lease.Filter.Live): a status that
// holds or may hold a sandbox, or a released lease keeping a resumable one.
// It is the predicate of the partial index leases_live, written out in
// migration 8 of the lease component (TestLeasePartialIndexPredicates
// holds the two equal): every query of live leases carries it as a term of
// its own, so that the planners use that index.
var liveSQL = fmt.Sprintf(`(status IN ('%s') OR (status = '%s' AND reuse_key IS NOT NULL))`,
	strings.Join(liveStatuses, "', '"), lease.StatusReleased)

// liveStatuses are the statuses in which a lease is live whatever its
// reuse key: liveSQL's first term.
var liveStatuses = []string{string(lease.StatusStarting), string(lease.StatusActive), string(lease.StatusRetained),
	string(lease.StatusPendingCleanup), string(lease.StatusPooled)}

// allLive reports whether statuses is not empty and every one of them is
// in liveStatuses.
func allLive(statuses []lease.Status) bool {
	for _, s := range statuses {
		if !slices.Contains(liveStatuses, string(s)) {
			return false
		}
	}
	return len(statuses) > 0
}

// providerIDSQL is the predicate of the index on provider ids; a query by a
// (non-empty) provider id carries it so that the index serves it.
const providerIDSQL = `provider_lease_id <> ''`

// endedSQL is lease.Lease.Ended, and the predicate of the partial index
// leases_ended (migration 8, as liveSQL).
var endedSQL = fmt.Sprintf(`(status IN ('%s', '%s') OR (status = '%s' AND reuse_key IS NULL))`,
	lease.StatusExpired, lease.StatusFailed, lease.StatusReleased)

// DeleteLease implements lease.Store with one conditional DELETE on the id
// and version.
func (db *DB) DeleteLease(ctx context.Context, id string, version int64) error {
	db.leaseRows.drop(id)
	res, err := db.writes().exec(ctx, `DELETE FROM leases WHERE id = ? AND version = ?`, id, version)
	if err != nil {
		return fmt.Errorf("sqlstore: delete lease %s: %w", id, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("sqlstore: delete lease %s: %w", id, err)
	} else if n == 1 {
		return nil
	}
	cur, err := db.GetLease(ctx, id)
	if err != nil {
		return err
	}
	return fmt.Errorf("sqlstore: delete lease %s: stored version %d, delete based on %d: %w", id, cur.Version, version, errcode.ErrConflict)
}

// PruneLeases implements lease.Store in one DELETE of the ended leases
// released before before (oldest first), read through the partial index
// of ended leases by release time (leases_ended).
func (db *DB) PruneLeases(ctx context.Context, before time.Time, limit int) (int, error) {
	b := nanos(before)
	pick := db.prunePickSQL(limit)
	res, err := db.writes().exec(ctx, "DELETE FROM leases WHERE id IN ("+pick+")", b, "", b)
	if err != nil {
		return 0, fmt.Errorf("sqlstore: prune leases released before %s: %w", before.Format(time.RFC3339), err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("sqlstore: prune leases: %w", err)
	}
	return int(n), nil
}

// sweepPickSQL selects the ids of up to limit leases that need a sweep and
// that nobody holds a live claim on (its ? bound as in ClaimForSweep).
func (db *DB) sweepPickSQL(limit int) string {
	// Every lease that needs a sweep is live: liveSQL reads leases_live.
	pick := "SELECT id FROM leases" + db.d.indexedBy("leases_live") + " WHERE " + liveSQL + " AND " + needsSweepSQL + " AND " + claimFreeSQL + " ORDER BY acquired_at NULLS FIRST, id" + db.d.collateC()
	if limit > 0 {
		pick += fmt.Sprintf(" LIMIT %d", limit)
	}
	return pick
}

// prunePickSQL selects the ids of up to limit ended leases released before
// the first ? and not claimed at the third (the second is "").
func (db *DB) prunePickSQL(limit int) string {
	pick := "SELECT id FROM leases WHERE " + endedSQL + " AND released_at IS NOT NULL AND released_at < ? AND " + claimFreeSQL +
		" ORDER BY released_at, id" + db.d.collateC()
	if limit > 0 {
		pick += fmt.Sprintf(" LIMIT %d", limit)
	}
	return pick
}

// AdoptPooled implements lease.Store in one statement: the oldest matching
// pooled member that nobody holds a live claim on is picked and updated
// at once. On PostgreSQL the pick is SELECT ... FOR UPDATE SKIP LOCKED (a
// concurrent adopter skips the row another one locked, and the UPDATE
// re-checks the status on the row's newest version); on SQLite the
// statement runs under the database's write lock. Either way one member
// goes to one adoption (LEASE-10). Members are read through the partial
// index leases_pooled.
func (db *DB) AdoptPooled(ctx context.Context, ad *lease.Lease, q lease.Quotas) (*lease.Lease, error) {
	if ad == nil || !limits(q) {
		return db.adoptOn(ctx, db.writes(), ad)
	}
	var l *lease.Lease
	err := db.inTx(ctx, func(tx handle) error {
		if err := db.admitQuota(ctx, tx, q, ad.Company, ad.Environment); err != nil {
			return err
		}
		var err error
		l, err = db.adoptOn(ctx, tx, ad)
		return err
	})
	if err != nil {
		return nil, err
	}
	return l, nil
}

// adoptOn is AdoptPooled's statement on h (the pool, or a transaction that
// checked the adopting company's quotas).
func (db *DB) adoptOn(ctx context.Context, h handle, a *lease.Lease) (*lease.Lease, error) {
	if a == nil {
		return nil, fmt.Errorf("sqlstore: adopt a pooled lease: no adopting lease: %w", errcode.ErrInvalid)
	}
	ad := a
	metadata, err := jsonText(a.Metadata)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: adopt a pooled lease of environment %s: metadata: %w", ad.Environment, err)
	}
	n := nanos(ad.AcquiredAt)
	pick := "SELECT id FROM leases WHERE status = ? AND environment_id = ? AND fingerprint = ? AND "
	pickArgs := []any{string(lease.StatusPooled), ad.Environment, ad.Fingerprint}
	if ad.Runner == nil {
		pick += "runner IS NULL"
	} else {
		runner, err := jsonText(ad.Runner)
		if err != nil {
			return nil, fmt.Errorf("sqlstore: adopt a pooled lease of environment %s: runner: %w", ad.Environment, err)
		}
		pick += "runner = ?"
		pickArgs = append(pickArgs, runner)
	}
	pick += " AND " + claimFreeSQL + " ORDER BY acquired_at NULLS FIRST, id" + db.d.collateC() + " LIMIT 1"
	pickArgs = append(pickArgs, "", n)
	set := `UPDATE leases SET status = ?, company = ?, workspace = ?, run = ?, policy = ?, reuse_key = ?, run_key = ?,
		metadata = ?, replaces = ?, replace_reason = ?, acquired_at = ?, last_used_at = ?, claimed_by = ?, claimed_until = ?,
		version = version + 1`
	setArgs := []any{string(lease.StatusStarting), a.Company, a.Workspace, a.Run, string(a.Policy), nullText(a.ReuseKey), nullText(a.RunKey),
		metadata, a.Replaces, a.ReplaceReason, nanos(a.AcquiredAt), nanos(a.LastUsedAt), a.ClaimedBy, nanos(a.ClaimedUntil)}
	var q string
	var args []any
	if db.d == postgres {
		q = "WITH picked AS MATERIALIZED (" + pick + " FOR UPDATE SKIP LOCKED) " + set +
			" WHERE id IN (SELECT id FROM picked) AND status = ? RETURNING " + leaseColumns
		args = append(append(append([]any(nil), pickArgs...), setArgs...), string(lease.StatusPooled))
	} else {
		q = set + " WHERE id IN (" + pick + ") RETURNING " + leaseColumns
		args = append(append([]any(nil), setArgs...), pickArgs...)
	}
	l, err := scanLease(h.queryRow(ctx, q, args...))
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, fmt.Errorf("sqlstore: no pooled member of environment %s with fingerprint %s: %w", ad.Environment, ad.Fingerprint, errcode.ErrNotFound)
	case err != nil:
		if _, ok := uniqueViolation(err); ok {
			return nil, fmt.Errorf("sqlstore: adopt a pooled lease of environment %s: key held by another lease: %w", ad.Environment, errcode.ErrConflict)
		}
		return nil, fmt.Errorf("sqlstore: adopt a pooled lease of environment %s: %w", ad.Environment, err)
	}
	db.remember(l)
	return l, nil
}

// remember puts l, as just read from its row, into leaseRows.
func (db *DB) remember(l *lease.Lease) {
	if args, err := leaseArgs(l, l.Version, leaseRow{}); err == nil {
		db.leaseRows.put(args, l)
	}
}
