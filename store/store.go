// Package store names the store of every berth package in one value,
// Stores, that a host hands to berth.New (Options.Stores):
//
//	db, err := sqlite.Open(ctx, "/var/lib/app/berth.db") // or postgres.Open(ctx, "postgres://...")
//	if err != nil { ... }
//	defer db.Close()
//	sys, err := berth.New(ctx, &berth.Options{Stores: db.Stores(), ...})
//
// Each package owns its store interfaces, their memory implementations and
// their conformance suites (environment and environment/environmenttest,
// lease and lease/leasetest, workspace and workspace/workspacetest, ...); this package only names them, so that
// the SQL packages (store/sqlite, store/postgres) and the root package use
// one value without importing each other. A new package's store is a new
// field, which breaks no one: the SQL packages fill it, and Memory does.
// Three are sealed, their records being berth's flows' own: RunnerStore,
// templates.Store and workspace.Store; only berth's stores make them.
//
// store/storetest runs every package's suite over one Stores value.
package store

import (
	"reflect"

	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/handover"
	"github.com/berthdev/berth/instance"
	"github.com/berthdev/berth/internal/controller"
	"github.com/berthdev/berth/internal/envhook"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/prpwire"
	"github.com/berthdev/berth/internal/templatehook"
	"github.com/berthdev/berth/internal/workspacehook"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/qualification"
	"github.com/berthdev/berth/templates"
	"github.com/berthdev/berth/workspace"
)

// Stores holds the store of every berth package. berth.New takes either
// none (the zero value: memory stores for all) or all of them: a Stores
// with some fields set and others nil is refused, naming the nil fields,
// so that a host's durable store never sits beside an in-memory one it did
// not ask for. Fill the fields you keep in memory explicitly from Memory().
type Stores struct {
	// Environments holds the catalog's saved environments.
	Environments environment.Store
	// Bindings holds the assignment bindings of agents, projects,
	// workspaces and the instance default.
	Bindings environment.BindingStore
	// Health holds the provider health last measured.
	Health environment.HealthStore
	// SecretUses tracks which leases use which secret versions.
	SecretUses environment.SecretUseStore
	// Qualifications holds image qualification records.
	Qualifications qualification.Store
	// Leases holds the lease manager's write-ahead records.
	Leases lease.Store
	// AuthChecks holds the project auth checks of managed accounts
	// (AUTH-2).
	AuthChecks handover.Store
	// Runners holds the runner protocol's tickets, sessions, command
	// journal and events (shared by every replica of a SQL store). Only
	// berth's stores make one (RunnerStore): a store of another author
	// sets it from Memory() (runner sessions then live in this process).
	Runners RunnerStore
	// Settings holds the instance settings (CFG-9): whether environments
	// are enabled and whether only managed sandboxes may be targets.
	Settings instance.Store
	// Templates holds the captured templates of environments, the
	// history of their active pointers and the setup sessions (package
	// templates). Sealed: only berth's stores make one.
	Templates templates.Store
	// Workspaces holds the write-ahead records of agents' workspaces:
	// owner, source, lease, checkpoint and the receipt of their end
	// (package workspace). Sealed: only berth's stores make one.
	Workspaces workspace.Store
	// Durable marks stores whose records outlive the process: store/sqlite
	// and store/postgres set it, Memory does not. berth.New then refuses
	// to keep the secrets of configs in memory (Options.Secrets): a lease
	// whose cleanup needs a credential could not be released or swept
	// after a restart. The zero value (false) claims nothing.
	Durable bool
}

// RunnerStore is the store of berth's runner protocol: its one-use
// tickets and the runner controller's sessions, command journal and
// events. Its records are the protocol's own wire records, which change
// with the protocol, so it is sealed: only berth's stores implement it
// (Memory's, store/sqlite's and store/postgres's Stores().Runners), and a
// host passes the one its store constructor returns.
type RunnerStore interface {
	runnerStore()
}

// sealedRunners is the one implementation of RunnerStore: berth's own
// runner store inside (berth.New reads it back).
type sealedRunners struct{ controller.RunnerStore }

func (sealedRunners) runnerStore() {}

// UnsealStore returns the store inside: the controller uses it unwrapped,
// so that its optional interfaces (controller.EventBatcher) are seen.
func (s sealedRunners) UnsealStore() controller.RunnerStore { return s.RunnerStore }

func init() {
	controller.SealStore = func(s controller.RunnerStore) any { return sealedRunners{s} }
}

// Missing returns the names of the nil store fields of s ("Leases", ...),
// in field order; none is nil. A store field added to Stores is covered
// without editing Missing; Durable is no store and never listed.
func (s Stores) Missing() []string {
	var out []string
	v := reflect.ValueOf(s)
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.Interface && f.IsNil() {
			out = append(out, v.Type().Field(i).Name)
		}
	}
	return out
}

// Memory returns a Stores of new, empty memory stores: each package's own.
// Their contents live as long as the values, in this process only.
func Memory() Stores {
	return Stores{
		Environments:   envhook.NewMemoryStore().(environment.Store),
		Bindings:       envhook.NewMemoryBindingStore().(environment.BindingStore),
		Health:         envhook.NewMemoryHealthStore().(environment.HealthStore),
		SecretUses:     envhook.NewMemorySecretUseStore().(environment.SecretUseStore),
		Qualifications: qualification.NewMemoryStore(),
		Leases:         lease.NewMemoryStore(),
		AuthChecks:     handover.NewMemoryStore(),
		Runners:        newMemoryRunnerStore(),
		Settings:       instance.NewMemoryStore(),
		Templates:      templatehook.NewMemoryStore().(templates.Store),
		Workspaces:     workspacehook.NewMemoryStore().(workspace.Store),
	}
}

// newMemoryRunnerStore returns an empty memory RunnerStore: the runner
// protocol's memory ticket store and the controller's memory store.
func newMemoryRunnerStore() RunnerStore {
	return sealedRunners{memoryRunners{prpwire.NewMemoryTicketStore(), controller.NewMemoryStore()}}
}

type memoryRunners struct {
	prp.TicketStore
	controller.Store
}
