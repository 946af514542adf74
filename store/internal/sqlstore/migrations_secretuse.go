package sqlstore

import (
	"fmt"

	"github.com/berthdev/berth/lease"
)

// SecretUse is the secret-use component: which leases use which secret
// versions, and which secrets no saved config references any more
// (environment.SecretUseStore, methods in secretuse.go; CFG-7, LEASE-9).
func (components) SecretUse() Component {
	return Component{
		Name:  "secret_use",
		After: []string{"lease"}, // the backfill reads the leases table
		Migrations: []Migration{{
			Version: 1,
			Name:    "create secret_uses and secrets_retired",
			SQL: append(secretUseTables[:len(secretUseTables):len(secretUseTables)],
				backfillSecretUsesSQLite),
			Postgres: append(secretUseTables[:len(secretUseTables):len(secretUseTables)],
				backfillSecretUsesPostgres),
		}},
	}
}

var secretUseTables = []string{
	// One row per lease and secret version it uses, dropped once the lease
	// is proven clean. No foreign key to leases: uses are recorded before
	// the lease record is written.
	`CREATE TABLE secret_uses (
		lease_id TEXT NOT NULL,
		secret_id TEXT NOT NULL,
		version BIGINT NOT NULL,
		PRIMARY KEY (lease_id, secret_id, version)
	)`,
	`CREATE INDEX secret_uses_secret ON secret_uses (secret_id, version)`,
	// Secrets (version 0) or versions that no saved config references but
	// a lease still uses.
	`CREATE TABLE secrets_retired (
		secret_id TEXT NOT NULL,
		version BIGINT NOT NULL,
		PRIMARY KEY (secret_id, version)
	)`,
}

// The backfill records the uses of the leases that live when the component
// is created (leases written before berth tracked secret uses): every
// secret reference ({"$secret": ID, "version": N}) in a config field or in
// the values of a map field, as config.Config.SecretRefs finds them.
var (
	backfillSecretUsesSQLite = fmt.Sprintf(`INSERT OR IGNORE INTO secret_uses (lease_id, secret_id, version)
		SELECT l.id, json_extract(f.value, '$."$secret"'), json_extract(f.value, '$.version')
		FROM leases l, json_each(l.config) f
		WHERE l.config IS NOT NULL AND %[1]s AND f.type = 'object' AND json_extract(f.value, '$."$secret"') IS NOT NULL
		UNION
		SELECT l.id, json_extract(m.value, '$."$secret"'), json_extract(m.value, '$.version')
		FROM leases l, json_each(l.config) f, json_each(CASE WHEN f.type = 'object' THEN f.value ELSE '{}' END) m
		WHERE l.config IS NOT NULL AND %[1]s AND m.type = 'object' AND json_extract(m.value, '$."$secret"') IS NOT NULL`, liveSQLFor("l."))
	backfillSecretUsesPostgres = fmt.Sprintf(`INSERT INTO secret_uses (lease_id, secret_id, version)
		SELECT l.id, f.value->>'$secret', (f.value->>'version')::bigint
		FROM leases l, jsonb_each(l.config::jsonb) f
		WHERE l.config IS NOT NULL AND %[1]s AND jsonb_typeof(f.value) = 'object' AND f.value->>'$secret' IS NOT NULL
		UNION
		SELECT l.id, m.value->>'$secret', (m.value->>'version')::bigint
		FROM leases l, jsonb_each(l.config::jsonb) f,
			jsonb_each(CASE WHEN jsonb_typeof(f.value) = 'object' THEN f.value ELSE '{}'::jsonb END) m
		WHERE l.config IS NOT NULL AND %[1]s AND jsonb_typeof(m.value) = 'object' AND m.value->>'$secret' IS NOT NULL
		ON CONFLICT (lease_id, secret_id, version) DO NOTHING`, liveSQLFor("l."))
)

// liveSQLFor is liveSQL with its columns qualified by prefix.
func liveSQLFor(prefix string) string {
	return fmt.Sprintf(`(%[1]sstatus IN ('%[2]s', '%[3]s', '%[4]s', '%[5]s') OR (%[1]sstatus = '%[6]s' AND %[1]sreuse_key IS NOT NULL))`,
		prefix, lease.StatusStarting, lease.StatusActive, lease.StatusRetained, lease.StatusPendingCleanup, lease.StatusReleased)
}
