package sqlstore

// Environment is the environment component: the catalog's records
// (environment.Store, methods in environment.go).
func (components) Environment() Component {
	return Component{
		Name: "environment",
		Migrations: []Migration{{
			Version: 1,
			Name:    "create environments",
			SQL: []string{
				`CREATE TABLE environments (
					id TEXT NOT NULL PRIMARY KEY,
					name TEXT NOT NULL,
					description TEXT NOT NULL,
					driver TEXT NOT NULL,
					status TEXT NOT NULL,
					config TEXT,
					env TEXT,
					metadata TEXT,
					revision BIGINT NOT NULL,
					created_at BIGINT,
					updated_at BIGINT,
					created_by TEXT NOT NULL,
					updated_by TEXT NOT NULL,
					exclusive_key TEXT
				)`,
				// One name per instance (CFG-1).
				`CREATE UNIQUE INDEX environments_name_key ON environments (name)`,
				// exclusive_key is the driver of an environment created
				// exclusively (Store.CreateEnvironment) and NULL otherwise;
				// NULLs are distinct, so the index admits one exclusive
				// environment per driver, atomically across processes
				// (CFG-4).
				`CREATE UNIQUE INDEX environments_exclusive_key ON environments (exclusive_key)`,
				`CREATE INDEX environments_driver ON environments (driver)`,
			},
		}, {
			Version: 2,
			Name:    "add environments.active_template",
			SQL: []string{
				// The active template pointer (IMG-6, package templates): JSON
				// {id, identity, sourceFingerprint}, NULL for none. It
				// changes only with the revision (CFG-6).
				`ALTER TABLE environments ADD COLUMN active_template TEXT`,
			},
		}, {
			Version: 3,
			Name:    "add environments.pool",
			SQL: []string{
				// The warm pool setting (environment.Pool): JSON {size,
				// maxAge, runner}, NULL for none. A knob: it changes with
				// the revision like any field (CFG-6).
				`ALTER TABLE environments ADD COLUMN pool TEXT`,
			},
		}, {
			Version: 4,
			Name:    "add environments.require_isolation",
			SQL: []string{
				// environment.Environment.RequireIsolation: the name of a
				// drivers.Isolation, '' for none (no requirement). A
				// policy: it changes with the revision like any field.
				`ALTER TABLE environments ADD COLUMN require_isolation TEXT NOT NULL DEFAULT ''`,
			},
		}},
	}
}
