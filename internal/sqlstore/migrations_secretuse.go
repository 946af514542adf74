package sqlstore

// SecretUse is the secret-use component: which leases use which secret
// versions, and which secrets no saved config references any more
// (environment.SecretUseStore, methods in secretuse.go; CFG-7, LEASE-9).
func (components) SecretUse() Component {
	return Component{
		Name: "secret_use",
		Migrations: []Migration{{
			Version: 1,
			Name:    "create secret_uses and secrets_retired",
			SQL: []string{
				// One row per lease and secret version it uses, dropped
				// once the lease is proven clean. No foreign key to leases:
				// uses are recorded before the lease record is written.
				`CREATE TABLE secret_uses (
					lease_id TEXT NOT NULL,
					secret_id TEXT NOT NULL,
					version BIGINT NOT NULL,
					PRIMARY KEY (lease_id, secret_id, version)
				)`,
				`CREATE INDEX secret_uses_secret ON secret_uses (secret_id, version)`,
				// Secrets (version 0) or versions that no saved config
				// references but a lease still uses.
				`CREATE TABLE secrets_retired (
					secret_id TEXT NOT NULL,
					version BIGINT NOT NULL,
					PRIMARY KEY (secret_id, version)
				)`,
			},
		}},
	}
}
