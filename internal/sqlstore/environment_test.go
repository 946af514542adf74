package sqlstore

import (
	"testing"

	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/internal/storetest"
)

func TestEnvironmentStore(t *testing.T) {
	t.Parallel()
	eachDatabase(t, false, func(t *testing.T, url func(*testing.T) string) {
		storetest.RunEnvironmentStoreTests(t, func(t *testing.T) environment.Store { return openTest(t, url(t)) })
	})
}
