// Package storetest runs the conformance suite of every berth package's
// store over the fields of one store.Stores: the memory stores
// (store.Memory), store/sqlite and store/postgres pass it.
//
//	storetest.RunStoreTests(t, func(t *testing.T) store.Stores { return freshStores(t) })
//
// Each package owns its suite (environment/environmenttest,
// qualification/qualificationtest, lease/leasetest, handover/handovertest,
// templates/templatestest, workspace/workspacetest, instance/instancetest, and the runner
// protocol's internal/prp/prptest and internal/controller/controllertest:
// Stores.Runners is sealed, and a store of another author sets it from
// store.Memory()); this package only calls them, one subtest per Stores
// field.
package storetest

import (
	"testing"

	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/environment/environmenttest"
	"github.com/berthdev/berth/handover"
	"github.com/berthdev/berth/handover/handovertest"
	"github.com/berthdev/berth/instance"
	"github.com/berthdev/berth/instance/instancetest"
	"github.com/berthdev/berth/internal/controller"
	"github.com/berthdev/berth/internal/controller/controllertest"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/prp/prptest"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/lease/leasetest"
	"github.com/berthdev/berth/qualification"
	"github.com/berthdev/berth/qualification/qualificationtest"
	"github.com/berthdev/berth/store"
	"github.com/berthdev/berth/templates"
	"github.com/berthdev/berth/templates/templatestest"
	"github.com/berthdev/berth/workspace"
	"github.com/berthdev/berth/workspace/workspacetest"
)

// RunStoreTests runs every package's store suite; newStores returns a
// Stores over a fresh, empty database (or fresh memory stores) for each
// subtest, with every field set.
func RunStoreTests(t *testing.T, newStores func(t *testing.T) store.Stores) {
	t.Helper()
	stores := func(t *testing.T) store.Stores {
		t.Helper()
		s := newStores(t)
		if m := s.Missing(); len(m) > 0 {
			t.Fatalf("newStores returned Stores without %v", m)
		}
		return s
	}
	t.Run("Environments", func(t *testing.T) {
		environmenttest.RunStoreTests(t, func(t *testing.T) environment.Store { return stores(t).Environments })
	})
	t.Run("Bindings", func(t *testing.T) {
		environmenttest.RunBindingStoreTests(t, func(t *testing.T) environment.BindingStore { return stores(t).Bindings })
	})
	t.Run("Health", func(t *testing.T) {
		environmenttest.RunHealthStoreTests(t, func(t *testing.T) environment.HealthStore { return stores(t).Health })
	})
	t.Run("SecretUses", func(t *testing.T) {
		environmenttest.RunSecretUseStoreTests(t, func(t *testing.T) environment.SecretUseStore { return stores(t).SecretUses })
	})
	t.Run("Qualifications", func(t *testing.T) {
		qualificationtest.RunStoreTests(t, func(t *testing.T) qualification.Store { return stores(t).Qualifications })
	})
	t.Run("Leases", func(t *testing.T) {
		leasetest.RunStoreTests(t, func(t *testing.T) lease.Store { return stores(t).Leases })
	})
	t.Run("AuthChecks", func(t *testing.T) {
		handovertest.RunStoreTests(t, func(t *testing.T) handover.Store { return stores(t).AuthChecks })
	})
	t.Run("Runners/Tickets", func(t *testing.T) {
		prptest.RunTicketStoreTests(t, func(t *testing.T) prp.TicketStore { return runners(t, stores(t)) })
	})
	t.Run("Runners/Controller", func(t *testing.T) {
		controllertest.RunStoreTests(t, func(t *testing.T) controller.Store { return runners(t, stores(t)) })
	})
	t.Run("Settings", func(t *testing.T) {
		instancetest.RunStoreTests(t, func(t *testing.T) instance.Store { return stores(t).Settings })
	})
	t.Run("Templates", func(t *testing.T) {
		templatestest.RunStoreTests(t, func(t *testing.T) templates.Store { return stores(t).Templates })
	})
	t.Run("Workspaces", func(t *testing.T) {
		workspacetest.RunStoreTests(t, func(t *testing.T) workspace.Store { return stores(t).Workspaces })
	})
}

// runners returns the runner store inside s.Runners (sealed: berth's own).
func runners(t *testing.T, s store.Stores) controller.RunnerStore {
	t.Helper()
	r, ok := s.Runners.(controller.RunnerStore)
	if !ok {
		t.Fatalf("Stores.Runners is %T, not a runner store berth made (store.Memory, store/sqlite, store/postgres)", s.Runners)
	}
	// The store inside the seal, as the controller uses it: the suite
	// tests its optional interfaces (EventBatcher, GroupIntaker) too.
	if u, ok := r.(interface{ UnsealStore() controller.RunnerStore }); ok {
		r = u.UnsealStore()
	}
	return r
}
