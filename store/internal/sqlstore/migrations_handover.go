package sqlstore

// Handover is the project auth check component (AUTH-2): one record per
// company and managed-account reference (handover.Store, methods in
// handover.go).
func (components) Handover() Component {
	return Component{
		Name: "handover",
		Migrations: []Migration{{
			Version: 1,
			Name:    "create auth_checks",
			SQL: []string{
				// A new preparation replaces the row of its key; an answer
				// is stored only for the preparation it answers. No column
				// holds a secret value: account_ref and provider_account
				// are references.
				`CREATE TABLE auth_checks (
					company TEXT NOT NULL,
					account_ref TEXT NOT NULL,
					version BIGINT NOT NULL,
					status TEXT NOT NULL,
					fingerprint TEXT NOT NULL,
					provider_driver TEXT NOT NULL,
					provider_account TEXT NOT NULL,
					projects TEXT NOT NULL,
					environment TEXT NOT NULL,
					preparation TEXT NOT NULL,
					prepared_at BIGINT,
					prepared_by TEXT NOT NULL,
					checked_at BIGINT,
					checked_by TEXT NOT NULL,
					message TEXT NOT NULL,
					PRIMARY KEY (company, account_ref)
				)`,
			},
		}},
	}
}
