package sqlstore

// Health is the provider health component: the last measured health of
// each provider endpoint (environment.HealthStore, methods in health.go).
func (components) Health() Component {
	return Component{
		Name: "health",
		Migrations: []Migration{{
			Version: 1,
			Name:    "create provider_health",
			SQL: []string{
				// One row per driver and endpoint: the next measurement
				// replaces it (CAP-3).
				`CREATE TABLE provider_health (
					driver TEXT NOT NULL,
					endpoint TEXT NOT NULL,
					available BOOLEAN NOT NULL,
					code TEXT NOT NULL,
					reason TEXT NOT NULL,
					checked_at BIGINT NOT NULL,
					PRIMARY KEY (driver, endpoint)
				)`,
			},
		}},
	}
}
