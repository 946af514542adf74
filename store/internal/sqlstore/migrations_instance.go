package sqlstore

// Instance is the instance settings component (CFG-9): the one settings
// record of the instance (instance.Store, methods in instance.go).
func (components) Instance() Component {
	return Component{
		Name: "instance",
		Migrations: []Migration{{
			Version: 1,
			Name:    "create instance_settings",
			SQL: []string{
				// At most one row (id is always 1); revision makes every
				// write a compare-and-swap (an UPDATE on the revision read,
				// or the INSERT of revision 1 that the primary key lets
				// only one writer make).
				`CREATE TABLE instance_settings (
					id INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
					enable_environments BOOLEAN NOT NULL,
					managed_sandbox_only BOOLEAN NOT NULL,
					revision BIGINT NOT NULL,
					updated_at BIGINT,
					updated_by TEXT NOT NULL
				)`,
			},
		}, {
			Version: 2,
			Name:    "add the lease quotas to instance_settings",
			SQL: []string{
				// A record written before the quotas were settings never
				// set them: it gets the defaults (instance.Defaults).
				`ALTER TABLE instance_settings ADD COLUMN quota_per_company BIGINT NOT NULL DEFAULT 8`,
				`ALTER TABLE instance_settings ADD COLUMN quota_per_company_environment BIGINT NOT NULL DEFAULT 4`,
			},
		}, {
			Version: 3,
			Name:    "add the minimum isolation to instance_settings",
			SQL: []string{
				// drivers.Isolation's name; '' (a record written before)
				// is none, no minimum.
				`ALTER TABLE instance_settings ADD COLUMN minimum_isolation TEXT NOT NULL DEFAULT ''`,
			},
		}},
	}
}
