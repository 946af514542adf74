package berth_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/handover"
	"github.com/berthdev/berth/handover/handovertest"
	"github.com/berthdev/berth/internal/storetest"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/lease/leasetest"
	"github.com/berthdev/berth/qualification"
	"github.com/berthdev/berth/qualification/qualificationtest"
)

// TestStores runs every package's store conformance suite against the two
// stores the root package hands out: the in-memory one and a SQLite file.
// (PostgreSQL runs the same suites in internal/sqlstore.)
func TestStores(t *testing.T) {
	opens := map[string]func(t *testing.T) berth.Store{
		"memory": func(*testing.T) berth.Store { return berth.NewMemoryStore() },
		"sqlite": func(t *testing.T) berth.Store {
			st, err := berth.OpenStore(context.Background(), "sqlite://"+filepath.Join(t.TempDir(), "berth.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return st
		},
	}
	for name, open := range opens {
		t.Run(name, func(t *testing.T) {
			t.Run("environment", func(t *testing.T) {
				storetest.RunEnvironmentStoreTests(t, func(t *testing.T) environment.Store { return open(t) })
			})
			t.Run("health", func(t *testing.T) {
				storetest.RunHealthStoreTests(t, func(t *testing.T) environment.HealthStore { return open(t) })
			})
			t.Run("secret uses", func(t *testing.T) {
				storetest.RunSecretUseStoreTests(t, func(t *testing.T) environment.SecretUseStore { return open(t) })
			})
			t.Run("bindings", func(t *testing.T) {
				storetest.RunBindingStoreTests(t, func(t *testing.T) environment.BindingStore { return open(t) })
			})
			t.Run("qualification", func(t *testing.T) {
				qualificationtest.RunStoreTests(t, func(t *testing.T) qualification.Store { return open(t) })
			})
			t.Run("lease", func(t *testing.T) {
				leasetest.RunStoreTests(t, func(t *testing.T) lease.Store { return open(t) })
			})
			t.Run("handover", func(t *testing.T) {
				handovertest.RunStoreTests(t, func(t *testing.T) handover.Store { return open(t) })
			})
		})
	}
}
