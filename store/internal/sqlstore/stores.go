package sqlstore

import (
	"github.com/berthdev/berth/internal/controller"
	"github.com/berthdev/berth/internal/templatehook"
	"github.com/berthdev/berth/internal/workspacehook"
	"github.com/berthdev/berth/store"
	"github.com/berthdev/berth/templates"
	"github.com/berthdev/berth/workspace"
)

// Stores returns db as the store of every berth package: one database
// serves them all, and replicas opening it share every record (the runner
// protocol's tickets, sessions and journal included). Durable is set.
func (db *DB) Stores() store.Stores {
	return store.Stores{
		Environments:   db,
		Bindings:       db,
		Health:         db,
		SecretUses:     db,
		Qualifications: db,
		Leases:         db,
		AuthChecks:     db,
		Runners:        controller.SealStore(db.PRP()).(store.RunnerStore),
		Settings:       db,
		Templates:      templatehook.Seal(db).(templates.Store),
		Workspaces:     workspacehook.Seal(db).(workspace.Store),
		Durable:        true,
	}
}
