package sqlstore

// Bindings is the assignment component: the bindings of workspaces,
// projects, agents and the instance default to environments
// (environment.BindingStore, methods in bindings.go).
func (components) Bindings() Component {
	return Component{
		Name: "bindings",
		Migrations: []Migration{{
			Version: 1,
			Name:    "create environment_bindings",
			SQL: []string{
				// One binding per kind and key in an instance (ASG-1; per
				// kind, company and key since version 2);
				// binding_key is "" for the instance default. No foreign
				// key to environments: the binding store may live apart
				// from the catalog's, and environment.Assignments keeps
				// them consistent (ASG-5).
				`CREATE TABLE environment_bindings (
					kind TEXT NOT NULL,
					binding_key TEXT NOT NULL,
					company TEXT NOT NULL,
					environment_id TEXT NOT NULL,
					revision BIGINT NOT NULL,
					created_at BIGINT,
					updated_at BIGINT,
					created_by TEXT NOT NULL,
					updated_by TEXT NOT NULL,
					PRIMARY KEY (kind, binding_key)
				)`,
				`CREATE INDEX environment_bindings_environment ON environment_bindings (environment_id)`,
				`CREATE INDEX environment_bindings_company ON environment_bindings (company)`,
			},
		}, {
			Version: 2,
			Name:    "key environment_bindings by kind, company and key",
			SQL: []string{
				// Binding keys are per company (issue 51): two companies
				// may each bind workspace "ws". The instance default has
				// company and key "", so there is still one. Every row is
				// copied as it is (each already had its company).
				`CREATE TABLE environment_bindings_v2 (
					kind TEXT NOT NULL,
					binding_key TEXT NOT NULL,
					company TEXT NOT NULL,
					environment_id TEXT NOT NULL,
					revision BIGINT NOT NULL,
					created_at BIGINT,
					updated_at BIGINT,
					created_by TEXT NOT NULL,
					updated_by TEXT NOT NULL,
					PRIMARY KEY (kind, company, binding_key)
				)`,
				`INSERT INTO environment_bindings_v2 (kind, binding_key, company, environment_id, revision,
					created_at, updated_at, created_by, updated_by)
					SELECT kind, binding_key, company, environment_id, revision,
					created_at, updated_at, created_by, updated_by FROM environment_bindings`,
				`DROP TABLE environment_bindings`,
				`ALTER TABLE environment_bindings_v2 RENAME TO environment_bindings`,
				`CREATE INDEX environment_bindings_environment ON environment_bindings (environment_id)`,
				`CREATE INDEX environment_bindings_company ON environment_bindings (company)`,
			},
		}},
	}
}
