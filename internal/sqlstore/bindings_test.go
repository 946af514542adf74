package sqlstore

import (
	"testing"

	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/internal/storetest"
	"github.com/berthdev/berth/internal/testenv"
)

func TestBindingStoreSQLite(t *testing.T) {
	t.Parallel()
	storetest.RunBindingStoreTests(t, func(t *testing.T) environment.BindingStore {
		return openTest(t, sqliteURL(t))
	})
}

func TestBindingStorePostgres(t *testing.T) {
	t.Parallel()
	testenv.Postgres(t) // skip or fail once, before the subtests
	storetest.RunBindingStoreTests(t, func(t *testing.T) environment.BindingStore {
		return openTest(t, testenv.Postgres(t))
	})
}
