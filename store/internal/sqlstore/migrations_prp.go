package sqlstore

// PRP is the runner protocol component: bootstrap tickets (prp.TicketStore)
// and the controller's sessions, command journal and event metadata
// (controller.Store), methods in prp.go.
func (components) PRP() Component {
	return Component{
		Name: "prp",
		Migrations: []Migration{{
			Version: 1,
			Name:    "create prp tickets, sessions, commands and events",
			SQL: []string{
				// A ticket is stored only as its hash (PRP-2); the exchange
				// sets used_at and session in one conditional UPDATE.
				`CREATE TABLE prp_tickets (
					hash TEXT NOT NULL PRIMARY KEY,
					lease TEXT NOT NULL,
					run TEXT NOT NULL,
					company TEXT NOT NULL,
					scope TEXT NOT NULL,
					created_at BIGINT NOT NULL,
					expires_at BIGINT NOT NULL,
					used_at BIGINT,
					session TEXT
				)`,
				`CREATE TABLE prp_sessions (
					id TEXT NOT NULL PRIMARY KEY,
					lease TEXT NOT NULL,
					run TEXT NOT NULL,
					company TEXT NOT NULL,
					scope TEXT NOT NULL,
					created_at BIGINT NOT NULL
				)`,
				// The command journal: contiguous seq and unique ids per
				// session (PRP-4); command is the sealed command's JSON.
				`CREATE TABLE prp_commands (
					session TEXT NOT NULL,
					seq BIGINT NOT NULL,
					id TEXT NOT NULL,
					digest TEXT NOT NULL,
					command TEXT NOT NULL,
					state TEXT NOT NULL,
					result TEXT,
					created_at BIGINT NOT NULL,
					updated_at BIGINT NOT NULL,
					PRIMARY KEY (session, seq)
				)`,
				`CREATE UNIQUE INDEX prp_commands_id ON prp_commands (session, id)`,
				// Event metadata, idempotent on (session, seq) (PRP-5);
				// output bytes live in the output sink, ref locates them.
				`CREATE TABLE prp_events (
					session TEXT NOT NULL,
					seq BIGINT NOT NULL,
					event TEXT NOT NULL,
					ref TEXT,
					stored_at BIGINT NOT NULL,
					PRIMARY KEY (session, seq)
				)`,
			},
		}, {
			Version: 2,
			Name:    "prp sessions by lease",
			SQL: []string{
				// A lease's cleanup stops the tasks of every session of
				// the lease (controller.Store.LeaseSessions).
				`CREATE INDEX prp_sessions_lease ON prp_sessions (lease, created_at)`,
			},
		}, {
			Version: 3,
			Name:    "prp secrets delivered at most once per command",
			SQL: []string{
				// ClaimSecrets sets it in one conditional UPDATE (NULL
				// until the values of the command's secrets went out).
				`ALTER TABLE prp_commands ADD COLUMN secrets_sent_at BIGINT`,
			},
		}, {
			Version: 4,
			Name:    "prp output accounting per session and task",
			SQL: []string{
				// controller.Store.OutputUsage: task '' holds the
				// session's totals, whose seq also acks discarded events.
				`CREATE TABLE prp_output_usage (
					session TEXT NOT NULL,
					task TEXT NOT NULL,
					seq BIGINT NOT NULL,
					bytes BIGINT NOT NULL,
					events BIGINT NOT NULL,
					truncated BIGINT NOT NULL,
					discarded BIGINT NOT NULL,
					PRIMARY KEY (session, task)
				)`,
			},
		}, {
			Version: 5,
			Name:    "prp resume tickets, holder sessions and live connections",
			SQL: []string{
				// A resume ticket rejoins an existing session (resume); a
				// holder ticket was minted through the lease holder's
				// Attach, and so is the session it creates.
				`ALTER TABLE prp_tickets ADD COLUMN resume TEXT`,
				`ALTER TABLE prp_tickets ADD COLUMN holder BOOLEAN NOT NULL DEFAULT FALSE`,
				`ALTER TABLE prp_sessions ADD COLUMN ticket TEXT`,
				`ALTER TABLE prp_sessions ADD COLUMN holder BOOLEAN NOT NULL DEFAULT FALSE`,
				// The session's one live connection (any replica) and the
				// expiry of its claim, renewed by its heartbeats.
				`ALTER TABLE prp_sessions ADD COLUMN conn TEXT`,
				`ALTER TABLE prp_sessions ADD COLUMN conn_until BIGINT`,
			},
		}},
	}
}
