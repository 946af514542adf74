package sqlstore

// Templates is the custom images component (templates.Store, methods
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
		}, {
			Version: 2,
			Name:    "create setup_sessions, setup_session_events and setup_terminal_tokens",
			SQL: []string{
				// doc is the session's JSON (no secret: scripts are not
				// stored, only their content hash). active is 1 while the
				// session is starting, waiting_for_user or capturing; the
				// partial unique index is the one-active-session-per-
				// environment rule, so two replicas on one database cannot
				// both start one (IMG-4).
				`CREATE TABLE setup_sessions (
					id TEXT NOT NULL PRIMARY KEY,
					environment TEXT NOT NULL,
					active INTEGER NOT NULL,
					created_at BIGINT,
					version BIGINT NOT NULL,
					doc TEXT NOT NULL
				)`,
				`CREATE UNIQUE INDEX setup_sessions_one_active ON setup_sessions (environment) WHERE active = 1`,
				`CREATE INDEX setup_sessions_environment ON setup_sessions (environment, created_at)`,
				// Progress events, append-only; seq is the reader's cursor.
				`CREATE TABLE setup_session_events (
					session TEXT NOT NULL,
					seq BIGINT NOT NULL,
					doc TEXT NOT NULL,
					PRIMARY KEY (session, seq)
				)`,
				// Terminal tokens by their hash (the token itself is never
				// stored); used turns 1 once, in the redeeming UPDATE.
				`CREATE TABLE setup_terminal_tokens (
					hash TEXT NOT NULL PRIMARY KEY,
					expires_at BIGINT NOT NULL,
					used INTEGER NOT NULL,
					doc TEXT NOT NULL
				)`,
			},
		}, {
			Version: 3,
			Name:    "bind setup_terminal_tokens to their principal and path in columns",
			// The redeeming UPDATE matches the principal, its role and the
			// path, so a token presented by anyone else is not used up
			// (issue 51). Rows of before are filled from their documents.
			SQL: []string{
				`ALTER TABLE setup_terminal_tokens ADD COLUMN principal TEXT NOT NULL DEFAULT ''`,
				`ALTER TABLE setup_terminal_tokens ADD COLUMN role TEXT NOT NULL DEFAULT ''`,
				`ALTER TABLE setup_terminal_tokens ADD COLUMN path TEXT NOT NULL DEFAULT ''`,
				`UPDATE setup_terminal_tokens SET principal = COALESCE(json_extract(doc, '$.principal'), ''),
					role = COALESCE(json_extract(doc, '$.role'), ''), path = COALESCE(json_extract(doc, '$.path'), '')`,
			},
			Postgres: []string{
				`ALTER TABLE setup_terminal_tokens ADD COLUMN principal TEXT NOT NULL DEFAULT ''`,
				`ALTER TABLE setup_terminal_tokens ADD COLUMN role TEXT NOT NULL DEFAULT ''`,
				`ALTER TABLE setup_terminal_tokens ADD COLUMN path TEXT NOT NULL DEFAULT ''`,
				`UPDATE setup_terminal_tokens SET principal = COALESCE(doc::jsonb->>'principal', ''),
					role = COALESCE(doc::jsonb->>'role', ''), path = COALESCE(doc::jsonb->>'path', '')`,
			},
		}},
	}
}
