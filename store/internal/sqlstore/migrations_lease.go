package sqlstore

// Lease is the lease component: the lease manager's records
// (lease.Store, methods in lease.go).
func (components) Lease() Component {
	return Component{
		Name: "lease",
		Migrations: []Migration{{
			Version: 1,
			Name:    "create leases",
			SQL: []string{
				// Times are UTC Unix nanoseconds (NULL for none), config,
				// labels and metadata JSON TEXT. reuse_key and run_key are
				// NULL while the lease holds no key; claimed_by is "" for
				// no claim. No foreign key to environments: leases outlive
				// a deleted environment until their cleanup is proven.
				`CREATE TABLE leases (
					id TEXT NOT NULL PRIMARY KEY,
					company TEXT NOT NULL,
					environment_id TEXT NOT NULL,
					workspace TEXT NOT NULL,
					run TEXT NOT NULL,
					status TEXT NOT NULL,
					policy TEXT NOT NULL,
					provider TEXT NOT NULL,
					provider_lease_id TEXT NOT NULL,
					acquired_at BIGINT,
					last_used_at BIGINT,
					expires_at BIGINT,
					released_at BIGINT,
					failure_reason TEXT NOT NULL,
					cleanup TEXT NOT NULL,
					cleanup_disposition INTEGER NOT NULL,
					after_cleanup TEXT NOT NULL,
					cleanup_attempts INTEGER NOT NULL,
					cleanup_evidence TEXT NOT NULL,
					fingerprint TEXT NOT NULL,
					reuse_key TEXT,
					run_key TEXT,
					replaces TEXT NOT NULL,
					replace_reason TEXT NOT NULL,
					uses INTEGER NOT NULL,
					config TEXT,
					labels TEXT,
					metadata TEXT,
					claimed_by TEXT NOT NULL,
					claimed_until BIGINT,
					version BIGINT NOT NULL
				)`,
				// At most one lease holds a reuse key, and one a run key,
				// atomically across processes and replicas (LEASE-8,
				// LEASE-10): the partial unique indexes decide between
				// concurrent inserts and updates.
				`CREATE UNIQUE INDEX leases_reuse_key ON leases (reuse_key) WHERE reuse_key IS NOT NULL`,
				`CREATE UNIQUE INDEX leases_run_key ON leases (run_key) WHERE run_key IS NOT NULL`,
				`CREATE INDEX leases_status ON leases (status)`,
				`CREATE INDEX leases_environment ON leases (environment_id)`,
				`CREATE INDEX leases_provider_lease_id ON leases (provider_lease_id)`,
				`CREATE INDEX leases_acquired ON leases (acquired_at, id)`,
			},
		}, {
			Version: 2,
			Name:    "host lease holders",
			SQL: []string{
				// The manager holding a host lease's live session, and
				// until when its heartbeat-renewed claim lasts.
				`ALTER TABLE leases ADD COLUMN holder TEXT NOT NULL DEFAULT ''`,
				`ALTER TABLE leases ADD COLUMN holder_until BIGINT`,
			},
		}, {
			Version: 3,
			Name:    "draft leases, retention and live-lease indexes",
			SQL: []string{
				// The lease of a draft probe: removed once its cleanup is
				// proven (PRB-4).
				`ALTER TABLE leases ADD COLUMN draft BOOLEAN NOT NULL DEFAULT FALSE`,
				// Sweeps and usage reads select by status (and, for
				// stopped resumable leases, the reuse key): these indexes
				// let them read the live leases only, never the history of
				// released, expired and failed ones.
				`CREATE INDEX leases_status_reuse ON leases (status, reuse_key)`,
				`CREATE INDEX leases_environment_status ON leases (environment_id, status, reuse_key)`,
				// PruneAfter prunes ended leases by release time.
				`CREATE INDEX leases_status_released ON leases (status, released_at)`,
			},
		}, {
			Version: 4,
			Name:    "cleanup evidence kinds",
			SQL: []string{
				// What a confirmed cleanup stands on (PRP-6, LEASE-7):
				// provider, cgroup or tag_scan; '' for none (kept, or
				// recorded before this migration: its text says which).
				`ALTER TABLE leases ADD COLUMN cleanup_evidence_kind TEXT NOT NULL DEFAULT ''`,
			},
		}, {
			Version: 5,
			Name:    "runner binaries of leases",
			SQL: []string{
				// The runner binary the sandbox was acquired for
				// (lease.Lease.Runner) as JSON TEXT; NULL for none (a lease
				// without a runner, or recorded before this migration).
				`ALTER TABLE leases ADD COLUMN runner TEXT`,
			},
		}, {
			Version: 6,
			Name:    "drop lease indexes that longer ones lead with",
			SQL: []string{
				// leases_status_reuse and leases_status_released lead with
				// status, leases_environment_status with environment_id:
				// every search these two served the longer ones serve, and
				// each lease write kept two indexes fewer up to date (a
				// status change touched four indexes, now three; issue 29).
				`DROP INDEX IF EXISTS leases_status`,
				`DROP INDEX IF EXISTS leases_environment`,
			},
		}, {
			Version: 7,
			Name:    "warm pool members",
			SQL: []string{
				// Warm-pool members (status pooled, issue 31): adoption
				// picks the oldest member of an environment with a
				// fingerprint; the partial index holds the members only,
				// so it costs no write on any other lease.
				`CREATE INDEX leases_pooled ON leases (environment_id, fingerprint, acquired_at, id) WHERE status = 'pooled'`,
			},
		}, {
			Version: 8,
			Name:    "lease indexes that state changes rewrite least",
			SQL: []string{
				// Every index holding status took two page writes on each
				// status change (the entry moved between statuses), three
				// such indexes made most of a lease cycle's writes, and
				// '' provider ids filled one more (issue 29). The live and
				// ended leases are now each in a partial index keyed by
				// what does not change: a status change within the live
				// statuses rewrites one entry in place, and a lease leaves
				// the live index and enters the ended one once. Their
				// predicates are liveSQL and endedSQL (lease.go) verbatim,
				// and the queries carry those terms, so that SQLite's and
				// PostgreSQL's planners can use them.
				`DROP INDEX IF EXISTS leases_status_reuse`,
				`DROP INDEX IF EXISTS leases_environment_status`,
				`DROP INDEX IF EXISTS leases_status_released`,
				`DROP INDEX IF EXISTS leases_provider_lease_id`,
				`CREATE INDEX leases_live ON leases (environment_id) WHERE (status IN ('starting', 'active', 'retained', 'pending_cleanup', 'pooled') OR (status = 'released' AND reuse_key IS NOT NULL))`,
				`CREATE INDEX leases_ended ON leases (released_at) WHERE (status IN ('expired', 'failed') OR (status = 'released' AND reuse_key IS NULL))`,
				`CREATE INDEX leases_provider_id ON leases (provider_lease_id) WHERE provider_lease_id <> ''`,
				// Listings of one environment's history read their leases
				// in order; the whole history, read whole anyway, is
				// sorted instead. Its columns never change once written.
				`DROP INDEX IF EXISTS leases_acquired`,
				`CREATE INDEX leases_environment_acquired ON leases (environment_id, acquired_at, id)`,
			},
		}},
	}
}
