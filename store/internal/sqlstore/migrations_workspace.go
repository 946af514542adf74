package sqlstore

// Workspace is the workspace records component (workspace.Store, methods
// in workspace.go).
func (components) Workspace() Component {
	return Component{
		Name: "workspace",
		Migrations: []Migration{{
			Version: 1,
			Name:    "create workspaces",
			SQL: []string{
				// doc is the record's JSON (no credential: a source is
				// refused with one); the columns beside it are what queries
				// select and order by, and the revision updates check. live
				// is 1 until the record ends: the partial unique index is
				// the one-live-record-per-owner's-key rule, so two replicas
				// on one database cannot both prepare one key.
				`CREATE TABLE workspaces (
					id TEXT NOT NULL PRIMARY KEY,
					company TEXT NOT NULL,
					project TEXT NOT NULL,
					ws_key TEXT NOT NULL,
					lease TEXT NOT NULL,
					state TEXT NOT NULL,
					live INTEGER NOT NULL,
					created_at BIGINT,
					revision BIGINT NOT NULL,
					doc TEXT NOT NULL
				)`,
				`CREATE UNIQUE INDEX workspaces_one_live ON workspaces (company, project, ws_key) WHERE live = 1`,
				`CREATE INDEX workspaces_owner ON workspaces (company, project, created_at)`,
				`CREATE INDEX workspaces_lease ON workspaces (lease)`,
				`CREATE INDEX workspaces_state ON workspaces (state, created_at)`,
			},
		}},
	}
}
