// Package sqlstore is the core of berth's durable stores: one *DB that
// implements every package's Store interface on SQLite (modernc.org/sqlite,
// pure Go) or PostgreSQL (pgx through database/sql), with one SQL code
// path. Hosts use it through store/sqlite and store/postgres, which
// register their database/sql driver, call Open and hand out DB.Stores
// (stores.go); this package names no driver, so a host links only the
// one of the dialect it imports. Driver errors are classified by the
// methods they have (dialect.go), and the one pgx type the core needs to
// know (a failed connection attempt) comes from store/postgres through
// Options.ConnectFailed.
//
// Start with Open (db.go). The rest, by concern:
//
//   - db.go: URLs, connection pools, Close, Ping.
//   - stores.go: the store.Stores value of a DB.
//   - dialect.go: the dialect layer (placeholders, FOR UPDATE, collation,
//     unique-violation and retry classification) and the query helpers
//     every component uses: db.reads(), db.writes(), db.inTx.
//   - codec.go: column conventions for times and JSON.
//   - migrate.go: components, migrations, schema_migrations.
//   - migrations_<component>.go + <component>.go: one component each
//     (migrations_environment.go and environment.go implement
//     environment.Store).
//
// # Connections
//
// SQLite files run in WAL mode with busy_timeout 10 s, foreign keys on and
// synchronous=NORMAL. Writes and transactions go through a pool of ONE
// connection whose transactions start with BEGIN IMMEDIATE: writers of one
// process queue in Go, writers of other processes are waited for by
// busy_timeout, and a transaction never fails half-way on a lock upgrade.
// Reads outside transactions use a separate pool of read-only connections.
// Statements the handles run outside transactions on SQLite are prepared
// once per pool and kept (stmtcache.go); pgx keeps PostgreSQL's itself.
// PostgreSQL uses one pool for both; transactions run at READ COMMITTED.
// When PostgreSQL drops connections (a restart, a failover,
// pg_terminate_backend), a statement or transaction that fails on a dead
// connection, before the server ran it, is run again on a new connection
// (at most a few times, honouring ctx; see deadConn); constraint errors,
// conflicts and errors after a statement was sent are never retried.
//
// # Adding a component (lease, qualification, custom_images, ...)
//
// A component is the tables of one package. Adding one touches no existing
// file; create two files in this package:
//
// 1. migrations_<component>.go declares its schema as a method of the
// unexported type components. Every exported method of components that
// returns a Component is picked up by Open (by reflection: no init(), no
// global registry, no shared list to edit):
//
//	func (components) Lease() Component {
//		return Component{
//			Name:  "lease",                 // key in schema_migrations; lower case
//			After: []string{"environment"}, // only if you reference its tables
//			Migrations: []Migration{{
//				Version: 1, Name: "create leases",
//				SQL: []string{
//					`CREATE TABLE leases (id TEXT NOT NULL PRIMARY KEY, ..., created_at BIGINT)`,
//					`CREATE INDEX leases_state ON leases (state)`,
//				},
//			}},
//		}
//	}
//
// Versions count 1, 2, 3, ... per component. A released migration is never
// edited: add Version n+1. Write SQL that both databases accept (TEXT,
// BIGINT, INTEGER, UNIQUE and partial indexes); where they differ, give the
// PostgreSQL statements in Migration.Postgres. Open applies all pending
// migrations of all components in one transaction, under a PostgreSQL
// advisory lock (so replicas opening at once are safe), records each in
// schema_migrations(component, version), and refuses a database whose
// component is newer than the binary.
//
// 2. <component>.go implements the package's Store interface with methods
// on *DB (add `var _ lease.Store = (*DB)(nil)`), following environment.go:
//
//   - method names carry the record's name (CreateLease, GetLease, not
//     Create, Get): one *DB serves every package's Store interface
//     (stores.go hands it out as each store.Stores field);
//   - write queries once, with ? placeholders; the handles rebind them;
//   - reads outside a transaction: db.reads().query/queryRow;
//   - a single-statement write: db.writes().exec;
//   - anything that reads then writes: db.inTx(ctx, func(tx handle) error
//     {...}) and use only tx inside (on SQLite the writer pool has one
//     connection: using db inside fn deadlocks). Lock rows you will change
//     with "SELECT ... WHERE id = ?" + db.d.forUpdate(). fn may run again
//     after a PostgreSQL serialization failure or deadlock;
//   - optimistic updates in one statement: UPDATE ... WHERE id = ? AND
//     revision = ?, and when no row changed, read the row in a second query
//     to tell not-found from conflict (see changedOne);
//   - uniqueness and "at most one" rules as UNIQUE indexes (NULLs are
//     distinct on both databases), mapped with uniqueViolation to your
//     package's ErrConflict;
//   - times as BIGINT UTC Unix nanoseconds (nanos/fromNanos), maps and
//     structs as JSON TEXT (jsonText/fromJSONText); ORDER BY text columns
//     with db.d.collateC() so that order matches Go's;
//   - errors start with "sqlstore: ", name the record, and wrap the
//     package's sentinels; they never contain secret values.
//
// A new package's store is a new store.Stores field, set in stores.go; its
// conformance suite lives in the package (<pkg>/<pkg>test, RunStoreTests)
// and store/storetest runs it over every Stores, so store/sqlite and
// store/postgres run it on SQLite and PostgreSQL without a test here.
// Tests of this package get a fresh PostgreSQL database from
// testenv.Postgres(t) and pass TestOptions to Open.
//
// # Upgrades
//
// testdata/upgrade holds a SQLite file and a PostgreSQL dump written by
// the code before the store per package (see its README);
// TestUpgradeFromFixtures migrates copies and reads every row back, and
// TestUpgradedSchemaPassesTheSuites runs every store suite on them.
package sqlstore
