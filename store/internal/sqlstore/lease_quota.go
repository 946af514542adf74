package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"

	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/lease"
)

// errInsertRefused is what InsertLease's quota transaction returns when its
// INSERT changed nothing (a taken id or key): the transaction rolls back,
// and the refusal is told apart outside it.
var errInsertRefused = errors.New("sqlstore: insert refused by a unique key")

// quotaLockKey is the PostgreSQL advisory lock of company's quota: held
// for the rest of a transaction (pg_advisory_xact_lock), it serializes the
// count and the write of every insert and adoption of that company, in any
// process. Two companies may share a key (a 64-bit hash): they then wait
// for each other, which costs time, never correctness.
func quotaLockKey(company string) int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte("berth.lease.quota\x00" + company))
	return int64(h.Sum64())
}

// admitQuota, inside tx, takes company's quota lock (on SQLite the
// transaction holds the database's write lock already), counts its live
// leases (and those on env) and returns q.Admit's answer.
func (db *DB) admitQuota(ctx context.Context, tx handle, q lease.Quotas, company, env string) error {
	if db.d == postgres {
		if _, err := tx.exec(ctx, "SELECT pg_advisory_xact_lock(?)", quotaLockKey(company)); err != nil {
			return fmt.Errorf("sqlstore: the quota lock of company %s: %w", company, err)
		}
	}
	var all, onEnv int
	err := tx.queryRow(ctx, `SELECT COUNT(*), COALESCE(SUM(CASE WHEN environment_id = ? THEN 1 ELSE 0 END), 0)
		FROM leases WHERE company = ? AND `+liveSQL, env, company).Scan(&all, &onEnv)
	if err != nil {
		return fmt.Errorf("sqlstore: counting the live leases of company %s: %w", company, err)
	}
	return q.Admit(company, env, all, onEnv)
}

// limits reports whether q sets a limit: then an insert or an adoption
// counts the company's live leases in its step (q.Admit answers for
// companies no quota counts).
func limits(q lease.Quotas) bool { return q.PerCompany > 0 || q.PerCompanyEnvironment > 0 }

// InsertLease implements lease.Store. Without a limit in q it is one
// statement (insertLease); with one it is one transaction that takes the
// company's quota lock, counts its live leases and inserts l (ON CONFLICT
// DO NOTHING), so that of concurrent inserts of one company, from any
// number of processes, no two pass a limit on one count. A refused insert
// is answered as insertLease answers it.
func (db *DB) InsertLease(ctx context.Context, l *lease.Lease, q lease.Quotas) (*lease.Lease, error) {
	if l == nil || !limits(q) {
		return db.insertLease(ctx, l)
	}
	if l.ID == "" {
		return nil, errors.New("sqlstore: insert lease: empty id")
	}
	args, err := leaseArgs(l, 1, leaseRow{})
	if err != nil {
		return nil, fmt.Errorf("sqlstore: insert lease %s: %w", l.ID, err)
	}
	for range maxKeyAttempts {
		err := db.inTx(ctx, func(tx handle) error {
			if err := db.admitQuota(ctx, tx, q, l.Company, l.Environment); err != nil {
				return err
			}
			res, err := tx.exec(ctx, `INSERT INTO leases (`+leaseColumns+`) VALUES (`+leasePlaceholders+`)
				ON CONFLICT DO NOTHING`, args...)
			if err != nil {
				return fmt.Errorf("sqlstore: insert lease %s: %w", l.ID, err)
			}
			if n, err := res.RowsAffected(); err != nil {
				return fmt.Errorf("sqlstore: insert lease %s: %w", l.ID, err)
			} else if n != 1 {
				return errInsertRefused
			}
			return nil
		})
		if err == nil {
			l.Version = 1
			db.leaseRows.put(args, l)
			return nil, nil
		}
		if !errors.Is(err, errInsertRefused) {
			return nil, err
		}
		var one int
		if err := db.writes().queryRow(ctx, "SELECT 1 FROM leases WHERE id = ?", l.ID).Scan(&one); err == nil {
			return nil, fmt.Errorf("sqlstore: insert lease %s: id taken: %w", l.ID, errcode.ErrConflict)
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
