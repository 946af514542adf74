package sqlstore

import (
	"testing"

	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/internal/storetest"
	"github.com/berthdev/berth/internal/testenv"
)

func TestEnvironmentStoreSQLite(t *testing.T) {
	t.Parallel()
	storetest.RunEnvironmentStoreTests(t, func(t *testing.T) environment.Store {
		return openTest(t, sqliteURL(t))
	})
}

func TestEnvironmentStoreSQLiteMemory(t *testing.T) {
	t.Parallel()
	storetest.RunEnvironmentStoreTests(t, func(t *testing.T) environment.Store {
		return openTest(t, "sqlite::memory:")
	})
}

func TestEnvironmentStorePostgres(t *testing.T) {
	t.Parallel()
	testenv.Postgres(t) // skip or fail once, before the subtests
	storetest.RunEnvironmentStoreTests(t, func(t *testing.T) environment.Store {
		return openTest(t, testenv.Postgres(t))
	})
}
