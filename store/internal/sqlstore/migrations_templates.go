package sqlstore

// Templates is the custom images component (images/custom.Store, methods
// in templates.go): captured templates and the append-only history of the
// environments' active pointers.
func (components) Templates() Component {
	return Component{
		Name: "templates",
		Migrations: []Migration{{
			Version: 1,
			Name:    "create templates and template_events",
			SQL: []string{
				// doc is the template's JSON; the columns beside it are what
				// queries select and order by, and the version the updates
				// check. No column holds a secret.
				`CREATE TABLE templates (
					id TEXT NOT NULL PRIMARY KEY,
					environment TEXT NOT NULL,
					created_at BIGINT,
					delete_wanted INTEGER NOT NULL,
					version BIGINT NOT NULL,
					doc TEXT NOT NULL
				)`,
				`CREATE INDEX templates_environment ON templates (environment, created_at)`,
				`CREATE INDEX templates_delete_wanted ON templates (delete_wanted) WHERE delete_wanted = 1`,
				// Append-only: rows are inserted, never updated.
				`CREATE TABLE template_events (
					environment TEXT NOT NULL,
					seq BIGINT NOT NULL,
					doc TEXT NOT NULL,
					PRIMARY KEY (environment, seq)
				)`,
			},
		}},
	}
}
