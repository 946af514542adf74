package sqlstore

// Qualification is the qualification component: one platform
// qualification record per company and environment (qualification.Store,
// methods in qualification.go).
func (components) Qualification() Component {
	return Component{
		Name: "qualification",
		Migrations: []Migration{{
			Version: 1,
			Name:    "create qualifications",
			SQL: []string{
				// The primary key makes a record company-bound (QUAL-4)
				// and Put an upsert of that one row. The platform is kept
				// field by field so that it round-trips exactly; no
				// foreign key to environments, as the catalog may live
				// in another store.
				`CREATE TABLE qualifications (
					company TEXT NOT NULL,
					environment_id TEXT NOT NULL,
					fingerprint TEXT NOT NULL,
					image TEXT NOT NULL,
					template TEXT NOT NULL,
					platform_os TEXT NOT NULL,
					platform_arch TEXT NOT NULL,
					platform_variant TEXT NOT NULL,
					platform_libc TEXT NOT NULL,
					platform_libc_version TEXT NOT NULL,
					platform_kernel TEXT NOT NULL,
					platform_release_id TEXT NOT NULL,
					platform_release_version TEXT NOT NULL,
					lease_id TEXT NOT NULL,
					recorded_at BIGINT,
					PRIMARY KEY (company, environment_id)
				)`,
				`CREATE INDEX qualifications_environment ON qualifications (environment_id)`,
			},
		}, {
			Version: 2,
			Name:    "qualification invalidation",
			SQL: []string{
				// QUAL-3: a later probe that found the identity gone.
				`ALTER TABLE qualifications ADD COLUMN invalidated_at BIGINT`,
				`ALTER TABLE qualifications ADD COLUMN invalid_reason TEXT NOT NULL DEFAULT ''`,
			},
		}, {
			Version: 3,
			Name:    "qualification isolation",
			SQL: []string{
				// The isolation level the probe measured (issue 56); ''
				// for a record made before it was measured.
				`ALTER TABLE qualifications ADD COLUMN isolation TEXT NOT NULL DEFAULT ''`,
			},
		}, {
			Version: 4,
			Name:    "last tests",
			SQL: []string{
				// The last probe of an environment per company (issue
				// 53), whatever it found; one row, replaced by the next.
				`CREATE TABLE qualification_last_tests (
					company TEXT NOT NULL,
					environment_id TEXT NOT NULL,
					at BIGINT,
					ok BOOLEAN NOT NULL,
					code TEXT NOT NULL,
					message TEXT NOT NULL,
					failing_since BIGINT,
					PRIMARY KEY (company, environment_id)
				)`,
			},
		}},
	}
}
