package sqlstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
)

var _ environment.SecretUseStore = (*DB)(nil)

// lockSecretUses serializes the secret-use transactions on PostgreSQL (a
// transaction-scoped advisory lock), so that a retirement and the release
// of a lease's uses never both miss each other's rows under READ
// COMMITTED; SQLite transactions already hold the write lock.
func lockSecretUses(ctx context.Context, tx handle) error {
	if tx.d != postgres {
		return nil
	}
	_, err := tx.exec(ctx, `SELECT pg_advisory_xact_lock(7306010421)`)
	return err
}

// usedSQL is "a lease uses a version that the retirement bound to its two
// ? (secret id, version; 0 for the whole secret) covers".
const usedSQL = `EXISTS (SELECT 1 FROM secret_uses u WHERE u.secret_id = ? AND (? = 0 OR u.version = ?))`

// UseSecrets implements environment.SecretUseStore.
func (db *DB) UseSecrets(ctx context.Context, lease string, refs []config.SecretRef) error {
	for _, r := range refs {
		if lease == "" || r.ID == "" || r.Version <= 0 {
			return fmt.Errorf("sqlstore: lease %q: secret use %s needs a lease, an id and a version: %w", lease, r, errcode.ErrInvalid)
		}
	}
	err := db.inTx(ctx, func(tx handle) error {
		if err := lockSecretUses(ctx, tx); err != nil {
			return err
		}
		for _, r := range refs {
			if _, err := tx.exec(ctx, `INSERT INTO secret_uses (lease_id, secret_id, version) VALUES (?, ?, ?)
				ON CONFLICT (lease_id, secret_id, version) DO NOTHING`, lease, r.ID, r.Version); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("sqlstore: record the secrets lease %s uses: %w", lease, err)
	}
	return nil
}

// RetireSecrets implements environment.SecretUseStore.
func (db *DB) RetireSecrets(ctx context.Context, refs []config.SecretRef) ([]config.SecretRef, error) {
	var free []config.SecretRef
	err := db.inTx(ctx, func(tx handle) error {
		free = free[:0]
		if err := lockSecretUses(ctx, tx); err != nil {
			return err
		}
		for _, r := range refs {
			var used bool
			if err := tx.queryRow(ctx, `SELECT `+usedSQL, r.ID, r.Version, r.Version).Scan(&used); err != nil {
				return err
			}
			if used {
				if _, err := tx.exec(ctx, `INSERT INTO secrets_retired (secret_id, version) VALUES (?, ?)
					ON CONFLICT (secret_id, version) DO NOTHING`, r.ID, r.Version); err != nil {
					return err
				}
				continue
			}
			if _, err := tx.exec(ctx, `DELETE FROM secrets_retired WHERE secret_id = ? AND version = ?`, r.ID, r.Version); err != nil {
				return err
			}
			free = appendNew(free, r)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("sqlstore: retire secrets: %w", err)
	}
	return free, nil
}

// ReleaseSecrets implements environment.SecretUseStore.
func (db *DB) ReleaseSecrets(ctx context.Context, lease string) ([]config.SecretRef, error) {
	// Most leases use no secret (and every lease ends once): a lease with
	// no use recorded has nothing to drop or free, so one read spares the
	// transaction and its lock, which on PostgreSQL is one advisory lock
	// for all replicas. No use can be recorded meanwhile: uses are
	// recorded before a lease's record is written or resumed, never for an
	// ended lease, and a lease is released only once it ended.
	var used bool
	if err := db.writes().queryRow(ctx, `SELECT EXISTS (SELECT 1 FROM secret_uses WHERE lease_id = ?)`, lease).Scan(&used); err != nil {
		return nil, fmt.Errorf("sqlstore: release the secrets lease %s used: %w", lease, err)
	}
	if !used {
		return nil, nil
	}
	var free []config.SecretRef
	err := db.inTx(ctx, func(tx handle) error {
		free = free[:0]
		if err := lockSecretUses(ctx, tx); err != nil {
			return err
		}
		// The retirements that covered a use of this lease are the only
		// ones this release may free.
		rows, err := tx.query(ctx, `SELECT DISTINCT r.secret_id, r.version FROM secrets_retired r
			JOIN secret_uses u ON u.secret_id = r.secret_id AND (r.version = 0 OR r.version = u.version)
			WHERE u.lease_id = ?`, lease)
		if err != nil {
			return err
		}
		var cands []config.SecretRef
		for rows.Next() {
			var r config.SecretRef
			if err := rows.Scan(&r.ID, &r.Version); err != nil {
				rows.Close()
				return err
			}
			cands = append(cands, r)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if _, err := tx.exec(ctx, `DELETE FROM secret_uses WHERE lease_id = ?`, lease); err != nil {
			return err
		}
		for _, r := range cands {
			var used bool
			if err := tx.queryRow(ctx, `SELECT `+usedSQL, r.ID, r.Version, r.Version).Scan(&used); err != nil {
				return err
			}
			if used {
				continue
			}
			if _, err := tx.exec(ctx, `DELETE FROM secrets_retired WHERE secret_id = ? AND version = ?`, r.ID, r.Version); err != nil {
				return err
			}
			free = append(free, r)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("sqlstore: release the secrets lease %s used: %w", lease, err)
	}
	slices.SortFunc(free, func(a, b config.SecretRef) int {
		return cmp.Or(strings.Compare(a.ID, b.ID), cmp.Compare(a.Version, b.Version))
	})
	return free, nil
}

func appendNew(refs []config.SecretRef, r config.SecretRef) []config.SecretRef {
	for _, x := range refs {
		if x == r {
			return refs
		}
	}
	return append(refs, r)
}
