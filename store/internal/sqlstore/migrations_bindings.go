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
				// One binding per kind and key in an instance (ASG-1);
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
		}},
	}
}
